# A fake of MicroPython's network module: a station that joins when the test says the access point is up.
STA_IF = 0
AP_IF = 1
STAT_IDLE = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 1010

ap_up = True  # whether connect() succeeds
_hostname = "mpy-esp32"
connect_after = 0  # isconnected() calls before an attempt completes


def hostname(name=None):
    global _hostname
    if name is None:
        return _hostname
    _hostname = name


class WLAN:
    instances = []

    def __init__(self, interface=STA_IF):
        self.interface = interface
        self._active = False
        self._connected = False
        self._pending = None
        self.connects = []
        self.settings = {}
        WLAN.instances.append(self)

    def active(self, on=None):
        if on is None:
            return self._active
        self._active = bool(on)

    def config(self, **kw):
        self.settings.update(kw)

    def connect(self, ssid=None, key=None):
        if not self._active:
            raise OSError("Wifi Not Started")
        self.connects.append(ssid)
        self._pending = connect_after if ap_up else None

    def disconnect(self):
        self._connected = False
        self._pending = None

    def isconnected(self):
        if self._pending is not None:
            if self._pending <= 0:
                self._connected = True
                self._pending = None
            else:
                self._pending -= 1
        return self._connected

    def status(self, *a):
        return STAT_GOT_IP if self._connected else STAT_CONNECTING if self._pending is not None else STAT_IDLE

    def ifconfig(self, *a):
        return ("10.0.0.42", "255.255.255.0", "10.0.0.1", "10.0.0.1") if self._connected else ("0.0.0.0",) * 4

    # test side
    def drop(self):
        """The access point went away."""
        self._connected = False
        self._pending = None
