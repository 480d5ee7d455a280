"""GPU events as probes send them: validation, the RFC's host cleaning and severity rule, speech templates.

The RFC's gateway (RFC-2026-08, section 3) defines the body ``{cluster_rack, node_host, event_type, gpu_index,
gpu_util}``, the debounce key ``rack:clean-host:event_type``, the rule "NCCL_TIMEOUT or XID_FATAL or gpu_util < 5 is
critical" and three Chinese speech templates. Everything here reproduces those byte for byte; the extra event types
are ours and documented in docs/GATEWAY.md.
"""

from __future__ import annotations

import math
import re
from typing import overload

from host_client.errors import SentinelError
from sentinel_core.alarm import NORMAL, P0, P1

# The RFC's Go regexp `-[a-f0-9]{8,10}$`: RE2's `$` is end of text, Python's would also match before a final
# newline, hence \Z.
_HOST_HASH = re.compile(r"-[a-f0-9]{8,10}\Z")
HOST_MAX = 25
CRITICAL_UTIL = 5.0

_TYPE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,47}\Z")
# The kernel's bus id as XID lines print it ("PCI:0000:3b:00" or "0000:3b:00.0"); only used for wording.
_PCI_RE = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,8}){1,3}(?:\.[0-7])?)\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def clean_host(raw: str) -> str:
    """The RFC's cleanHostIdentifier: drop a trailing -<8..10 hex> pod/instance hash, keep at most 25 characters.

    Go cuts 25 bytes; host names are ASCII, where bytes and characters agree. For a non-ASCII name we cut characters
    so the result stays valid text.
    """
    return _HOST_HASH.sub("", raw)[:HOST_MAX]


# A cluster has a few hundred racks and a storm names each thousands of times, and a node's GPUs report one after
# another under one host name. These memos hold the racks and host names parse_event has validated (and a host's
# cleaned form): a known one is not checked again, and the groups' rack and host sets keep one string per rack, not
# one per event. Bounded: cleared when full. Only validated strings go in, so a hit means "valid".
_RACKS: dict = {}  # rack -> the same string
_HOSTS: dict = {}  # raw host -> clean_host(raw host)
_MEMO_MAX = 4096


def debounce_key(rack: str, clean: str, event_type: str) -> str:
    return "%s:%s:%s" % (rack, clean, event_type)


# Per event type: level, whether the GPU index is part of the message, Chinese and English speech templates,
# and the short phrase a summary uses. The first three Chinese templates are the RFC's, word for word (including
# the ASCII spaces around the values and the full-width commas); GPU_UTIL_DROP uses the RFC's default branch.
RFC_ZH_NCCL = "训练集群紧急预警，机架 %s 节点 %s 触发通信死锁，全环算力挂起"
RFC_ZH_XID = "硬件致命故障，机架 %s 节点 %s 第 %d 号卡发生驱动级报错"
RFC_ZH_UTIL = "算力水准预警，机架 %s 节点 %s 算力利用率突降至百分之 %.0f"

# fields: which event values fill the template, in order: r = rack, h = clean host, g = GPU index, u = util.
# A GPU-level type also has node-level wording (zh_node, en_node: rack, host; en_pci: rack, host, PCI address) for
# gpu_index -1: a probe that cannot number the GPU (a bus neither NVML nor the driver lists, typically one that fell
# off the bus) must still get its fatal XID through, and must not be made to speak a made-up index.
EVENT_TYPES = {
    "NCCL_TIMEOUT": {
        "level": P0,
        "fields": "rh",
        "zh": RFC_ZH_NCCL,
        "en": "Training cluster emergency: rack %s node %s hit a communication deadlock, the whole ring is stalled",
        "zh_phrase": "通信死锁",
        "en_phrase": "communication deadlock",
    },
    "XID_FATAL": {
        "level": P0,
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
        "fields": "rhu",
        "zh": RFC_ZH_UTIL,
        "en": "Compute warning: rack %s node %s GPU utilisation dropped to %.0f percent",
        "zh_phrase": "算力利用率突降",
        "en_phrase": "GPU utilisation drop",
    },
    "NVLINK_ERROR": {
        "level": P1,
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
        "fields": "rh",
        "zh": "训练进度停滞，机架 %s 节点 %s 训练步数停止增长",
        "en": "Training stalled: rack %s node %s stopped making progress",
        "zh_phrase": "训练进度停滞",
        "en_phrase": "training stalled",
    },
    # --- GPU node probe types (issue 11; the probe's own table is host_client/probes/events.py LEVELS) ---
    "GPU_LOST": {
        "level": P0,
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
        "fields": "rh",
        "zh": "网络预警，机架 %s 节点 %s 集合通信网络报错",
        "en": "Network warning: rack %s node %s reported collective network errors",
        "zh_phrase": "集合通信网络报错",
        "en_phrase": "collective network errors",
    },
    # --- job-killing failures that are not timeouts (issue 24): the process group aborts ---
    "NCCL_PEER_LOST": {
        "level": P0,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 %s 节点 %s 集合通信对端失联，训练任务中断",
        "en": "Training cluster emergency: rack %s node %s lost a communication peer, the job is aborting",
        "zh_phrase": "通信对端失联",
        "en_phrase": "communication peer lost",
    },
    "NCCL_ERROR": {
        "level": P0,
        "fields": "rh",
        "zh": "训练集群紧急预警，机架 %s 节点 %s 集合通信库报错，训练任务中断",
        "en": "Training cluster emergency: rack %s node %s hit a collective communication error, the job is aborting",
        "zh_phrase": "集合通信库报错",
        "en_phrase": "collective communication error",
    },
    "CUDA_ERROR": {
        "level": P0,
        "fields": "rh",
        "zh": "训练任务致命错误，机架 %s 节点 %s 发生 CUDA 致命错误，训练任务中断",
        "en": "Fatal training error: rack %s node %s hit a fatal CUDA error, the job is aborting",
        "zh_phrase": "CUDA 致命错误",
        "en_phrase": "fatal CUDA error",
    },
    # --- fabric and hardware under the GPU (issue 35): "c" is the event's component field (the NIC port, the
    # switch and link, the PCI device); an event without one takes the _node wording ---
    "IB_PORT_DOWN": {
        "level": P0,
        "fields": "rhc",
        "zh": "网络致命故障，机架 %s 节点 %s InfiniBand 端口 %s 断开",
        "en": "Fatal network fault: rack %s node %s InfiniBand port %s is down",
        "zh_node": "网络致命故障，机架 %s 节点 %s 一个 InfiniBand 端口断开",
        "en_node": "Fatal network fault: rack %s node %s: an InfiniBand port is down",
        "zh_phrase": "InfiniBand 端口断开",
        "en_phrase": "InfiniBand port down",
    },
    "IB_LINK_DEGRADED": {
        "level": P1,
        "fields": "rhc",
        "zh": "网络链路降速预警，机架 %s 节点 %s 网卡端口 %s 速率下降",
        "en": "Network warning: rack %s node %s port %s trained at a lower rate",
        "zh_node": "网络链路降速预警，机架 %s 节点 %s 一个网卡端口速率下降",
        "en_node": "Network warning: rack %s node %s: a NIC port trained at a lower rate",
        "zh_phrase": "网络链路降速",
        "en_phrase": "network link slowdown",
    },
    "OPTICS_WARNING": {
        "level": P1,
        "fields": "rhc",
        "zh": "光模块误码告警，机架 %s 节点 %s 网卡端口 %s 光模块或链路报错，请检查光纤跳线",
        "en": "Optical-module bit-error warning: rack %s node %s port %s, check the fibre jumpers",
        "zh_node": "光模块误码告警，机架 %s 节点 %s 一个网卡端口光模块或链路报错，请检查光纤跳线",
        "en_node": "Optical-module bit-error warning: rack %s node %s, check the fibre jumpers",
        "zh_phrase": "光模块误码",
        "en_phrase": "optical-module bit errors",
    },
    "NIC_CONGESTION": {
        "level": P1,
        "fields": "rhc",
        "zh": "网络拥塞预警，机架 %s 节点 %s 网卡端口 %s 出现 PFC 暂停风暴或 RoCE 重传",
        "en": "Network congestion warning: rack %s node %s port %s shows a PFC pause storm or RoCE retransmissions",
        "zh_node": "网络拥塞预警，机架 %s 节点 %s 一个网卡端口出现 PFC 暂停风暴或 RoCE 重传",
        "en_node": "Network congestion warning: rack %s node %s: a PFC pause storm or RoCE retransmissions",
        "zh_phrase": "PFC 暂停风暴或重传",
        "en_phrase": "PFC pause storm or retransmissions",
    },
    "NIC_FAILURE": {
        "level": P0,
        "fields": "rhc",
        "zh": "网络致命故障，机架 %s 节点 %s 网卡 %s 故障",
        "en": "Fatal network fault: rack %s node %s NIC %s failed",
        "zh_node": "网络致命故障，机架 %s 节点 %s 一块网卡故障",
        "en_node": "Fatal network fault: rack %s node %s: a NIC failed",
        "zh_phrase": "网卡故障",
        "en_phrase": "NIC failure",
    },
    "NVSWITCH_FATAL": {
        "level": P0,
        "fields": "rhc",
        "zh": "硬件致命故障，机架 %s 节点 %s NVSwitch %s 致命错误",
        "en": "Fatal hardware fault: rack %s node %s NVSwitch %s reported a fatal error",
        "zh_node": "硬件致命故障，机架 %s 节点 %s 一个 NVSwitch 致命错误",
        "en_node": "Fatal hardware fault: rack %s node %s: an NVSwitch reported a fatal error",
        "zh_phrase": "NVSwitch 致命错误",
        "en_phrase": "fatal NVSwitch error",
    },
    "NVSWITCH_WARNING": {
        "level": P1,
        "fields": "rhc",
        "zh": "NVSwitch 预警，机架 %s 节点 %s NVSwitch %s 报错",
        "en": "NVSwitch warning: rack %s node %s NVSwitch %s reported an error",
        "zh_node": "NVSwitch 预警，机架 %s 节点 %s 一个 NVSwitch 报错",
        "en_node": "NVSwitch warning: rack %s node %s: an NVSwitch reported an error",
        "zh_phrase": "NVSwitch 报错",
        "en_phrase": "NVSwitch errors",
    },
    "FABRIC_MANAGER_ERROR": {
        "level": P0,
        "fields": "rh",
        "zh": "硬件致命故障，机架 %s 节点 %s Fabric Manager 失败，NVLink 网络不可用",
        "en": "Fatal fabric fault: rack %s node %s Fabric Manager failed, the NVLink fabric is unusable",
        "zh_phrase": "Fabric Manager 失败",
        "en_phrase": "Fabric Manager failure",
    },
    "PCIE_FATAL": {
        "level": P0,
        "fields": "rhc",
        "zh": "硬件致命故障，机架 %s 节点 %s PCIe 设备 %s 发生不可纠正错误",
        "en": "Fatal hardware fault: rack %s node %s PCIe device %s reported an uncorrectable error",
        "zh_node": "硬件致命故障，机架 %s 节点 %s 一个 PCIe 设备发生不可纠正错误",
        "en_node": "Fatal hardware fault: rack %s node %s: a PCIe device reported an uncorrectable error",
        "zh_phrase": "PCIe 不可纠正错误",
        "en_phrase": "uncorrectable PCIe error",
    },
    "PCIE_AER_STORM": {
        "level": P1,
        "fields": "rhc",
        "zh": "PCIe 预警，机架 %s 节点 %s PCIe 设备 %s 可纠正错误激增",
        "en": "PCIe warning: rack %s node %s PCIe device %s reports a storm of corrected errors",
        "zh_node": "PCIe 预警，机架 %s 节点 %s 一个 PCIe 设备可纠正错误激增",
        "en_node": "PCIe warning: rack %s node %s: a PCIe device reports a storm of corrected errors",
        "zh_phrase": "PCIe 可纠正错误激增",
        "en_phrase": "corrected PCIe error storm",
    },
    "GPU_MEMORY_ERROR": {
        "level": P0,
        "fields": "rhg",
        "zh": "硬件致命故障，机架 %s 节点 %s 第 %d 号卡显存不可纠正错误",
        "en": "Fatal hardware fault: rack %s node %s GPU %d has an uncorrectable memory error",
        "zh_node": "硬件致命故障，机架 %s 节点 %s 一张 GPU 卡显存不可纠正错误",
        "en_node": "Fatal hardware fault: rack %s node %s: a GPU has an uncorrectable memory error",
        "en_pci": "Fatal hardware fault: rack %s node %s GPU at PCI %s has an uncorrectable memory error",
        "zh_phrase": "显存不可纠正错误",
        "en_phrase": "uncorrectable GPU memory error",
    },
    "GPU_RESET_PENDING": {
        "level": P1,
        "fields": "rhg",
        "zh": "显存预警，机架 %s 节点 %s 第 %d 号卡显存坏行修复待重置生效，下次排空时请重置该卡",
        "en": "GPU memory warning: rack %s node %s GPU %d needs a reset at the next drain to apply a memory repair",
        "zh_node": "显存预警，机架 %s 节点 %s 一张 GPU 卡显存坏行修复待重置生效，下次排空时请重置该卡",
        "en_node": (
            "GPU memory warning: rack %s node %s: a GPU needs a reset at the next drain to apply a memory repair"
        ),
        "en_pci": "GPU memory warning: rack %s node %s GPU at PCI %s needs a reset to apply a memory repair",
        "zh_phrase": "显存修复待重置",
        "en_phrase": "memory repair pending a reset",
    },
    "GPU_THROTTLE": {
        "level": P1,
        "fields": "rhg",
        "zh": "降频预警，机架 %s 节点 %s 第 %d 号卡硬件降频",
        "en": "Throttling warning: rack %s node %s GPU %d is held back by a hardware slowdown",
        "zh_node": "降频预警，机架 %s 节点 %s 一张 GPU 卡硬件降频",
        "en_node": "Throttling warning: rack %s node %s: a GPU is held back by a hardware slowdown",
        "en_pci": "Throttling warning: rack %s node %s GPU at PCI %s is held back by a hardware slowdown",
        "zh_phrase": "硬件降频",
        "en_phrase": "hardware slowdown",
    },
    "RECOVERED": {
        "level": NORMAL,
        "fields": "rh",
        "zh": "机架 %s 节点 %s 已恢复正常",
        "en": "Recovered: rack %s node %s is back to normal",
        "zh_phrase": "已恢复正常",
        "en_phrase": "recovered",
    },
}
# Faults of one GPU: each GPU is its own incident (key rack:host:type:gpuN), so one GPU's recovery cannot clear
# another's fault. The debounce stays on the RFC's key rack:host:type (see service.py for how a debounced second
# GPU is still represented).
GPU_SCOPED = frozenset(
    (
        "XID_FATAL",
        "XID_WARNING",
        "NVLINK_ERROR",
        "PCIE_DOWNGRADE",
        "THERMAL",
        "GPU_UTIL_DROP",
        "GPU_LOST",
        "GPU_MEMORY_ERROR",
        "GPU_RESET_PENDING",
        "GPU_THROTTLE",
    )
)
# Faults of one part that is not a GPU (a NIC port, an NVSwitch, a PCIe device: issue 35): each component is its
# own incident (key rack:host:type:<component>), so port mlx5_3/1 recovering cannot clear mlx5_5/1.
COMPONENT_SCOPED = frozenset(t for t, spec in EVENT_TYPES.items() if "c" in spec["fields"])
# the component as a probe names it ("mlx5_3/1", "nvswitch3 link 44", "0000:3b:00.0"): words the alarm, keys it
_COMPONENT_RE = re.compile(r"[A-Za-z0-9_.:/ -]{1,40}\Z")

# An event type we do not know takes the RFC's default branch (the utilisation template), as the RFC's gateway does.
DEFAULT_TYPE = "GPU_UTIL_DROP"
# Metrics label for unknown types, so a misbehaving probe cannot grow the label set without bound.
OTHER_TYPE = "OTHER"

# Extra optional fields a probe may send; documented in docs/GATEWAY.md. Anything else is ignored.
MAX_DETAIL = 200


class EventError(SentinelError, ValueError):
    """A request body that is not a valid event. code is machine-readable; str() is for humans."""

    def __init__(self, code: str, message: str, status: int = 422):
        super().__init__(message)
        self.code = code
        self.status = status


class Event:
    """A validated GPU event. recovers: for a recovery, the event type that cleared (else None).

    fault_type: the type the event is about (a recovery's, the type it clears). rfc_key: the RFC's debounce key
    rack:clean-host:fault_type. key: the incident's name: the RFC key, plus :gpuN for a numbered GPU's fault (an
    unnumbered GPU, -1, stays at node level: there is nothing to tell two of them apart by). All three are set once
    here, plain attributes: every event reads them, and a property each would cost a Python call per read."""

    __slots__ = (
        "rack",
        "host",
        "raw_host",
        "event_type",
        "gpu_index",
        "gpu_util",
        "recovers",
        "detail",
        "xid",
        "known",
        "pci",
        "component",
        "after",
        "ts",
        "fault_type",
        "rfc_key",
        "key",
    )

    def __init__(
        self,
        rack,
        raw_host,
        event_type,
        gpu_index=None,
        gpu_util=None,
        recovers=None,
        detail=None,
        xid=None,
        pci=None,
        ts=None,
        host=None,
        component=None,
        after=None,
    ):
        """host: raw_host already cleaned (parse_event has it from its memo), else computed here."""
        self.rack = rack
        self.raw_host = raw_host
        self.host = host = clean_host(raw_host) if host is None else host
        self.event_type = event_type
        self.gpu_index = gpu_index
        self.gpu_util = gpu_util
        self.recovers = recovers
        self.detail = detail
        self.xid = xid
        self.pci = pci  # bus id without the "PCI:" prefix, or None
        self.component = component  # the NIC port / switch / PCI device a COMPONENT_SCOPED type names, or None
        self.after = after  # (type, component) of the fabric warning a hang followed on this node, or None
        self.ts = ts  # the probe's time of the event (Unix seconds), or None
        self.known = event_type in EVENT_TYPES
        fault = self.fault_type = event_type if recovers is None else recovers
        key = self.rfc_key = "%s:%s:%s" % (rack, host, fault)  # debounce_key(rack, host, fault), inline
        if fault in GPU_SCOPED and gpu_index is not None and gpu_index >= 0:
            key = "%s:gpu%d" % (key, gpu_index)
        elif component is not None and fault in COMPONENT_SCOPED:
            key = "%s:%s" % (key, component)
        self.key = key

    @property
    def spec(self):
        return EVENT_TYPES.get(self.event_type) or EVENT_TYPES[DEFAULT_TYPE]

    @property
    def metric_type(self) -> str:
        return self.event_type if self.known else OTHER_TYPE

    @property
    def debounce_key(self) -> str:
        # a fault: the RFC's key. A recovery: per incident, so two GPUs recovering within the window both count.
        if self.recovers is not None:
            return self.key + ":RECOVERED"
        return self.rfc_key

    def level(self) -> int:
        return severity(self)

    def text(self, language: str = "zh", templates: dict | None = None) -> str:
        return speech(self, language, templates)

    def labels(self) -> dict:
        """What routes and group_by see."""
        return {
            "rack": self.rack,
            "cluster_rack": self.rack,
            "host": self.host,
            "node_host": self.host,
            "event_type": self.event_type if self.recovers is None else self.recovers,
        }


# The RFC's "gpu_util < 5 is critical" is about a hang: a job whose GPUs stopped computing. It applies to the hang
# types (and to an unknown type, which takes the RFC's utilisation branch), not to a GPU that is merely idle when an
# application XID or a thermal warning arrives (issue 11: severity per type, docs/PROBES.md).
HANG_TYPES = frozenset(("NCCL_TIMEOUT", "PROGRESS_STALL", "GPU_UTIL_DROP"))


def severity(ev: Event) -> int:
    """The type's level (the table above); a hang type, or an unknown one, with a reported utilisation under 5 % is P0.

    The RFC reads a missing gpu_util as 0 (Go's zero value) and so calls every util-less event critical; we apply the
    utilisation rule only when the probe reported a utilisation. A recovery is NORMAL whatever it carries.
    """
    if ev.recovers is not None:
        return NORMAL
    if ev.event_type in ("NCCL_TIMEOUT", "XID_FATAL"):
        return P0
    if ev.gpu_util is not None and ev.gpu_util < CRITICAL_UTIL and (ev.event_type in HANG_TYPES or not ev.known):
        return P0
    return ev.spec["level"]


def speech(ev: Event, language: str = "zh", templates: dict | None = None) -> str:
    """The words the terminal speaks. templates: optional per-language overrides {lang: {TYPE: template}}."""
    t = ev.event_type if ev.recovers is None else "RECOVERED"
    spec = EVENT_TYPES.get(t) or EVENT_TYPES[DEFAULT_TYPE]
    tpl = None
    if templates:
        tpl = templates.get(language, {}).get(t)
    fields = spec["fields"]
    if tpl is None:
        tpl = spec[language]
    if "g" in fields and (ev.gpu_index is None or ev.gpu_index < 0) and language + "_node" in spec:
        # no GPU number: node-level wording, the built-in one (an override speaks of GPU %d)
        if ev.pci and language + "_pci" in spec:
            return spec[language + "_pci"] % (ev.rack, ev.host, ev.pci)
        return spec[language + "_node"] % (ev.rack, ev.host)
    if "c" in fields and not ev.component and language + "_node" in spec:
        return spec[language + "_node"] % (ev.rack, ev.host)  # a component type without its component
    if ev.after is not None and ev.recovers is None:
        # the RFC's story: a hang that follows the fabric's warning says where to look first (issue 35)
        clause = AFTER.get(language, AFTER["en"]).format(c=ev.after[1], p=phrase(ev.after[0], language))
        return _fill(tpl, fields, ev) + clause
    return _fill(tpl, fields, ev)


# the clause a hang's text gains when the probe saw a fabric warning on the node first (field "after_type")
AFTER = {"zh": "，此前网卡端口 {c} {p}", "en": ", after {p} on port {c}"}
# the fabric warnings a hang may be said to follow
AFTER_TYPES = frozenset(("OPTICS_WARNING", "NIC_CONGESTION", "IB_PORT_DOWN", "IB_LINK_DEGRADED"))


def _fill(tpl, fields, ev):
    values = []
    for f in fields:
        if f == "r":
            values.append(ev.rack)
        elif f == "h":
            values.append(ev.host)
        elif f == "g":
            values.append(ev.gpu_index)
        elif f == "c":
            values.append(ev.component)
        else:
            values.append(ev.gpu_util)
    return tpl % tuple(values)


def phrase(event_type: str, language: str = "zh") -> str:
    spec = EVENT_TYPES.get(event_type)
    if spec is None:
        return event_type
    return spec[language + "_phrase"]


@overload
def _string(body: dict, name: str, limit: int) -> str: ...
@overload
def _string(body: dict, name: str, limit: int, *, required: bool) -> str | None: ...
def _string(body: dict, name: str, limit: int, *, required: bool = True) -> str | None:
    v = body.get(name)
    # the common case in one test (isprintable() is false for every character _CONTROL matches: the regex runs
    # only for text that has some other unprintable one); anything else takes the checks below, in order, for the
    # precise message
    if (
        type(v) is str
        and v
        and len(v) <= limit
        and not (required and v.isspace())
        and (v.isprintable() or not _CONTROL.search(v))
    ):
        return v
    if v is None:
        if required:
            raise EventError("missing_field", "%s is required" % name)
        return None
    if not isinstance(v, str):
        raise EventError("bad_field", "%s must be a string, got %s" % (name, type(v).__name__))
    if required and not v.strip():
        raise EventError("bad_field", "%s must not be empty" % name)
    if len(v) > limit:
        raise EventError("bad_field", "%s is longer than %d characters" % (name, limit))
    if _CONTROL.search(v):
        raise EventError("bad_field", "%s contains control characters" % name)
    return v


# The RFC's five fields and their limits, one table for both paths of parse_event and for their tests:
# (type, lowest, highest); for text the bounds are its length in characters.
RFC_FIELDS = {
    "cluster_rack": (str, 1, 64),
    "node_host": (str, 1, 253),
    "event_type": (str, 1, 48),
    "gpu_index": (int, -1, 1023),
    "gpu_util": (float, 0.0, 100.0),
}
_RACK_MAX = RFC_FIELDS["cluster_rack"][2]
_HOST_MAX = RFC_FIELDS["node_host"][2]
_TYPE_MAX = RFC_FIELDS["event_type"][2]
_GPU_MAX = RFC_FIELDS["gpu_index"][2]
_UTIL_MAX = RFC_FIELDS["gpu_util"][2]
# Known types an event may carry with nothing but the five RFC fields (RECOVERED needs "recovers").
_PLAIN_TYPES = frozenset(EVENT_TYPES) - {"RECOVERED"}
_new = object.__new__


def _remember_host(host: str) -> str:
    """A validated host name's cleaned form, memoised."""
    if len(_HOSTS) >= _MEMO_MAX:
        _HOSTS.clear()
    clean = _HOSTS[host] = clean_host(host)
    return clean


def parse_event(body, *, accept_unknown: bool = True) -> Event:
    """Validate a decoded JSON body into an Event, or raise EventError naming the field and the rule it broke."""
    # The storm's body: exactly the RFC's five fields, a rack and host validated before, a known type, a numbered
    # GPU and a utilisation in range. Then nothing is left to check and the event is built at once. Kept because
    # without it the storm bench falls below the Go gateway (bench/bench_ingest_instructions.py,
    # docs/PERFORMANCE.md). What it returns is exactly what _parse_full returns for the same body: the tests
    # compare the two on bodies made from RFC_FIELDS and EVENT_TYPES.
    if type(body) is dict and len(body) == 5:
        rack = body.get("cluster_rack")
        host = body.get("node_host")
        etype = body.get("event_type")
        gpu_index = body.get("gpu_index")
        gpu_util = body.get("gpu_util")
        if (
            type(rack) is str
            and type(host) is str
            and type(etype) is str
            and etype in _PLAIN_TYPES
            and type(gpu_index) is int
            and 0 <= gpu_index <= _GPU_MAX
            and type(gpu_util) is float
            and 0.0 <= gpu_util <= _UTIL_MAX
        ):
            # five keys, each of the five non-null: no state, detail, xid, pci or ts
            rack = _RACKS.get(rack)
            if rack is not None:
                clean = _HOSTS.get(host)
                # a node's first event: its host name takes _string's test (the one that returns it unchanged)
                if (
                    clean is None
                    and host
                    and len(host) <= _HOST_MAX
                    and not host.isspace()
                    and (host.isprintable() or not _CONTROL.search(host))
                ):
                    clean = _remember_host(host)
                if clean:
                    # The Event built here, not by Event(...): CPython 3.11 calls a class through C, its arguments
                    # packed in a tuple, and enters __init__ in a frame of its own. Every slot Event.__init__ sets,
                    # to the same value (the differential test compares each).
                    ev = _new(Event)
                    ev.rack = rack
                    ev.raw_host = host
                    ev.host = clean
                    ev.event_type = ev.fault_type = etype
                    ev.gpu_index = gpu_index
                    ev.gpu_util = gpu_util
                    ev.recovers = ev.detail = ev.xid = ev.pci = ev.component = ev.after = ev.ts = None
                    ev.known = True
                    # str and int exactly, so the f-strings give what "%s" and "%d" give, with no format to parse
                    key = ev.rfc_key = f"{rack}:{clean}:{etype}"
                    ev.key = f"{key}:gpu{gpu_index}" if etype in GPU_SCOPED else key
                    return ev
    return _parse_full(body, accept_unknown)


def _parse_full(body, accept_unknown: bool) -> Event:
    if not isinstance(body, dict):
        raise EventError("bad_body", "the body must be a JSON object", 400)
    rack = _string(body, "cluster_rack", _RACK_MAX)
    r = _RACKS.get(rack)
    if r is None:
        if len(_RACKS) >= _MEMO_MAX:
            _RACKS.clear()
        r = _RACKS[rack] = rack
    rack = r
    host = _string(body, "node_host", _HOST_MAX)
    clean = _HOSTS.get(host)
    if clean is None:
        clean = _remember_host(host)
    etype = _string(body, "event_type", _TYPE_MAX)
    if etype not in EVENT_TYPES and not _TYPE_RE.match(etype):  # every known type matches (a test says so)
        raise EventError("bad_field", "event_type must be upper-case letters, digits and _ (e.g. NCCL_TIMEOUT)")
    if etype not in EVENT_TYPES and not accept_unknown:
        raise EventError(
            "unknown_event_type", "unknown event_type %s; known: %s" % (etype, ", ".join(sorted(EVENT_TYPES)))
        )

    gpu_index = body.get("gpu_index")
    if gpu_index is not None and not (type(gpu_index) is int and 0 <= gpu_index <= _GPU_MAX):  # the common case
        if isinstance(gpu_index, bool) or not isinstance(gpu_index, int):
            raise EventError("bad_field", "gpu_index must be an integer")
        if gpu_index < -1 or gpu_index > _GPU_MAX:
            raise EventError("bad_field", "gpu_index must be -1 (whole node) or 0..%d" % _GPU_MAX)
    gpu_util = body.get("gpu_util")
    if type(gpu_util) is float and 0.0 <= gpu_util <= _UTIL_MAX:  # the common case (NaN fails both comparisons)
        pass
    elif gpu_util is not None:
        if isinstance(gpu_util, bool) or not isinstance(gpu_util, (int, float)):
            raise EventError("bad_field", "gpu_util must be a number (percent)")
        gpu_util = float(gpu_util)
        if not math.isfinite(gpu_util) or gpu_util < 0.0 or gpu_util > _UTIL_MAX:
            raise EventError("bad_field", "gpu_util must be between 0 and 100")

    recovers = None
    state = body.get("state")
    if etype == "RECOVERED":
        recovers = _string(body, "recovers", _TYPE_MAX)
        if not _TYPE_RE.match(recovers) or recovers == "RECOVERED":
            raise EventError("bad_field", "recovers must name the event type that cleared (e.g. NCCL_TIMEOUT)")
    elif state is not None:
        if state != "recovered" and state != "firing":
            raise EventError("bad_field", 'state must be "firing" or "recovered"')
        if state == "recovered":
            recovers = etype
            etype = "RECOVERED"

    detail = body.get("detail")
    if detail is not None:
        detail = _string(body, "detail", MAX_DETAIL, required=False)
    xid = body.get("xid")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or xid < 0 or xid > 65535):
        raise EventError("bad_field", "xid must be an integer 0..65535")

    # pci only words the alarm: a malformed one is ignored rather than refusing a fatal XID over it
    pci = body.get("pci")
    if pci is not None:
        m = _PCI_RE.match(pci) if isinstance(pci, str) and len(pci) <= 40 else None
        pci = m.group(1) if m else None

    # component only words and keys the alarm: one that is not a short name is ignored, never refused
    component = body.get("component")
    if component is not None and not (isinstance(component, str) and _COMPONENT_RE.match(component)):
        component = None

    after = None
    after_type, after_comp = body.get("after_type"), body.get("after_component")
    if after_type in AFTER_TYPES and isinstance(after_comp, str) and _COMPONENT_RE.match(after_comp):
        after = (after_type, after_comp)

    # ts only names the incident's window (service.py): one that is not a finite number is ignored, never refused
    ts = body.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts)):
        ts = None
    ev = Event(
        rack,
        host,
        etype,
        gpu_index=gpu_index,
        gpu_util=gpu_util,
        recovers=recovers,
        detail=detail,
        xid=xid,
        pci=pci,
        ts=ts,
        host=clean,
        component=component,
        after=after,
    )
    if recovers is None:
        fields = (EVENT_TYPES.get(etype) or EVENT_TYPES[DEFAULT_TYPE])["fields"]
        if gpu_index is None and "g" in fields:
            raise EventError(
                "missing_field",
                "gpu_index (0..%d, or -1 when the GPU cannot be numbered) is required for %s" % (_GPU_MAX, etype),
            )
        if gpu_util is None and "u" in fields:
            raise EventError("missing_field", "gpu_util is required for %s" % etype)
    if not ev.host:
        raise EventError("bad_field", "node_host is empty once its hash suffix is removed")
    return ev
