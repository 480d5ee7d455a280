"""The GPU event vocabulary: every event type with all its facts, one entry each, for the probes and the gateway.

The probes (host_client/probes/) choose a type and send it; the gateway (host_client/gateway/) validates, ranks and
speaks it. Both read this one table, so a type is added once (CONTRIBUTING.md, "Adding an event type"). Standard
library and sentinel_core only: `pip install NAME[probes]` must import it without the gateway's extra.
"""

from sentinel_core.alarm import LEVEL_NAMES, NORMAL, P0, P1

# The first three Chinese templates are the RFC's (RFC-2026-08, section 3), word for word (including the ASCII
# spaces around the values and the full-width commas); GPU_UTIL_DROP uses the RFC's default branch.
RFC_ZH_NCCL = "训练集群紧急预警，机架 {rack} 节点 {host} 触发通信死锁，全环算力挂起"
RFC_ZH_XID = "硬件致命故障，机架 {rack} 节点 {host} 第 {gpu} 号卡发生驱动级报错"
RFC_ZH_UTIL = "算力水准预警，机架 {rack} 节点 {host} 算力利用率突降至百分之 {util:.0f}"

# One entry per type, every fact about it:
# - level: the level the type reaches the room at (docs/PROBES.md, "Severity"; the gateway's severity() may raise a
#   hang type to P0, see hang). A P0 type is also "critical": the probe's sender keeps it longest when its queue
#   overflows (CRITICAL_TYPES below).
# - hang: a job whose GPUs stopped computing; the gateway raises it to P0 when the reported utilisation is under 5 %
#   (the RFC's rule, applied only to hangs).
# - gpu_scoped: a fault of one GPU: each GPU is its own incident (key rack:host:type:gpuN), so one GPU's recovery
#   cannot clear another's fault. The debounce stays on the RFC's key rack:host:type.
# - fields: which of the RFC's values the type needs (r = rack, h = clean host, g = GPU index, u = utilisation): a
#   body without a needed g or u is refused. c = the component ({component}: a NIC port, a switch, a PCI device) the
#   type names when the body carries one; without it the type speaks its node-level wording (zh_node, en_node).
# - zh, en: the speech templates, str.format with named fields (FIELDS below). English leads with the rack and node
#   (a matrix label is the text's first 32 characters); the RFC's Chinese keeps its own order. A GPU-level type also
#   has node-level wording (zh_node, en_node; en_pci, which names {pci}) for gpu_index -1: a probe that cannot number
#   the GPU (a bus neither NVML nor the driver lists, typically one that fell off the bus) must still get its fatal
#   XID through, and must not be made to speak a made-up index.
# - zh_phrase, en_phrase: the short phrase a summary uses.

TYPES = {
    "NCCL_TIMEOUT": {
        "level": P0,
        "hang": True,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": RFC_ZH_NCCL,
        "en": "Rack {rack} node {host}: training cluster emergency, communication deadlock, the whole ring is stalled",
        "zh_phrase": "通信死锁",
        "en_phrase": "communication deadlock",
    },
    "XID_FATAL": {
        "level": P0,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": RFC_ZH_XID,
        "en": "Rack {rack} node {host}: fatal hardware fault, GPU {gpu} reported a driver-level error",
        "zh_node": "硬件致命故障，机架 {rack} 节点 {host} 一张 GPU 卡发生驱动级报错",
        "en_node": "Rack {rack} node {host}: fatal hardware fault, a GPU reported a driver-level error",
        "en_pci": "Rack {rack} node {host}: fatal hardware fault, GPU at PCI {pci} reported a driver-level error",
        "zh_phrase": "驱动级致命报错",
        "en_phrase": "fatal GPU driver error",
    },
    "GPU_UTIL_DROP": {
        "level": P1,
        "hang": True,
        "gpu_scoped": True,
        "fields": "rhu",
        "zh": RFC_ZH_UTIL,
        "en": "Rack {rack} node {host}: compute warning, GPU utilisation dropped to {util:.0f} percent",
        "zh_phrase": "算力利用率突降",
        "en_phrase": "GPU utilisation drop",
    },
    "NVLINK_ERROR": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "NVLink 链路预警，机架 {rack} 节点 {host} 第 {gpu} 号卡 NVLink 链路报错",
        "en": "Rack {rack} node {host}: NVLink warning, GPU {gpu} reported NVLink errors",
        "zh_node": "NVLink 链路预警，机架 {rack} 节点 {host} 一张 GPU 卡 NVLink 链路报错",
        "en_node": "Rack {rack} node {host}: NVLink warning, a GPU reported NVLink errors",
        "en_pci": "Rack {rack} node {host}: NVLink warning, GPU at PCI {pci} reported NVLink errors",
        "zh_phrase": "NVLink 链路报错",
        "en_phrase": "NVLink errors",
    },
    "PCIE_DOWNGRADE": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "PCIe 链路降级预警，机架 {rack} 节点 {host} 第 {gpu} 号卡链路速率下降",
        "en": "Rack {rack} node {host}: PCIe warning, GPU {gpu} link downgraded",
        "zh_node": "PCIe 链路降级预警，机架 {rack} 节点 {host} 一张 GPU 卡链路速率下降",
        "en_node": "Rack {rack} node {host}: PCIe warning, a GPU link downgraded",
        "en_pci": "Rack {rack} node {host}: PCIe warning, GPU at PCI {pci} link downgraded",
        "zh_phrase": "PCIe 链路降级",
        "en_phrase": "PCIe link downgrade",
    },
    "THERMAL": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "温度预警，机架 {rack} 节点 {host} 第 {gpu} 号卡温度过高",
        "en": "Rack {rack} node {host}: thermal warning, GPU {gpu} is overheating",
        "zh_node": "温度预警，机架 {rack} 节点 {host} 一张 GPU 卡温度过高",
        "en_node": "Rack {rack} node {host}: thermal warning, a GPU is overheating",
        "en_pci": "Rack {rack} node {host}: thermal warning, GPU at PCI {pci} is overheating",
        "zh_phrase": "温度过高",
        "en_phrase": "overheating",
    },
    "XID_WARNING": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "硬件预警，机架 {rack} 节点 {host} 第 {gpu} 号卡发生 XID 报错",
        "en": "Rack {rack} node {host}: GPU warning, GPU {gpu} reported an XID error",
        "zh_node": "硬件预警，机架 {rack} 节点 {host} 一张 GPU 卡发生 XID 报错",
        "en_node": "Rack {rack} node {host}: GPU warning, a GPU reported an XID error",
        "en_pci": "Rack {rack} node {host}: GPU warning, GPU at PCI {pci} reported an XID error",
        "zh_phrase": "XID 报错",
        "en_phrase": "XID errors",
    },
    "PROGRESS_STALL": {
        "level": P0,
        "hang": True,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练进度停滞，机架 {rack} 节点 {host} 训练步数停止增长",
        "en": "Rack {rack} node {host}: training stalled, no progress",
        "zh_phrase": "训练进度停滞",
        "en_phrase": "training stalled",
    },
    # --- GPU node probe types (issue 11) ---
    "GPU_LOST": {
        "level": P0,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "硬件致命故障，机架 {rack} 节点 {host} 第 {gpu} 号卡失联",
        "en": "Rack {rack} node {host}: fatal hardware fault, GPU {gpu} is lost",
        "zh_node": "硬件致命故障，机架 {rack} 节点 {host} 一张 GPU 卡失联",
        "en_node": "Rack {rack} node {host}: fatal hardware fault, a GPU is lost",
        "en_pci": "Rack {rack} node {host}: fatal hardware fault, GPU at PCI {pci} is lost",
        "zh_phrase": "GPU 卡失联",
        "en_phrase": "GPU lost",
    },
    "NCCL_NET_ERROR": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "网络预警，机架 {rack} 节点 {host} 集合通信网络报错",
        "en": "Rack {rack} node {host}: network warning, collective network errors",
        "zh_phrase": "集合通信网络报错",
        "en_phrase": "collective network errors",
    },
    # --- job-killing failures that are not timeouts (issue 24): the process group aborts ---
    "NCCL_PEER_LOST": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 {rack} 节点 {host} 集合通信对端失联，训练任务中断",
        "en": "Rack {rack} node {host}: training cluster emergency, a communication peer is lost, the job is aborting",
        "zh_phrase": "通信对端失联",
        "en_phrase": "communication peer lost",
    },
    "NCCL_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 {rack} 节点 {host} 集合通信库报错，训练任务中断",
        "en": "Rack {rack} node {host}: training cluster emergency, collective communication error, the job aborts",
        "zh_phrase": "集合通信库报错",
        "en_phrase": "collective communication error",
    },
    "CUDA_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练任务致命错误，机架 {rack} 节点 {host} 发生 CUDA 致命错误，训练任务中断",
        "en": "Rack {rack} node {host}: fatal CUDA error, the job is aborting",
        "zh_phrase": "CUDA 致命错误",
        "en_phrase": "fatal CUDA error",
    },
    # --- the fabric and the hardware under the GPU (issue 35): {component} is the part the probe names (a NIC
    # port, a switch, a PCI device); an event without one takes the _node wording ---
    "IB_PORT_DOWN": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "网络致命故障，机架 {rack} 节点 {host} InfiniBand 端口 {component} 断开",
        "en": "Rack {rack} node {host}: fatal network fault, InfiniBand port {component} is down",
        "zh_node": "网络致命故障，机架 {rack} 节点 {host} 一个 InfiniBand 端口断开",
        "en_node": "Rack {rack} node {host}: fatal network fault, an InfiniBand port is down",
        "zh_phrase": "InfiniBand 端口断开",
        "en_phrase": "InfiniBand port down",
    },
    "IB_LINK_DEGRADED": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "网络链路降速预警，机架 {rack} 节点 {host} 网卡端口 {component} 速率下降",
        "en": "Rack {rack} node {host}: network warning, port {component} trained at a lower rate",
        "zh_node": "网络链路降速预警，机架 {rack} 节点 {host} 一个网卡端口速率下降",
        "en_node": "Rack {rack} node {host}: network warning, a NIC port trained at a lower rate",
        "zh_phrase": "网络链路降速",
        "en_phrase": "network link slowdown",
    },
    "OPTICS_WARNING": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "光模块误码告警，机架 {rack} 节点 {host} 网卡端口 {component} 光模块或链路报错，请检查光纤跳线",
        "en": "Rack {rack} node {host}: optical-module bit-error warning on port {component}, check the fibre jumpers",
        "zh_node": "光模块误码告警，机架 {rack} 节点 {host} 一个网卡端口光模块或链路报错，请检查光纤跳线",
        "en_node": "Rack {rack} node {host}: optical-module bit-error warning, check the fibre jumpers",
        "zh_phrase": "光模块误码",
        "en_phrase": "optical-module bit errors",
    },
    "NIC_CONGESTION": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "网络拥塞预警，机架 {rack} 节点 {host} 网卡端口 {component} 出现 PFC 暂停风暴或 RoCE 重传",
        "en": (
            "Rack {rack} node {host}: network congestion warning,"
            " port {component} shows a PFC pause storm or RoCE retransmissions"
        ),
        "zh_node": "网络拥塞预警，机架 {rack} 节点 {host} 一个网卡端口出现 PFC 暂停风暴或 RoCE 重传",
        "en_node": "Rack {rack} node {host}: network congestion warning, a PFC pause storm or RoCE retransmissions",
        "zh_phrase": "PFC 暂停风暴或重传",
        "en_phrase": "PFC pause storm or retransmissions",
    },
    "NIC_FAILURE": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "网络致命故障，机架 {rack} 节点 {host} 网卡 {component} 故障",
        "en": "Rack {rack} node {host}: fatal network fault, NIC {component} failed",
        "zh_node": "网络致命故障，机架 {rack} 节点 {host} 一块网卡故障",
        "en_node": "Rack {rack} node {host}: fatal network fault, a NIC failed",
        "zh_phrase": "网卡故障",
        "en_phrase": "NIC failure",
    },
    "NVSWITCH_FATAL": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "硬件致命故障，机架 {rack} 节点 {host} NVSwitch {component} 致命错误",
        "en": "Rack {rack} node {host}: fatal hardware fault, NVSwitch {component} reported a fatal error",
        "zh_node": "硬件致命故障，机架 {rack} 节点 {host} 一个 NVSwitch 致命错误",
        "en_node": "Rack {rack} node {host}: fatal hardware fault, an NVSwitch reported a fatal error",
        "zh_phrase": "NVSwitch 致命错误",
        "en_phrase": "fatal NVSwitch error",
    },
    "NVSWITCH_WARNING": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "NVSwitch 预警，机架 {rack} 节点 {host} NVSwitch {component} 报错",
        "en": "Rack {rack} node {host}: NVSwitch warning, NVSwitch {component} reported an error",
        "zh_node": "NVSwitch 预警，机架 {rack} 节点 {host} 一个 NVSwitch 报错",
        "en_node": "Rack {rack} node {host}: NVSwitch warning, an NVSwitch reported an error",
        "zh_phrase": "NVSwitch 报错",
        "en_phrase": "NVSwitch errors",
    },
    "FABRIC_MANAGER_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "硬件致命故障，机架 {rack} 节点 {host} Fabric Manager 失败，NVLink 网络不可用",
        "en": "Rack {rack} node {host}: fatal fabric fault, Fabric Manager failed, the NVLink fabric is unusable",
        "zh_phrase": "Fabric Manager 失败",
        "en_phrase": "Fabric Manager failure",
    },
    "PCIE_FATAL": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "硬件致命故障，机架 {rack} 节点 {host} PCIe 设备 {component} 发生不可纠正错误",
        "en": "Rack {rack} node {host}: fatal hardware fault, PCIe device {component} reported an uncorrectable error",
        "zh_node": "硬件致命故障，机架 {rack} 节点 {host} 一个 PCIe 设备发生不可纠正错误",
        "en_node": "Rack {rack} node {host}: fatal hardware fault, a PCIe device reported an uncorrectable error",
        "zh_phrase": "PCIe 不可纠正错误",
        "en_phrase": "uncorrectable PCIe error",
    },
    "PCIE_AER_STORM": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rhc",
        "zh": "PCIe 预警，机架 {rack} 节点 {host} PCIe 设备 {component} 可纠正错误激增",
        "en": "Rack {rack} node {host}: PCIe warning, PCIe device {component} reports a storm of corrected errors",
        "zh_node": "PCIe 预警，机架 {rack} 节点 {host} 一个 PCIe 设备可纠正错误激增",
        "en_node": "Rack {rack} node {host}: PCIe warning, a PCIe device reports a storm of corrected errors",
        "zh_phrase": "PCIe 可纠正错误激增",
        "en_phrase": "corrected PCIe error storm",
    },
    "GPU_MEMORY_ERROR": {
        "level": P0,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "硬件致命故障，机架 {rack} 节点 {host} 第 {gpu} 号卡显存不可纠正错误",
        "en": "Rack {rack} node {host}: fatal hardware fault, GPU {gpu} has an uncorrectable memory error",
        "zh_node": "硬件致命故障，机架 {rack} 节点 {host} 一张 GPU 卡显存不可纠正错误",
        "en_node": "Rack {rack} node {host}: fatal hardware fault, a GPU has an uncorrectable memory error",
        "en_pci": "Rack {rack} node {host}: fatal hardware fault, GPU at PCI {pci} has an uncorrectable memory error",
        "zh_phrase": "显存不可纠正错误",
        "en_phrase": "uncorrectable GPU memory error",
    },
    "GPU_RESET_PENDING": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "显存预警，机架 {rack} 节点 {host} 第 {gpu} 号卡显存坏行修复待重置生效，下次排空时请重置该卡",
        "en": (
            "Rack {rack} node {host}: GPU memory warning,"
            " GPU {gpu} needs a reset at the next drain to apply a memory repair"
        ),
        "zh_node": "显存预警，机架 {rack} 节点 {host} 一张 GPU 卡显存坏行修复待重置生效，下次排空时请重置该卡",
        "en_node": (
            "Rack {rack} node {host}: GPU memory warning,"
            " a GPU needs a reset at the next drain to apply a memory repair"
        ),
        "en_pci": (
            "Rack {rack} node {host}: GPU memory warning,"
            " GPU at PCI {pci} needs a reset at the next drain to apply a memory repair"
        ),
        "zh_phrase": "显存修复待重置",
        "en_phrase": "memory repair pending a reset",
    },
    "GPU_THROTTLE": {
        "level": P1,
        "hang": False,
        "gpu_scoped": True,
        "fields": "rhg",
        "zh": "降频预警，机架 {rack} 节点 {host} 第 {gpu} 号卡硬件降频",
        "en": "Rack {rack} node {host}: throttling warning, GPU {gpu} is held back by a hardware slowdown",
        "zh_node": "降频预警，机架 {rack} 节点 {host} 一张 GPU 卡硬件降频",
        "en_node": "Rack {rack} node {host}: throttling warning, a GPU is held back by a hardware slowdown",
        "en_pci": "Rack {rack} node {host}: throttling warning, GPU at PCI {pci} is held back by a hardware slowdown",
        "zh_phrase": "硬件降频",
        "en_phrase": "hardware slowdown",
    },
    # --- issue 36: the program's own bug, the launcher's report of a death, a rendezvous that never completed ---
    "PROGRAM_ERROR": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练任务程序错误，机架 {rack} 节点 {host} 训练程序自身出错，任务中断",
        "en": "Rack {rack} node {host}: training program error, the job died on its own bug",
        "zh_phrase": "训练程序自身错误",
        "en_phrase": "training program error",
    },
    "JOB_FAILED": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 {rack} 节点 {host} 训练进程退出，训练任务中断",
        "en": "Rack {rack} node {host}: training cluster emergency, a training process died, the job is down",
        "zh_phrase": "训练进程退出",
        "en_phrase": "training process died",
    },
    "RENDEZVOUS_FAILED": {
        "level": P0,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 {rack} 节点 {host} 无法连接训练协调服务，任务无法启动",
        "en": (
            "Rack {rack} node {host}: training cluster emergency, cannot reach the rendezvous store,"
            " the job cannot start"
        ),
        "zh_phrase": "训练协调服务连接超时",
        "en_phrase": "rendezvous store unreachable",
    },
    # --- the probe's own health (issue 37): a source it reads is gone, so the room is blind to what it would show ---
    "PROBE_SOURCE_DOWN": {
        "level": P1,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "探针预警，机架 {rack} 节点 {host} 的探针无法读取{source}",
        "en": "Rack {rack} node {host}: probe blind, {source} unreadable",
        "zh_phrase": "探针数据源失效",
        "en_phrase": "probe source down",
    },
    "RECOVERED": {
        "level": NORMAL,
        "hang": False,
        "gpu_scoped": False,
        "fields": "rh",
        "zh": "机架 {rack} 节点 {host} 已恢复正常",
        "en": "Rack {rack} node {host}: recovered, back to normal",
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
PROBE_SOURCE_DOWN = "PROBE_SOURCE_DOWN"  # a source of the probe cannot be read (probes/source_health.py)
CUDA_ERROR = "CUDA_ERROR"  # a sticky CUDA error in a training process (illegal memory access, uncorrectable ECC)
# issue 36: the program's own bug (device-side assert, invalid argument, out of memory, NCCL invalid usage): P1
PROGRAM_ERROR = "PROGRAM_ERROR"
JOB_FAILED = "JOB_FAILED"  # the launcher (torchelastic) reports a rank's process dead: exit code, signal
RENDEZVOUS_FAILED = "RENDEZVOUS_FAILED"  # c10d store connect timed out: the job cannot start

# the fabric and the hardware under the GPU (issue 35; docs/PROBES.md "Fabric and hardware sources")
IB_PORT_DOWN = "IB_PORT_DOWN"  # an InfiniBand/RoCE port that was ACTIVE left ACTIVE
IB_LINK_DEGRADED = "IB_LINK_DEGRADED"  # a port trained below its first rate or the configured one
OPTICS_WARNING = "OPTICS_WARNING"  # the RFC's 光模块误码告警: hot module, rx power, bit-error counters rising
NIC_CONGESTION = "NIC_CONGESTION"  # PFC pause storm, RoCE retransmissions
NIC_FAILURE = "NIC_FAILURE"  # mlx5 firmware health compromised, PCIe fatal below a NIC
NVSWITCH_FATAL = "NVSWITCH_FATAL"  # SXid marked Fatal
NVSWITCH_WARNING = "NVSWITCH_WARNING"  # SXid marked Non-fatal
FABRIC_MANAGER_ERROR = "FABRIC_MANAGER_ERROR"  # the Fabric Manager log's failures
PCIE_FATAL = "PCIE_FATAL"  # AER uncorrectable fatal / DPC / surprise down on a device that is neither GPU nor NIC
PCIE_AER_STORM = "PCIE_AER_STORM"  # corrected AER errors at a storm rate
GPU_MEMORY_ERROR = "GPU_MEMORY_ERROR"  # row remap failed, uncorrectable ECC rising with no spare row
GPU_RESET_PENDING = "GPU_RESET_PENDING"  # a row remap / page retirement waiting for a GPU reset
GPU_THROTTLE = "GPU_THROTTLE"  # HW slowdown / HW thermal / HW power brake held over a window

# Read off TYPES, never written by hand:
NAMES = tuple(TYPES)
LEVELS = {t: LEVEL_NAMES[s["level"]] for t, s in TYPES.items() if t != RECOVERED}  # type -> "P0" / "P1"
HANG_TYPES = frozenset(t for t, s in TYPES.items() if s["hang"])
CRITICAL_TYPES = frozenset(t for t, s in TYPES.items() if s["level"] == P0)
GPU_SCOPED = frozenset(t for t, s in TYPES.items() if s["gpu_scoped"])
# Faults of one part that is not a GPU (a NIC port, an NVSwitch, a PCIe device: issue 35): each component is its own
# incident (key rack:host:type:<component>), so port mlx5_3/1 recovering cannot clear mlx5_5/1.
COMPONENT_SCOPED = frozenset(t for t, s in TYPES.items() if "c" in s["fields"])
# The fabric warnings a hang may be said to follow (the probe sends after_type / after_component), and the clause
# the hang's text then ends with: the RFC's story, where to look first.
AFTER_TYPES = frozenset((OPTICS_WARNING, NIC_CONGESTION, IB_PORT_DOWN, IB_LINK_DEGRADED))
AFTER_TEXT = {
    "zh": "，此前网卡端口 {after_component} {after_phrase}",
    "en": ", after {after_phrase} on port {after_component}",
}

# An event type we do not know takes the RFC's default branch (the utilisation template), as the RFC's gateway does.
DEFAULT_TYPE = GPU_UTIL_DROP
# The longest detail text an event carries (characters); the probe cuts, the gateway refuses longer.
MAX_DETAIL = 200

# The named fields a template may use (gateway [templates], checked at load): the RFC's values, then the facts an
# event may carry (docs/GATEWAY.md, "Spoken facts").
FIELDS = ("rack", "host", "gpu", "util", "xid", "meaning", "action", "pci", "source", "component")

# The facts a template does not name itself, appended in this order when the event carries them: the XID and what
# it means, the GPU's PCI address, the action. Absent facts add nothing, so an RFC body speaks the RFC's text.
FACT_TEXT = {
    "zh": (("xid", "，XID {xid}"), ("meaning", " {meaning}"), ("pci", "，PCI {pci}"), ("action", "，请{action}")),
    "en": (("xid", "; XID {xid}"), ("meaning", ", {meaning}"), ("pci", "; PCI {pci}"), ("action", "; {action}")),
}

# What an XID means, in a few words each language, for the codes NVIDIA's XID catalogue
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) lists that a training cluster meets; a code not here
# is spoken by its number alone.
XID_MEANING = {
    13: ("图形引擎异常", "graphics engine exception"),
    31: ("显存页错误", "GPU memory page fault"),
    43: ("GPU 停止处理", "GPU stopped processing"),
    45: ("任务被提前清理", "preemptive cleanup"),
    48: ("显存双比特 ECC 错误", "double-bit ECC error"),
    61: ("内部微控制器断点", "microcontroller breakpoint"),
    62: ("内部微控制器停机", "microcontroller halt"),
    63: ("显存行重映射", "memory row remapping"),
    64: ("显存行重映射失败", "memory row remapping failed"),
    74: ("NVLink 错误", "NVLink error"),
    79: ("GPU 掉卡", "GPU fell off the bus"),
    92: ("单比特 ECC 错误过多", "high single-bit ECC rate"),
    94: ("可隔离的显存错误", "contained memory error"),
    95: ("不可隔离的显存错误", "uncontained memory error"),
    109: ("上下文切换超时", "context switch timeout"),
    119: ("GSP 固件超时", "GSP timeout"),
    120: ("GSP 固件错误", "GSP error"),
    140: ("未恢复的 ECC 错误", "unrecovered ECC error"),
    154: ("恢复动作变更", "recovery action changed"),
}
for _code in range(144, 151):  # NVLink5 (R570+)
    XID_MEANING[_code] = ("NVLink 错误", "NVLink error")

# The catalogue's immediate action (column "Resolution Bucket"; host_client/probes/xid.py sends it as "action"),
# in words the room acts on. None: nothing to do now (the catalogue says ignore), said as nothing.
ACTIONS = {
    "RESTART_BM": ("重启节点", "restart the node"),
    "RESTART_VM": ("重启虚拟机", "restart the VM"),
    "RESET_GPU": ("重置 GPU", "reset the GPU"),
    "RESTART_APP": ("重启训练任务", "restart the job"),
    "WORKFLOW_XID_48": ("重置 GPU 并检查显存", "reset the GPU and check its memory"),
    "WORKFLOW_NVLINK_ERR": ("检查 NVLink 链路", "check the NVLink links"),
    "WORKFLOW_NVLINK5_ERR": ("检查 NVLink 链路", "check the NVLink links"),
    "WORKFLOW_XID_45": ("检查训练任务", "check the job"),
    "XID_154": ("按驱动提示恢复", "recover as the driver asks"),
    "CHECK_MECHANICALS": ("检查供电与散热", "check power and cooling"),
    "UPDATE_SWFW": ("更新驱动与固件", "update driver and firmware"),
    "CHECK_UVM": ("检查统一内存", "check unified memory"),
    "IGNORE": None,
}


def facts(xid, action, language):
    """The named facts an event's xid and action give in one language: {"xid", "meaning", "action"}, None where
    unknown."""
    i = 0 if language == "zh" else 1
    meaning = XID_MEANING.get(xid) if xid is not None else None
    words = ACTIONS.get(action) if action is not None else None
    return {
        "xid": xid,
        "meaning": meaning[i] if meaning else None,
        "action": words[i] if words else None,
    }


# The kinds of source a probe reads (probes/source_health.py registers each), in the words the room hears when
# one is down. A new source kind adds its line here.
SOURCE_KINDS = {
    "kernel_log": ("内核日志", "kernel log"),
    "nccl_log": ("NCCL 日志", "NCCL log"),
    "gpu": ("GPU 读数", "GPU readings"),
    "progress": ("训练进度套接字", "progress socket"),
    # the fabric and the hardware under the GPU (issue 35)
    "fabric": ("网卡端口状态", "NIC port state"),
    "ethtool": ("网卡统计与光模块", "NIC statistics and optics"),
    "fabric_manager": ("Fabric Manager 日志", "Fabric Manager log"),
    "pcie": ("PCIe 错误计数", "PCIe error counters"),
}
SOURCE_UNNAMED = ("数据源", "a source")


def source_words(kinds, language):
    """The words for a source kind, or a comma-separated list of them ("kernel_log,nccl_log"); unknown kinds and
    an empty list are said as "a source"."""
    i = 0 if language == "zh" else 1
    words = [SOURCE_KINDS[k][i] for k in (kinds or "").split(",") if k in SOURCE_KINDS]
    if not words:
        return SOURCE_UNNAMED[i]
    return ("、" if i == 0 else " and ").join(words)
