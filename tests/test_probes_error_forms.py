"""Issue 36: CUDA and NCCL failures read by the error they name, not by the sentence around it.

The cases are built from the same tables the probe reads (host_client/probes/cuda_errors.py, nccl_errors.py, written
from NVIDIA's CUDA runtime/driver API and NCCL documentation): every listed error is tried in each form it is printed
in (PyTorch, THCudaCheck, Caffe/glog, TensorFlow's driver status, cuda-samples, nccl-tests, NCCL's own WARN lines),
and a hypothesis property draws the prefixes launchers, loggers and log shippers put in front. Then the incidents:
the many lines of one failure give one event, two unrelated failures two, interleaved ranks one per rank, the
launcher's summary one with the rank, healthy chatter none."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host_client.probes import cuda_errors, events, nccl, nccl_errors

LOG = "/var/log/train/job.log"
CUDA_ROWS = [r for r in cuda_errors.TABLE if r[4] is not None]
NCCL_ROWS = [r for r in nccl_errors.TABLE if r[3] is not None]
TYPE_OF_LEVEL = {"P0": events.CUDA_ERROR, "P1": events.PROGRAM_ERROR}
NCCL_TYPE = {
    nccl_errors.PEER: events.NCCL_PEER_LOST,
    nccl_errors.NCCL_ERR: events.NCCL_ERROR,
    nccl_errors.PROGRAM: events.PROGRAM_ERROR,
}


def cuda_forms(row):
    """Every printed form of one CUDA error: (form name, line)."""
    n, rt, drv, desc, _level = row
    out = [
        ("runtime-name", "merge_sort: failed to synchronize: %s: %s" % (rt, desc or "x")),
        ("cuda-samples", 'CUDA error at bandwidthTest.cu:256 code=%d(%s) "cudaSetDevice(currentDevice)"' % (n, rt)),
    ]
    if drv:
        out.append(
            (
                "tf-driver",
                "E tensorflow/stream_executor/cuda/cuda_driver.cc:951] could not synchronize on CUDA "
                "context: %s: %s :: 0x00007FFA1C753DA5" % (drv, desc or ""),
            )
        )
        out.append(("tf-status", "INTERNAL: Failed to load in-memory CUBIN: %s" % drv))
    if desc:
        out += [
            ("torch", "RuntimeError: CUDA error: %s" % desc),
            (
                "torch-watchdog",
                "[rank0]:[E504 23:32:59.338859795 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID "
                "0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
                "CUDA error: %s" % desc,
            ),
            (
                "thc",
                "RuntimeError: cuda runtime error (%d) : %s at /pytorch/aten/src/THC/THCGeneral.cpp:50" % (n, desc),
            ),
            (
                "thcudacheck",
                "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 "
                "error=%d : %s" % (n, desc),
            ),
            (
                "caffe",
                "F0321 12:00:00.000000 1234 syncedmem.cpp:71] Check failed: error == cudaSuccess (%d vs. 0)  %s"
                % (n, desc),
            ),
            ("cudart", "CUDART Error: %s" % desc),
            ("nccl-tests", "node1: Test CUDA failure common.cu:941 '%s'" % desc),
            ("what", "  what():  CUDA error: %s" % desc),
        ]
    return out


CUDA_CASES = [(row, form, line) for row in CUDA_ROWS for form, line in cuda_forms(row)]


@pytest.mark.parametrize("row,form,line", CUDA_CASES, ids=["%s-%s" % (c[0][1], c[1]) for c in CUDA_CASES])
def test_every_cuda_error_in_every_form_gives_its_class_and_level(row, form, line):
    f = nccl.NcclLog().finding(line, LOG, now=0.0)
    assert f is not None, line
    assert (f.event_type, f.extra["error"]) == (TYPE_OF_LEVEL[row[4]], row[1]), line
    assert events.LEVELS[f.event_type] == row[4]


@pytest.mark.parametrize("row", [r for r in CUDA_ROWS if r[0] not in cuda_errors.LEGACY], ids=lambda r: r[1])
def test_a_bare_number_in_its_context_names_the_error(row):
    n = row[0]
    for line in (
        "RuntimeError: cuda runtime error (%d) : at /pytorch/aten/src/THC/THCGeneral.cpp:50" % n,
        "cudaGetDeviceProperties returned %d" % n,
        "Check failed: error == cudaSuccess (%d vs. 0) " % n,
    ):
        f = nccl.parse_failure(line)
        assert f is not None and f.error == row[1], line


def test_cuda_before_10_1_numbering_is_read_in_the_forms_of_its_time():
    # CUDA 10.0's runtime numbered differently: 59 was the device-side assert, 77 the illegal address, 6 the timeout
    for n, name in ((59, "cudaErrorAssert"), (77, "cudaErrorIllegalAddress"), (6, "cudaErrorLaunchTimeout")):
        f = nccl.parse_failure("THCudaCheck FAIL file=/x/THCStorage.cu line=66 error=%d : " % n)
        assert f.error == name
    # a string and a number that disagree: the string wins (the numbering changed, the words did not)
    assert nccl.parse_failure("cuda runtime error (4) : unspecified launch failure").error == "cudaErrorLaunchFailure"


def test_nccl_warn_cuda_failure_is_nccls_own_unless_the_error_kills_the_context():
    f = nccl.parse_failure(
        "h:1:2 [0] include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'"
    )
    assert (f.cls, f.error) == (nccl.CUDA, "cudaErrorIllegalAddress")
    f = nccl.parse_failure("h:1:2 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'")
    assert f.cls == nccl.NCCL_ERR and f.error.startswith("ncclUnhandledCudaError")


def nccl_forms(row):
    n, name, text, _cls = row
    return [
        ("name", "[rank3]: %s: A call failed." % name),
        (
            "torch",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1275, %s, NCCL version 2.18.5" % text,
        ),
        ("torch-number", "RuntimeError: NCCL Error %d: %s" % (n, text)),
        ("nccl-tests", "node3: Test NCCL failure common.cu:1204 '%s (run with NCCL_DEBUG=INFO for details) / '" % text),
        (
            "async",
            "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised "
            "the following async exception: NCCL error: %s, NCCL version 2.25.1" % text,
        ),
        (
            "proxy-retcode",
            "node1:39964:40075 [0] proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to execute "
            "operation Connect from rank 0, retcode %d" % n,
        ),
    ]


NCCL_CASES = [(row, form, line) for row in NCCL_ROWS for form, line in nccl_forms(row)]


@pytest.mark.parametrize("row,form,line", NCCL_CASES, ids=["%s-%s" % (c[0][1], c[1]) for c in NCCL_CASES])
def test_every_nccl_result_in_every_form_gives_its_class(row, form, line):
    f = nccl.NcclLog().finding(line, LOG, now=0.0)
    assert f is not None, line
    assert (f.event_type, f.extra["error"]) == (NCCL_TYPE[row[3]], row[1]), line


@pytest.mark.parametrize(
    "line",
    [
        "h:1:2 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes",
        "h:1:2 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-gl "
        "(size 14156128), error: No such file or directory (2)",
        "h:1:2 [4] misc/ibvwrap.cc:280 NCCL WARN Call to ibv_create_qp failed with 12 Cannot allocate memory",
        "h:1:2 [4] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out "
        "errno 110",
        "h:1:2 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x7f6f18cb7f40",
        "h:1:2 [0] proxy.cc:1485 NCCL WARN [Service thread] Error encountered progressing operation=Connect, res=3",
        "h:1:2 [0] misc/socket.cc:612 NCCL WARN socketTryAccept: Accept failed: Too many open files",
        "h:1:2 [0] misc/shmutils.cc:93 NCCL WARN Call to posix_fallocate failed: No space left on device",
    ],
)
def test_ncclwarn_lines_at_init_and_teardown_end_the_communicator(line):
    f = nccl.parse_failure(line)
    assert f is not None and f.cls == nccl.NCCL_ERR and f.host == "h" and f.pid == 1, line


# --- prefixes never hide a line ------------------------------------------------------------------------------------
PREFIXES = [
    "",
    "2024-05-11 14:10:52.227 ",
    "[2024-05-11 14:10:52,227] ",
    "2024-05-11T14:10:52.227123456Z ",
    "Sat May 11 14:10:52 2024 ",
    "14:10:52.227 | ERROR | ",
    "[rank%(r)d]: ",
    "[default%(r)d]:[rank%(r)d]: ",
    "(RayWorkerVllm pid=5304, ip=10.0.0.7) ",
    "(WorkerDict pid=664594) ",
    "gpu-node-%(r)d: ",
    "2024-01-02T03:04:05.678901234Z stdout F ",
    "[pod/llama-trainer-worker-%(r)d/pytorch] ",
    "trainer-1  | ",
    "[1,%(r)d]<stderr>:",
    "Fri Aug 11 12:31:45 2023[1,%(r)d]<stdout>:",
    "2024-01-02T03:04:05.678901234Z stderr F [rank%(r)d]: ",
    "\x1b[31m",
    "\x1b[1;31mERROR\x1b[0m ",
    "Epoch 3:  41%|████      | 410/1000 [03:12<04:36]\r",
]
SUFFIXES = ["", "\x1b[0m", "\r", " ", "\n"]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(CUDA_CASES + NCCL_CASES),
    st.sampled_from(PREFIXES),
    st.sampled_from(SUFFIXES),
    st.integers(min_value=0, max_value=511),
)
def test_prefixes_and_terminators_never_hide_the_error(case, prefix, suffix, rank):
    row, form, line = case
    bare = nccl.parse_failure(line)
    f = nccl.parse_failure((prefix % {"r": rank} if "%(" in prefix else prefix) + line + suffix)
    assert f is not None and (f.cls, f.error) == (bare.cls, bare.error), (prefix, line)
    if "[rank%(r)d]" in prefix and "[rank" not in line:
        assert f.rank == rank


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("NCcl WARNCUDA_ERROR:<>[]0123456789rank.()'=\x1b\r")), max_size=200))
def test_failure_parse_never_raises_on_odd_text(text):
    f = nccl.parse_failure(text)
    assert f is None or f.cls in nccl.CLASSES


# --- healthy chatter -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29500 (errno: 22 - Invalid "
        "argument).",  # a connect retry, not the timeout verdict
        "[W1206 18:44:16.99 CUDAAllocatorConfig.cpp:28] CUDA error: out of memory; retrying the allocation after "
        "freeing cached blocks",
        "UserWarning: CUDA initialization: CUDA driver initialization failed, you might not have a CUDA gpu. "
        "Error: out of memory",
        "[I628 20:15:42.000370615 ProcessGroupNCCL.cpp:1501] [PG  Rank 1] Watchdog caught exception: CUDA error: "
        "an illegal memory access was encountered (shutting down)",
        "step 1200 | loss 2.31 | error 0.04 | lr 3e-4",
        "h:1:2 [0] NCCL INFO include/alloc.h:246 -> 1",
        "h:1:2 [0] NCCL INFO Cuda failure 'out of memory' recovered by the allocator",
        "2023-01-01 W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator ran out of memory trying to "
        "allocate 2.0GiB, retrying",
        "warnings.warn('CUDA out of memory, falling back to CPU offload')",
        "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', "
        "args...)` instead.",
        "# error handling: if cudaErrorMemoryAllocation is returned we retry with a smaller batch",
        "main process destroyed cuda before watchdog loop exited: CUDA error: driver shutting down",
    ],
)
def test_healthy_chatter_and_recovered_warnings_give_no_event(line):
    assert nccl.NcclLog().finding(line, LOG, now=0.0) is None, line


# --- one incident per failure --------------------------------------------------------------------------------------
def _events(lines, *, step=0.01, source=LOG):
    """Feed lines (str, or (seconds, str)) through one log as the daemon does; the keys it would send once."""
    log, out, seen, now = nccl.NcclLog(), [], set(), 0.0
    for item in lines:
        if isinstance(item, tuple):
            now, line = item
        else:
            now, line = now + step, item
        f = log.finding(line, source, now=now)
        if f is not None and f.key not in seen:
            seen.add(f.key)
            out.append(f)
    return out


def test_one_failures_many_lines_without_rank_are_one_event():
    lines = [
        "n122:7400:7642 [1] include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
        "n122:7400:7642 [1] NCCL INFO include/alloc.h:246 -> 1",
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in <module>',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: an illegal memory access was encountered",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):",
        "[0]:",
        "  host      : n122",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -6 (pid: 7400)",
        "  error_file: <N/A>",
        "  traceback : Signal 6 (SIGABRT) received by PID 7400",
        "============================================================",
    ]
    (f,) = _events(lines)
    assert f.event_type == events.CUDA_ERROR


def test_two_unrelated_failures_without_rank_in_one_log_are_two_events():
    got = _events(
        [
            (0.0, "RuntimeError: CUDA error: out of memory"),
            (0.5, "  what():  CUDA error: out of memory"),
            (900.0, "RuntimeError: CUDA error: uncorrectable ECC error encountered"),  # the restarted job, later
        ]
    )
    assert [f.event_type for f in got] == [events.PROGRAM_ERROR, events.CUDA_ERROR]
    assert got[0].key != got[1].key


def test_interleaved_ranks_give_one_event_per_rank():
    a = "[rank1]:[E1 ProcessGroupNCCL.cpp:1] [Rank 1] Process group watchdog thread terminated with exception: "
    lines = []
    for r in (1, 2):
        lines.append(a.replace("1]", "%d]" % r) + "CUDA error: unspecified launch failure")
    for r in (2, 1, 2, 1):
        lines.append("[rank%d]: RuntimeError: CUDA error: unspecified launch failure" % r)
        lines.append("[rank%d]: ncclUnhandledCudaError: Call to CUDA function failed." % r)
    got = _events(lines)
    assert sorted(f.extra["rank"] for f in got) == [1, 2]
    assert all(f.event_type == events.CUDA_ERROR for f in got)


SUMMARY = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  rank      : 2 (local_rank: 2)",
    "  exitcode  : -15 (pid: 33053)",
    "  traceback : Signal 15 (SIGTERM) received by PID 33053",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-08-01_13:23:17",
    "  host      : gpu-node-4",
    "  rank      : 11 (local_rank: 3)",
    "  exitcode  : -6 (pid: 33054)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 33054",
    "============================================================",
]


def test_the_launchers_summary_alone_is_the_jobs_death_with_the_root_causes_rank_and_signal():
    (f,) = _events(SUMMARY)  # the consequence records (SIGTERM from the agent) are not incidents
    assert (f.event_type, f.extra["rank"], f.extra["exitcode"]) == (events.JOB_FAILED, 11, -6)
    assert "SIGABRT" in f.extra["error"] and events.LEVELS[f.event_type] == "P0"
    assert f.extra["root_cause"].startswith("Signal 6 (SIGABRT)")


def test_the_agents_failed_line_is_the_first_sign_and_the_summary_joins_it():
    agent = (
        "E0801 13:23:20.000000 32974 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
        "local_rank: 3 (pid: 33054) of binary: /usr/bin/python3"
    )
    (f,) = _events([agent] + SUMMARY)
    assert (f.event_type, f.extra["local_rank"], f.extra["exitcode"]) == (events.JOB_FAILED, 3, -6)
    assert "signal 6" in f.extra["error"]


def test_mpirun_and_wrong_results_are_the_jobs_death():
    (f,) = _events(
        [
            "mpirun noticed that process rank 3 with PID 1234 on node gpu-node-7 exited on signal 6 (Aborted).",
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
        ]
    )
    assert (f.event_type, f.extra["rank"]) == (events.JOB_FAILED, 3)
    (f,) = _events(["#  Out of bounds values : 12 FAILED"])
    assert f.event_type == events.JOB_FAILED and "wrong" in f.extra["error"]
    assert _events(["#  Out of bounds values : 0 OK"]) == []


def test_a_summary_whose_root_cause_traceback_names_a_cuda_error_is_that_error_on_that_rank():
    (f,) = _events(
        [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 5 (local_rank: 5)",
            "  exitcode  : 1 (pid: 99)",
            "  error_file: /tmp/torchelastic_x/error.json",
            "  traceback : Traceback (most recent call last):",
            '    File "train.py", line 3, in <module>',
            "  RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "============================================================",
        ]
    )
    assert (f.event_type, f.extra["rank"], f.extra["error"]) == (events.CUDA_ERROR, 5, "cudaErrorECCUncorrectable")


def test_a_summary_after_the_ranks_own_error_adds_nothing():
    got = _events(
        [
            "[rank3]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was "
            "a network error, NCCL version 2.21.5",
            (20.0, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"),
            "Root Cause (first observed failure):",
            "  rank      : 3 (local_rank: 3)",
            "  exitcode  : -6 (pid: 7)",
            "  traceback : Signal 6 (SIGABRT) received by PID 7",
            "============================================================",
        ]
    )
    assert [f.event_type for f in got] == [events.NCCL_PEER_LOST]


def test_the_store_connect_timeout_is_a_rendezvous_failure_naming_the_store():
    (f,) = _events(
        [
            "[W socket.cpp:601] [c10d] The client socket has failed to connect to [master]:29500 (errno: 111).",
            "[E108 20:04:34.467642512 socket.cpp:957] [c10d] The client socket has timed out after 900s while trying "
            "to connect to (33.145.124.128, 29500).",
            "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect "
            "to (33.145.124.128, 29500).",
        ]
    )
    assert (f.event_type, f.extra["peer"]) == (events.RENDEZVOUS_FAILED, "33.145.124.128:29500")


@pytest.mark.parametrize(
    "line,etype,error",
    [
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, "
            "m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
            events.PROGRAM_ERROR,
            "CUBLAS_STATUS_EXECUTION_FAILED",
        ),
        ("RuntimeError: No CUDA GPUs are available", events.CUDA_ERROR, "cudaErrorNoDevice"),
        ("RuntimeError: Found no NVIDIA driver on your system.", events.CUDA_ERROR, "cudaErrorInitializationError"),
        (
            "h:1:2 [0] misc/socket.cc:564 NCCL WARN socketPollConnect: connect returned Connection refused, exceeded "
            "error retry count (35)",
            events.NCCL_PEER_LOST,
            "Connection refused",
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: ncclCommInitRank(...) failed: unhandled system error",
            events.NCCL_ERROR,
            "ncclSystemError",
        ),
        ("torch.distributed.DistNetworkError: Connection reset by peer", events.RENDEZVOUS_FAILED, None),
        (
            "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
            "store by key '0', but store->get('0') got error: Socket Timeout",
            events.RENDEZVOUS_FAILED,
            None,
        ),
        (
            "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/2 clients joined.",
            events.RENDEZVOUS_FAILED,
            None,
        ),
        (
            "Cuda API error detected: cudaLaunchKernel returned (0x2bd)",
            events.PROGRAM_ERROR,
            "cudaErrorLaunchOutOfResources",
        ),
        ("srun: error: node12: task 3: Killed", events.JOB_FAILED, None),
        (
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1e000",
            events.PROGRAM_ERROR,
            "ncclInvalidUsage",
        ),
    ],
)
def test_more_wordings_of_the_same_errors(line, etype, error):
    f = nccl.NcclLog().finding(line, LOG, now=0.0)
    assert f is not None and f.event_type == etype, line
    if error:
        assert f.extra["error"] == error


def test_a_pasted_summary_in_one_call_is_read_a_line_at_a_time():
    f = nccl.NcclLog().finding("\n".join(SUMMARY), LOG, now=0.0)
    assert (f.event_type, f.extra["rank"]) == (events.JOB_FAILED, 11)
