"""host_client: send signed alarms to GPU Sentinel terminals (the ESP32 box or the emulator).

    from host_client import AlarmClient, preset
    client = AlarmClient("http://10.0.0.20", "ops", secret)      # or AlarmClient.from_config()
    ack = client.send(preset("p0", "机架 A03 节点 gpu-worker-08 通信死锁", key="A03:gpu-worker-08"))
"""
from host_client.client import Ack, AlarmClient, Delivery, SignedRequest, send_many
from host_client.errors import AuthError, ConfigError, RefusedError, SentinelError, ServerError, TransportError
from host_client.transport import HTTPTransport, Response, Transport
from sentinel_core.alarm import NORMAL, P0, P1, RECOVERED_TEXT, Alarm, preset

__all__ = [
    "Ack", "AlarmClient", "Alarm", "AuthError", "ConfigError", "Delivery", "HTTPTransport", "NORMAL", "P0", "P1",
    "RECOVERED_TEXT", "RefusedError", "Response", "SentinelError", "ServerError", "SignedRequest", "Transport",
    "TransportError", "preset", "send_many",
]
