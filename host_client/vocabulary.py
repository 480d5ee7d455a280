"""The GPU event vocabulary: every event type with all its facts, one entry each, for the probes and the gateway.

The probes (host_client/probes/) choose a type and send it; the gateway (host_client/gateway/) validates, ranks and
speaks it. Both read this one table, so a type is added once (CONTRIBUTING.md, "Adding an event type"). Standard
library and sentinel_core only: `pip install NAME[probes]` must import it without the gateway's extra.
"""

from sentinel_core.alarm import LEVEL_NAMES, NORMAL, P0, P1

# The first three Chinese templates are the RFC's (RFC-2026-08, section 3), word for word (including the ASCII
# spaces around the values and the full-width commas); GPU_UTIL_DROP uses the RFC's default branch.
RFC_ZH_NCCL = "训练集群紧急预警，机架 %s 节点 %s 触发通信死锁，全环算力挂起"
RFC_ZH_XID = "硬件致命故障，机架 %s 节点 %s 第 %d 号卡发生驱动级报错"
RFC_ZH_UTIL = "算力水准预警，机架 %s 节点 %s 算力利用率突降至百分之 %.0f"

# One entry per type, every fact about it:
# - level: the level the type reaches the room at (docs/PROBES.md, "Severity"; the gateway's severity() may raise a
#   hang type to P0, see hang). A P0 type is also "critical": the probe's sender keeps it longest when its queue
#   overflows (CRITICAL_TYPES below).
# - hang: a job whose GPUs stopped computing; the gateway raises it to P0 when the reported utilisation is under 5 %
#   (the RFC's rule, applied only to hangs).
# - gpu_scoped: a fault of one GPU: each GPU is its own incident (key rack:host:type:gpuN), so one GPU's recovery
#   cannot clear another's fault. The debounce stays on the RFC's key rack:host:type.
# - fields: which event values fill the template, in order: r = rack, h = clean host, g = GPU index, u = util.
# - zh, en: the speech templates. A GPU-level type also has node-level wording (zh_node, en_node: rack, host; en_pci:
#   rack, host, PCI address) for gpu_index -1: a probe that cannot number the GPU (a bus neither NVML nor the driver
#   lists, typically one that fell off the bus) must still get its fatal XID through, and must not be made to speak
#   a made-up index.
# - zh_phrase, en_phrase: the short phrase a summary uses.

TYPES = {
    "NCCL_TIMEOUT": {
        "level": P0,
        "hang": True,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": RFC_ZH_NCCL,
        "en": "Training cluster emergency: rack %s node %s hit a communication deadlock, the whole ring is stalled",
        "zh_phrase": "通信死锁",
        "en_phrase": "communication deadlock",
    },
    "XID_FATAL": {
        "level": P0,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": RFC_ZH_XID,
        "en": "Fatal hardware fault: rack %s node %s GPU %d reported a driver-level error",
        "zh_node": "硬件致命故障，机架 %s 节点 %s 一张 GPU 卡发生驱动级报错",
        "en_node": "Fatal hardware fault: rack %s node %s: a GPU reported a driver-level error",
        "en_pci": "Fatal hardware fault: rack %s node %s GPU at PCI %s reported a driver-level error",
        "zh_phrase": "驱动级致命报错",
        "en_phrase": "fatal GPU driver error",
    },
    "GPU_UTIL_DROP": {
        "level": P1,
        "hang": True,
        "gpu_scoped": True,
        "fields": "rhu",
        "zh": RFC_ZH_UTIL,
        "en": "Compute warning: rack %s node %s GPU utilisation dropped to %.0f percent",
        "zh_phrase": "算力利用率突降",
        "en_phrase": "GPU utilisation drop",
    },
    "NVLINK_ERROR": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "NVLink 链路预警，机架 %s 节点 %s 第 %d 号卡 NVLink 链路报错",
        "en": "NVLink warning: rack %s node %s GPU %d reported NVLink errors",
        "zh_node": "NVLink 链路预警，机架 %s 节点 %s 一张 GPU 卡 NVLink 链路报错",
        "en_node": "NVLink warning: rack %s node %s: a GPU reported NVLink errors",
        "en_pci": "NVLink warning: rack %s node %s GPU at PCI %s reported NVLink errors",
        "zh_phrase": "NVLink 链路报错",
        "en_phrase": "NVLink errors",
    },
    "PCIE_DOWNGRADE": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "PCIe 链路降级预警，机架 %s 节点 %s 第 %d 号卡链路速率下降",
        "en": "PCIe warning: rack %s node %s GPU %d link downgraded",
        "zh_node": "PCIe 链路降级预警，机架 %s 节点 %s 一张 GPU 卡链路速率下降",
        "en_node": "PCIe warning: rack %s node %s: a GPU link downgraded",
        "en_pci": "PCIe warning: rack %s node %s GPU at PCI %s link downgraded",
        "zh_phrase": "PCIe 链路降级",
        "en_phrase": "PCIe link downgrade",
    },
    "THERMAL": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "温度预警，机架 %s 节点 %s 第 %d 号卡温度过高",
        "en": "Thermal warning: rack %s node %s GPU %d is overheating",
        "zh_node": "温度预警，机架 %s 节点 %s 一张 GPU 卡温度过高",
        "en_node": "Thermal warning: rack %s node %s: a GPU is overheating",
        "en_pci": "Thermal warning: rack %s node %s GPU at PCI %s is overheating",
        "zh_phrase": "温度过高",
        "en_phrase": "overheating",
    },
    "XID_WARNING": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "硬件预警，机架 %s 节点 %s 第 %d 号卡发生 XID 报错",
        "en": "GPU warning: rack %s node %s GPU %d reported an XID error",
        "zh_node": "硬件预警，机架 %s 节点 %s 一张 GPU 卡发生 XID 报错",
        "en_node": "GPU warning: rack %s node %s: a GPU reported an XID error",
        "en_pci": "GPU warning: rack %s node %s GPU at PCI %s reported an XID error",
        "zh_phrase": "XID 报错",
        "en_phrase": "XID errors",
    },
    "PROGRESS_STALL": {
        "level": P0,
        "hang": True,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练进度停滞，机架 %s 节点 %s 训练步数停止增长",
        "en": "Training stalled: rack %s node %s stopped making progress",
        "zh_phrase": "训练进度停滞",
        "en_phrase": "training stalled",
    },
    # --- GPU node probe types (issue 11) ---
    "GPU_LOST": {
        "level": P0,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "硬件致命故障，机架 %s 节点 %s 第 %d 号卡失联",
        "en": "Fatal hardware fault: rack %s node %s GPU %d is lost",
        "zh_node": "硬件致命故障，机架 %s 节点 %s 一张 GPU 卡失联",
        "en_node": "Fatal hardware fault: rack %s node %s: a GPU is lost",
        "en_pci": "Fatal hardware fault: rack %s node %s GPU at PCI %s is lost",
        "zh_phrase": "GPU 卡失联",
        "en_phrase": "GPU lost",
    },
    "NCCL_NET_ERROR": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "网络预警，机架 %s 节点 %s 集合通信网络报错",
        "en": "Network warning: rack %s node %s reported collective network errors",
        "zh_phrase": "集合通信网络报错",
        "en_phrase": "collective network errors",
    },
    # --- job-killing failures that are not timeouts (issue 24): the process group aborts ---
    "NCCL_PEER_LOST": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 %s 节点 %s 集合通信对端失联，训练任务中断",
        "en": "Training cluster emergency: rack %s node %s lost a communication peer, the job is aborting",
        "zh_phrase": "通信对端失联",
        "en_phrase": "communication peer lost",
    },
    "NCCL_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 %s 节点 %s 集合通信库报错，训练任务中断",
        "en": "Training cluster emergency: rack %s node %s hit a collective communication error, the job is aborting",
        "zh_phrase": "集合通信库报错",
        "en_phrase": "collective communication error",
    },
    "CUDA_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练任务致命错误，机架 %s 节点 %s 发生 CUDA 致命错误，训练任务中断",
        "en": "Fatal training error: rack %s node %s hit a fatal CUDA error, the job is aborting",
        "zh_phrase": "CUDA 致命错误",
        "en_phrase": "fatal CUDA error",
    },
    "RECOVERED": {
        "level": NORMAL,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "机架 %s 节点 %s 已恢复正常",
        "en": "Recovered: rack %s node %s is back to normal",
        "zh_phrase": "已恢复正常",
        "en_phrase": "recovered",
    },
}

RECOVERED = "RECOVERED"
# The probe's constants, one name per type (host_client/probes/ reads events.XID_FATAL and so on).
NCCL_TIMEOUT = "NCCL_TIMEOUT"
XID_FATAL = "XID_FATAL"
XID_WARNING = "XID_WARNING"
PCIE_DOWNGRADE = "PCIE_DOWNGRADE"
THERMAL = "THERMAL"
NVLINK_ERROR = "NVLINK_ERROR"
PROGRESS_STALL = "PROGRESS_STALL"
GPU_UTIL_DROP = "GPU_UTIL_DROP"
GPU_LOST = "GPU_LOST"  # a GPU that stopped answering NVML / nvidia-smi (issue 11)
NCCL_NET_ERROR = "NCCL_NET_ERROR"  # "NCCL WARN NET/IB ...": the earliest sign of a fabric fault
# job-killing failures that are not timeouts (issue 24): the process group aborts, usually minutes before a timeout
NCCL_PEER_LOST = "NCCL_PEER_LOST"  # a peer closed or reset the connection, or exited ("ncclRemoteError")
NCCL_ERROR = "NCCL_ERROR"  # NCCL's error classes, a process group's async exception
CUDA_ERROR = "CUDA_ERROR"  # a sticky CUDA error in a training process (illegal memory access, uncorrectable ECC)

# Read off TYPES, never written by hand:
NAMES = tuple(TYPES)
LEVELS = {t: LEVEL_NAMES[s["level"]] for t, s in TYPES.items() if t != RECOVERED}  # type -> "P0" / "P1"
HANG_TYPES = frozenset(t for t, s in TYPES.items() if s["hang"])
CRITICAL_TYPES = frozenset(t for t, s in TYPES.items() if s["level"] == P0)
GPU_SCOPED = frozenset(t for t, s in TYPES.items() if s["gpu_scoped"])

# An event type we do not know takes the RFC's default branch (the utilisation template), as the RFC's gateway does.
DEFAULT_TYPE = GPU_UTIL_DROP
# The longest detail text an event carries (characters); the probe cuts, the gateway refuses longer.
MAX_DETAIL = 200
