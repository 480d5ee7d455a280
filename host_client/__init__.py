"""host_client: send signed alarms to GPU Sentinel terminals (the ESP32 box or the emulator).

    from host_client import AlarmClient, preset
    client = AlarmClient("http://10.0.0.20", "ops", secret)      # or AlarmClient.from_config()
    ack = client.send(preset("p0", "机架 A03 节点 gpu-worker-08 通信死锁", key="A03:gpu-worker-08"))

This package and sentinel_core are the whole client: standard library only (`pip install gpu-sentinel-alarm`).
The gateway (host_client.gateway), the GPU node probes (host_client.probes) and the emulator come with the same
distribution; what they need beyond the standard library is in its extras: [gateway], [probes], [emulator].
Lower-level pieces stay in their modules: host_client.transport (Transport, HTTPTransport, for tests and other
senders), host_client.client (SignedRequest), host_client.config (resolve), sentinel_core.alarm (levels, presets).
"""

from host_client.client import Ack, AlarmClient, Delivery, send_many
from host_client.errors import AuthError, ConfigError, RefusedError, SentinelError, ServerError, TransportError
from sentinel_core import VERSION as __version__
from sentinel_core.alarm import Alarm, preset

__all__ = [
    "__version__",
    "AlarmClient",
    "Alarm",
    "preset",
    "send_many",
    "Ack",
    "Delivery",
    "SentinelError",
    "ConfigError",
    "TransportError",
    "ServerError",
    "RefusedError",
    "AuthError",
]
