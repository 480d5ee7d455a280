"""CUDA's error table: every cudaError_t / CUresult a training log can name, with the level it reaches the room at.

Facts from NVIDIA's documentation, written out here (numbers, both names, the string cudaGetErrorString /
cuGetErrorString return):
- CUDA Runtime API, cudaError enumeration: https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html
- CUDA Driver API, CUresult enumeration: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html
- the same enumeration with numbers as cuda-python publishes it:
  https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/runtime.html (cudaError_t) and .../driver.html
  (CUresult)
- the numbering before CUDA 10.1 (THCudaCheck's ``cuda runtime error (N)``, Caffe's ``(N vs. 0)``), from the CUDA 10.0
  runtime reference: https://docs.nvidia.com/cuda/archive/10.0/cuda-runtime-api/group__CUDART__TYPES.html

Level (docs/PROBES.md, "CUDA's errors by meaning"): P0 when the documentation says the CUDA context is destroyed
("the process must terminate and relaunch": the sticky errors) or the fault is the node's (hardware, driver, fabric
manager: ECC, NVLink, system not ready, devices unavailable, no device, driver/runtime mismatch); P1 when the error is
the program's own bug or its own sizing (device-side assert, invalid argument, out of memory, no kernel image, too many
resources); None for results that are not failures of the job (teardown, a query not ready, peer access already on).
"""

P0, P1 = "P0", "P1"

# (number, runtime name, driver name or None, description string as printed, level)
# The runtime and driver share their numbers since CUDA 10.1; where only one API has the error, the other name is None.
TABLE = (
    (1, "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", "invalid argument", P1),
    (2, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", P1),
    (3, "cudaErrorInitializationError", "CUDA_ERROR_NOT_INITIALIZED", "initialization error", P0),
    (4, "cudaErrorCudartUnloading", "CUDA_ERROR_DEINITIALIZED", "driver shutting down", None),
    (9, "cudaErrorInvalidConfiguration", None, "invalid configuration argument", P1),
    (13, "cudaErrorInvalidSymbol", None, "invalid device symbol", P1),
    (17, "cudaErrorInvalidDevicePointer", None, "invalid device pointer", P1),
    (34, "cudaErrorStubLibrary", "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library", P0),
    (35, "cudaErrorInsufficientDriver", None, "CUDA driver version is insufficient for CUDA runtime version", P0),
    (36, "cudaErrorCallRequiresNewerDriver", "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", None, P1),
    (
        46,
        "cudaErrorDevicesUnavailable",
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
        "CUDA-capable device(s) is/are busy or unavailable",
        P0,
    ),
    (98, "cudaErrorInvalidDeviceFunction", None, "invalid device function", P1),
    (100, "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", P0),
    (101, "cudaErrorInvalidDevice", "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal", P1),
    (200, "cudaErrorInvalidKernelImage", "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", P1),
    (201, "cudaErrorDeviceUninitialized", "CUDA_ERROR_INVALID_CONTEXT", "invalid device context", P1),
    (
        209,
        "cudaErrorNoKernelImageForDevice",
        "CUDA_ERROR_NO_BINARY_FOR_GPU",
        "no kernel image is available for execution on the device",
        P1,
    ),
    (214, "cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered", P0),
    (
        217,
        "cudaErrorPeerAccessUnsupported",
        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
        "peer access is not supported between these two devices",
        P1,
    ),
    (218, "cudaErrorInvalidPtx", "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed", P1),
    (
        220,
        "cudaErrorNvlinkUncorrectable",
        "CUDA_ERROR_NVLINK_UNCORRECTABLE",
        "uncorrectable NVLink error detected during the execution",
        P0,
    ),
    (
        222,
        "cudaErrorUnsupportedPtxVersion",
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "the provided PTX was compiled with an unsupported toolchain.",
        P1,
    ),
    (
        304,
        "cudaErrorOperatingSystem",
        "CUDA_ERROR_OPERATING_SYSTEM",
        "OS call failed or operation not supported on this OS",
        P0,
    ),
    (400, "cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle", P1),
    (500, "cudaErrorSymbolNotFound", "CUDA_ERROR_NOT_FOUND", "named symbol not found", P1),
    (600, "cudaErrorNotReady", "CUDA_ERROR_NOT_READY", "device not ready", None),
    (700, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered", P0),
    (
        701,
        "cudaErrorLaunchOutOfResources",
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        "too many resources requested for launch",
        P1,
    ),
    (702, "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated", P0),
    (
        704,
        "cudaErrorPeerAccessAlreadyEnabled",
        "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
        "peer access is already enabled",
        None,
    ),
    (709, "cudaErrorContextIsDestroyed", "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed", P0),
    (710, "cudaErrorAssert", "CUDA_ERROR_ASSERT", "device-side assert triggered", P1),
    (714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error", P0),
    (
        715,
        "cudaErrorIllegalInstruction",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "an illegal instruction was encountered",
        P0,
    ),
    (716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address", P0),
    (
        717,
        "cudaErrorInvalidAddressSpace",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "operation not supported on global/shared address space",
        P0,
    ),
    (718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "invalid program counter", P0),
    (719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", P0),
    (
        720,
        "cudaErrorCooperativeLaunchTooLarge",
        "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        "too many blocks in cooperative launch",
        P1,
    ),
    (800, "cudaErrorNotPermitted", "CUDA_ERROR_NOT_PERMITTED", "operation not permitted", P1),
    (801, "cudaErrorNotSupported", "CUDA_ERROR_NOT_SUPPORTED", "operation not supported", P1),
    (802, "cudaErrorSystemNotReady", "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized", P0),
    (
        803,
        "cudaErrorSystemDriverMismatch",
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "system has unsupported display driver / cuda driver combination",
        P0,
    ),
    (
        804,
        "cudaErrorCompatNotSupportedOnDevice",
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "forward compatibility was attempted on non supported HW",
        P0,
    ),
    (805, "cudaErrorMpsConnectionFailed", "CUDA_ERROR_MPS_CONNECTION_FAILED", None, P0),
    (806, "cudaErrorMpsRpcFailure", "CUDA_ERROR_MPS_RPC_FAILURE", None, P0),
    (807, "cudaErrorMpsServerNotReady", "CUDA_ERROR_MPS_SERVER_NOT_READY", None, P0),
    (908, "cudaErrorCapturedEvent", "CUDA_ERROR_CAPTURED_EVENT", None, P1),
    (
        900,
        "cudaErrorStreamCaptureUnsupported",
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        "operation not permitted when stream is capturing",
        P1,
    ),
    (909, "cudaErrorTimeout", "CUDA_ERROR_TIMEOUT", "wait operation timed out", P1),
    (999, "cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error", P0),
)

# CUDA 10.0 and earlier numbered the runtime's errors differently (PyTorch <= 1.4's ``cuda runtime error (N)`` and
# Caffe's ``Check failed: error == cudaSuccess (N vs. 0)``): old number -> today's number. Used only for a line that
# prints a number and no name or string.
LEGACY = {
    4: 719,
    6: 702,
    7: 701,
    8: 98,
    10: 101,
    11: 1,
    29: 4,
    30: 999,
    33: 400,
    38: 100,
    39: 214,
    48: 209,
    59: 710,
    77: 700,
}

# the strings older toolkits returned for the same number (CUDA <= 11: "all CUDA-capable devices are busy or
# unavailable", https://docs.nvidia.com/cuda/archive/10.0/cuda-runtime-api/group__CUDART__TYPES.html)
ALIASES = {"all CUDA-capable devices are busy or unavailable": 46}

# PyTorch's own words for three of these errors (torch/cuda/__init__.py), and the libraries on top of CUDA whose
# statuses a job dies of (cuBLAS, cuDNN: the library's word does not say the node is at fault: P1)
WORDINGS = {
    "no cuda gpus are available": 100,
    "found no nvidia driver on your system": 3,
    "the nvidia driver on your system is too old": 35,
}

BY_NUMBER = {row[0]: row for row in TABLE}
BY_NAME = {}
BY_DESCRIPTION = {}
for _row in TABLE:
    BY_NAME[_row[1].lower()] = _row
    if _row[2]:
        BY_NAME[_row[2].lower()] = _row
    if _row[3]:
        BY_DESCRIPTION[_row[3].lower().rstrip(".")] = _row
for _text, _n in ALIASES.items():
    BY_DESCRIPTION[_text.lower()] = BY_NUMBER[_n]

# Descriptions so particular to CUDA that they name the error on any line (no "CUDA" needed next to them: a user's
# GPUassert macro, a launcher's summary); the others ("invalid argument", "out of memory", "unknown error") only
# inside a CUDA context.
DISTINCT = frozenset(
    d
    for d in BY_DESCRIPTION
    if len(d) >= 20
    and d not in ("invalid configuration argument", "operation not permitted", "operation not supported")
)


def lookup_number(n, *, legacy):
    """The row a bare number names: today's numbering, or CUDA <= 10.0's when the form predates 10.1 (``legacy``)."""
    if legacy and n in LEGACY:
        return BY_NUMBER.get(LEGACY[n])
    return BY_NUMBER.get(n)
