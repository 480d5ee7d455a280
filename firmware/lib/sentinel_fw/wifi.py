# Wi-Fi station join with reconnect and exponential back-off. step() is called from the network task and never
# blocks: WLAN.connect() returns at once and the driver associates in the background.
from sentinel_core.compat import const
from sentinel_fw import ticks

FIRST_MS = const(2000)
MAX_MS = const(60000)
_ATTEMPT_MS = const(20000)  # an association that has not finished by then is abandoned and retried


class WiFi:
    def __init__(self, wlan, ssid, password, hostname=None):
        self.wlan = wlan
        self.ssid = ssid
        self._password = password
        self.hostname = hostname
        self.backoff_ms = FIRST_MS
        self.attempts = 0
        self.connected = False
        self._started = None  # ticks of the attempt in flight
        self._next = None
        if hostname:
            # Set before the interface comes up, so DHCP announces it. network.hostname() since MicroPython 1.20;
            # the WLAN config key before that. The name is a convenience, never a reason not to join.
            try:
                import network

                network.hostname(hostname)
            except Exception:  # noqa: BLE001 - ports name the hostname call differently; a hostname is optional
                try:
                    wlan.config(dhcp_hostname=hostname)
                except Exception:  # noqa: BLE001 - no port took the hostname: the link works without it
                    pass
        wlan.active(True)

    def step(self, t_ms):
        """Drive the connection; returns True while connected."""
        if self.wlan.isconnected():
            if not self.connected:
                self.backoff_ms = FIRST_MS
            self.connected = True
            self._started = None
            return True
        self.connected = False
        if self._started is not None and ticks.diff(t_ms, self._started) < _ATTEMPT_MS:
            return False
        if self._next is not None and ticks.diff(t_ms, self._next) < 0:
            return False
        try:
            self.wlan.disconnect()
        except Exception:  # noqa: BLE001 - disconnecting a link that is not up raises on some ports
            pass
        self.wlan.connect(self.ssid, self._password)
        self.attempts += 1
        self._started = t_ms
        self._next = ticks.add(t_ms, self.backoff_ms)
        self.backoff_ms = min(self.backoff_ms * 2, MAX_MS)
        return False

    def address(self):
        try:
            return self.wlan.ifconfig()[0]
        except Exception:  # noqa: BLE001 - no address while the link is down
            return None
