# Unix time versus the device's own epoch. The ESP32 port counts from 2000-01-01, the Unix and WebAssembly ports
# from 1970-01-01; the wire protocol always carries Unix seconds.

from sentinel_core.compat import const

_Y2K_UNIX = const(946684800)


def offset_for(epoch_year):
    """Seconds to add to a device timestamp to get Unix time, for a port whose time.gmtime(0) year is epoch_year."""
    if epoch_year == 1970:
        return 0
    if epoch_year == 2000:
        return _Y2K_UNIX
    raise ValueError("unsupported epoch year %d" % epoch_year)


def to_unix(device_seconds, epoch_year):
    return device_seconds + offset_for(epoch_year)


def from_unix(unix_seconds, epoch_year):
    return unix_seconds - offset_for(epoch_year)
