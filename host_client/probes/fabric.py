"""InfiniBand / RoCE ports, their transceivers and PFC: readings (sysfs, ``ethtool``) and the rules over them.

Readings come from ``/sys/class/infiniband/<dev>/ports/<n>/`` (the kernel's ABI, Documentation/ABI/stable/
sysfs-class-infiniband), ``ethtool -S <netdev>`` (mlx5 counters, Documentation/networking/device_drivers/ethernet/
mellanox/mlx5/counters.rst) and ``ethtool -m <netdev>`` (the module's own diagnostics and thresholds, SFF-8636 /
CMIS as ethtool prints them; the kernel allows it only with CAP_NET_ADMIN) and, for module temperature without
privilege, the NIC's hwmon device (``/sys/class/hwmon/hwmonN`` with ``name`` "mlx5", its ``device`` link the NIC's PCI
function; the kernel's drivers/net/ethernet/mellanox/mlx5/core/hwmon.c). The rules are a functional core:
``FabricChecker.check(reading, now)`` returns the findings standing now; the daemon's Conditions ledger turns them
into raise / RECOVERED transitions.
"""

import os
import re
from collections import deque
from typing import Any

from . import events

# counters/ (IB PMA) whose rise means the link itself is corrupting bits: the RFC's 光模块误码
BIT_ERROR_COUNTERS = (
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "link_error_recovery",
)
# counters/ and RoCE hw_counters/ whose rise means drops and retransmissions (congestion or loss)
RETRANSMIT_COUNTERS = (
    "port_xmit_discards",
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
)
CNP_COUNTERS = ("np_cnp_sent", "rp_cnp_handled")
LINK_DOWNED = "link_downed"
WATCHED = BIT_ERROR_COUNTERS + RETRANSMIT_COUNTERS + CNP_COUNTERS + (LINK_DOWNED,)
_WATCHED_SET = frozenset(WATCHED)
_PAUSE_DURATION = re.compile(r"([rt]x)_prio(\d)_pause_duration\Z")
_STORM_EVENTS = ("tx_pause_storm_warning_events", "tx_pause_storm_error_events")
_TEMP_LABEL = re.compile(r"temp(\d+)_label\Z")
_NUM = re.compile(r"(-?\d+(?:\.\d+)?)\s*(mW|degrees C)")


def _read(path):
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read().strip()


def _int(text):
    try:
        return int(text)
    except ValueError:
        return None


def rate_gbps(text):
    """'400 Gb/sec (4X NDR)' -> 400.0; None when unreadable."""
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def read_ports(root):
    """Every port under ``root`` (the /sys/class/infiniband layout): {(dev, port): {...}}, and the read errors.

    A port that cannot be read is left out and its error kept (the caller says it in /status)."""
    ports, errors = {}, {}
    try:
        devs = sorted(os.listdir(root))
    except OSError as e:
        return ports, {root: e.strerror or str(e)}
    for dev in devs:
        pdir = os.path.join(root, dev, "ports")
        try:
            pnums = sorted(os.listdir(pdir), key=lambda n: int(n) if n.isdigit() else 0)
        except OSError as e:
            errors[pdir] = e.strerror or str(e)
            continue
        try:
            netdevs = sorted(os.listdir(os.path.join(root, dev, "device", "net")))
        except OSError:
            netdevs = []
        pci = os.path.realpath(os.path.join(root, dev, "device"))  # the hwmon device of the NIC hangs here too
        for pn in pnums:
            base = os.path.join(pdir, pn)
            try:
                state = _read(os.path.join(base, "state"))  # "4: ACTIVE"
                phys = _read(os.path.join(base, "phys_state"))  # "5: LinkUp"
                rate = _read(os.path.join(base, "rate"))
            except OSError as e:
                errors[base] = e.strerror or str(e)
                continue
            try:
                layer = _read(os.path.join(base, "link_layer"))
            except OSError:
                layer = "InfiniBand"
            counters = {}
            for sub in ("counters", "hw_counters"):
                try:
                    present = _WATCHED_SET.intersection(os.listdir(os.path.join(base, sub)))
                except OSError:
                    continue  # no hw_counters on an InfiniBand port; counters/ missing: no rates for this port
                for name in present:
                    try:
                        v = _int(_read(os.path.join(base, sub, name)))
                    except OSError:
                        continue
                    if v is not None:
                        counters[name] = v
            ports[(dev, int(pn) if pn.isdigit() else pn)] = {
                "state": state.split(":", 1)[-1].strip(),
                "phys": phys.split(":", 1)[-1].strip(),
                "rate": rate_gbps(rate),
                "rate_text": rate,
                "layer": layer,
                "netdev": netdevs[0] if netdevs else None,
                "pci": pci,
                "counters": counters,
            }
    return ports, errors


def _module_channel(label):
    """Whether an mlx5 hwmon channel is the transceiver's: the firmware names it "Module<N>"; a sensor the firmware
    left unnamed is "sensor<index>", and module sensors are index 64 + module number (hwmon.c)."""
    low = label.strip().lower()
    if low.startswith("module"):
        return True
    return low.startswith("sensor") and low[6:].isdigit() and int(low[6:]) >= 64


def read_module_sensors(root):
    """The transceiver sensors of the mlx5 hwmon devices under ``root`` (the /sys/class/hwmon layout):
    {NIC PCI path: {"temp_c", "crit_c", "label", "hwmon"}}, and the read errors. Values are milli-degrees C; a
    channel whose input or crit cannot be read is left out this time (and its error kept)."""
    out, errors = {}, {}
    try:
        names = sorted(os.listdir(root))
    except OSError as e:
        return out, {root: e.strerror or str(e)}
    for hw in names:
        base = os.path.join(root, hw)
        try:
            if _read(os.path.join(base, "name")) != "mlx5":
                continue
            files = os.listdir(base)
        except OSError:
            continue  # another driver's device, or one going away: not ours to report
        pci = os.path.realpath(os.path.join(base, "device"))
        for f in sorted(files):
            m = _TEMP_LABEL.match(f)
            if not m:
                continue
            ch = os.path.join(base, "temp%s_" % m.group(1))
            try:
                label = _read(ch + "label")
                if not _module_channel(label):
                    continue
                temp, crit = _int(_read(ch + "input")), _int(_read(ch + "crit"))
            except OSError as e:
                errors[ch + "input"] = e.strerror or str(e)
                continue
            if temp is None or crit is None:
                errors[ch + "input"] = "not a number"
                continue
            out[pci] = {"temp_c": temp / 1000.0, "crit_c": crit / 1000.0, "label": label, "hwmon": hw}
    return out, errors


def parse_ethtool_stats(text):
    """``ethtool -S`` output -> {name: int}."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            v = _int(value.strip())
            if v is not None:
                out[name.strip()] = v
    return out


def parse_module(text):
    """``ethtool -m`` output -> {"temp_c", "temp_warn_c", "temp_alarm_c", "rx_mw" (list), "rx_low_warn_mw",
    "rx_low_alarm_mw", "flags" (names of alarm/warning flags that are On)}; missing items are absent."""
    m: dict[str, Any] = {"rx_mw": [], "flags": []}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if not sep:
            continue
        key = key.strip()
        low = key.lower()
        value = value.strip()
        num = _NUM.search(value)
        if low == "module temperature" and num:
            m["temp_c"] = float(num.group(1))
        elif low == "module temperature high warning threshold" and num:
            m["temp_warn_c"] = float(num.group(1))
        elif low == "module temperature high alarm threshold" and num:
            m["temp_alarm_c"] = float(num.group(1))
        elif low == "laser rx power low warning threshold" and num:
            m["rx_low_warn_mw"] = float(num.group(1))
        elif low == "laser rx power low alarm threshold" and num:
            m["rx_low_alarm_mw"] = float(num.group(1))
        elif (low.startswith(("rcvr signal avg optical power", "receiver signal average optical power"))) and num:
            m["rx_mw"].append(float(num.group(1)))
        elif ("alarm" in low or "warning" in low) and "threshold" not in low and value == "On":
            m["flags"].append(key)
    return m


def component(dev, port):
    """How the room hears a port: the HCA name, and the port number only when it is not the first."""
    return dev if port == 1 else "%s/%s" % (dev, port)


class FabricRules:
    def __init__(
        self,
        *,
        window_s=60.0,
        expected_rate_gbps=0.0,
        bit_errors=10,
        retransmits=1000,
        cnps=0,
        flap_downs=3,
        up_hold_s=10.0,
        pause_share=0.5,
        temp_margin_c=1.0,
    ):
        if window_s <= 0:
            raise ValueError("[fabric] window_s must be > 0")
        self.window_s = float(window_s)
        self.expected_rate_gbps = float(expected_rate_gbps)
        self.bit_errors = int(bit_errors)
        self.retransmits = int(retransmits)
        self.cnps = int(cnps)  # 0: CNPs are congestion control at work, counted in /metrics only
        self.flap_downs = int(flap_downs)
        self.up_hold_s = float(up_hold_s)
        self.pause_share = float(pause_share)
        self.temp_margin_c = float(temp_margin_c)


class _Window:
    """(time, value) of one counter over the rules' window; a value that went down (reset) starts it afresh."""

    __slots__ = ("samples",)

    def __init__(self):
        self.samples = deque()

    def add(self, t, v, window_s):
        s = self.samples
        if s and v < s[-1][1]:
            s.clear()
        s.append((t, v))
        while len(s) > 1 and s[1][0] <= t - window_s:
            s.popleft()

    def delta(self):
        s = self.samples
        return s[-1][1] - s[0][1] if len(s) > 1 else 0


class FabricChecker:
    """Findings for IB/RoCE ports, modules and PFC. Port state: a port seen ACTIVE that is not ACTIVE now."""

    def __init__(self, rules):
        self.rules = rules
        self.first_rate = {}  # port -> the rate it first trained at (ACTIVE)
        self.was_active = set()
        self.windows = {}  # (port, counter) -> _Window
        self.down = {}  # port -> {"since", "downs", "up_since", "detail"}
        self.optics = {}  # port -> standing module finding reason (kept until the module reads healthy)
        self.sensor_hot = {}  # port -> standing hwmon module-temperature reason (the unprivileged path)
        self.totals = {}  # (port, counter) -> last value, for /metrics
        self.pfc = {}  # port -> the PFC storm reasons of the last ethtool -S read (kept between reads)
        self.last = {}  # port -> its findings of the last read (standing while the port cannot be read)

    def _win(self, key, t, v):
        w = self.windows.get(key)
        if w is None:
            w = self.windows[key] = _Window()
        w.add(t, v, self.rules.window_s)
        return w.delta()

    def check(self, ports, now, *, stats=None, modules=None, sensors=None, unread=False):
        """ports: read_ports()'s map; stats / modules: {port: parsed ethtool -S / -m} for the ports read this time
        (a port missing there keeps what it had: an ethtool that did not run this poll is not a recovery);
        sensors: {port: read_module_sensors()'s entry} read this time, the same way.
        unread: some of the tree could not be read this time; a port seen ACTIVE that is missing then keeps what
        it had, where otherwise it is gone (the HCA fell off the bus, its driver went away): down."""
        r = self.rules
        out = []
        for p in sorted(self.was_active - set(ports), key=str):
            if unread:
                out.extend(self.last.get(p, ()))
                continue
            d = self.down.get(p)
            if d is None:
                d = self.down[p] = {"downs": 1, "up_since": None, "revision": 0}
                d["detail"] = "%s port %s is no longer in sysfs (the device is gone), was ACTIVE" % p
            d["up_since"] = None
            gone = events.Finding(
                ("ibport", p[0], p[1]),
                events.IB_PORT_DOWN,
                events.NODE_WIDE,
                d["detail"],
                component=component(*p),
                revision=d["revision"],
                downs=d["downs"],
            )
            self.last[p] = [gone]
            out.append(gone)
        for p, st in ports.items():
            start = len(out)
            dev, num = p
            comp = component(dev, num)
            name = "%s port %s%s" % (dev, num, " (%s)" % st["netdev"] if st["netdev"] else "")
            kind = "RoCE" if st["layer"] == "Ethernet" else "InfiniBand"
            active = st["state"] == "ACTIVE"
            c = st["counters"]
            for k, v in c.items():
                self.totals[(p, k)] = v
            downs = self._win((p, LINK_DOWNED), now, c[LINK_DOWNED]) if LINK_DOWNED in c else 0
            # --- state: DOWN/INIT/POLLING/Disabled after ACTIVE is one incident; flaps add to its count ---
            d = self.down.get(p)
            if active:
                self.was_active.add(p)
                if d is not None:
                    if d["up_since"] is None:
                        d["up_since"] = now
                    if now - d["up_since"] >= r.up_hold_s and downs < r.flap_downs:
                        del self.down[p]
                        d = None
            elif p in self.was_active:
                if d is None:
                    d = self.down[p] = {"downs": 1, "up_since": None, "revision": 0}
                    d["detail"] = "%s %s: %s (%s), was ACTIVE" % (kind, name, st["state"], st["phys"])
                elif d["up_since"] is not None:  # down again before it held up: a flap of the same incident
                    d["downs"] += 1
                    d["up_since"] = None
            if d is None and active and downs >= r.flap_downs > 0:  # flaps faster than we poll
                d = self.down[p] = {"downs": downs, "up_since": now, "revision": 0}
                d["detail"] = "%s %s flapping: %d link downs in %.0f s" % (kind, name, downs, r.window_s)
            if d is not None:
                n = max(d["downs"], downs)
                if n >= r.flap_downs > 0 and d["revision"] == 0:  # said once more, as a flap, with its count
                    d["revision"] = 1
                    d["detail"] = "%s %s flapping: %d link downs in %.0f s" % (kind, name, n, r.window_s)
                out.append(
                    events.Finding(
                        ("ibport", dev, num),
                        events.IB_PORT_DOWN,
                        events.NODE_WIDE,
                        d["detail"],
                        component=comp,
                        revision=d["revision"],
                        downs=n,
                    )
                )
            # --- rate: below what it first trained at, or below the configured expectation ---
            if active and st["rate"]:
                first = self.first_rate.setdefault(p, st["rate"])
                want = max(first, r.expected_rate_gbps)
                if st["rate"] < want:
                    out.append(
                        events.Finding(
                            ("ibrate", dev, num),
                            events.IB_LINK_DEGRADED,
                            events.NODE_WIDE,
                            "%s %s at %s, trained at %g Gb/sec" % (kind, name, st["rate_text"], want),
                            component=comp,
                        )
                    )
            # --- error counters: rates over the window ---
            bad = [(k, self._win((p, k), now, c[k])) for k in BIT_ERROR_COUNTERS if k in c]
            bad = [(k, n) for k, n in bad if n >= r.bit_errors > 0]
            retx = [(k, self._win((p, k), now, c[k])) for k in RETRANSMIT_COUNTERS if k in c]
            retx = [(k, n) for k, n in retx if n >= r.retransmits > 0]
            cnp = [(k, self._win((p, k), now, c[k])) for k in CNP_COUNTERS if k in c]
            retx += [(k, n) for k, n in cnp if n >= r.cnps > 0]
            if bad:
                out.append(
                    events.Finding(
                        ("ibber", dev, num),
                        events.OPTICS_WARNING,
                        events.NODE_WIDE,
                        "%s %s bit errors: %s in %.0f s" % (kind, name, _list(bad), r.window_s),
                        component=comp,
                    )
                )
            # --- PFC: pause duration share and the NIC's own storm events (ethtool -S) ---
            s = (stats or {}).get(p)
            if s is not None:
                for k, v in s.items():
                    if _PAUSE_DURATION.match(k) or k in _STORM_EVENTS:
                        self.totals[(p, k)] = v
                storm = [(k, self._win((p, k), now, s[k])) for k in _STORM_EVENTS if k in s]
                storm = [(k, n) for k, n in storm if n > 0]
                share = []
                for k, v in s.items():
                    if _PAUSE_DURATION.match(k):
                        self._win((p, k), now, v)
                        w = self.windows[(p, k)]
                        span = w.samples[-1][0] - w.samples[0][0]
                        if span > 0 and w.delta() / 1e6 / span >= r.pause_share:
                            share.append((k, "%.0f%%" % (100 * w.delta() / 1e6 / span)))
                self.pfc[p] = storm + share
            retx += self.pfc.get(p, [])
            if retx:
                out.append(
                    events.Finding(
                        ("ibcong", dev, num),
                        events.NIC_CONGESTION,
                        events.NODE_WIDE,
                        "%s %s: %s in %.0f s" % (kind, name, _list(retx), r.window_s),
                        component=comp,
                    )
                )
            # --- the module against its own thresholds (ethtool -m) ---
            m = (modules or {}).get(p)
            if m is not None:
                self.optics[p] = _module_problem(m, self.optics.get(p), r.temp_margin_c)
            hw = (sensors or {}).get(p)
            if hw is not None:
                self.sensor_hot[p] = _sensor_problem(hw, self.sensor_hot.get(p), r.temp_margin_c)
            # one incident per port whichever path sees it: the module's own words (ethtool) when it has them
            why = self.optics.get(p) or self.sensor_hot.get(p)
            if why:
                out.append(
                    events.Finding(
                        ("optics", dev, num),
                        events.OPTICS_WARNING,
                        events.NODE_WIDE,
                        "%s %s transceiver %s" % (kind, name, why),
                        component=comp,
                    )
                )
            self.last[p] = out[start:]
        return out


def _list(pairs):
    return ", ".join("%s +%s" % (k, n) for k, n in pairs)


def _sensor_problem(hw, standing, margin):
    """The hwmon path: the module sensor at or over its critical threshold (tempN_crit, the firmware's high threshold
    for the module), or None; a standing one clears only ``margin`` under it. A crit of 0 is no threshold."""
    t, crit = hw["temp_c"], hw["crit_c"]
    if crit <= 0 or t <= 0:  # no threshold, or no module reading (the sensor reads 0 with no module): not a verdict
        return standing
    if t >= crit or (standing and t > crit - margin):
        return "temperature %.1f C (its critical threshold %.1f C, hwmon %s)" % (t, crit, hw["label"])
    return None


def _module_problem(m, standing, margin):
    """Why the module is unwell by its own thresholds, or None. A standing problem clears only with a margin."""
    t, warn = m.get("temp_c"), m.get("temp_warn_c")
    if (
        t is not None
        and warn is not None
        and (t >= warn or (standing and "temperature" in standing and t > warn - margin))
    ):
        return "temperature %.1f C (its warning threshold %.1f C)" % (t, warn)
    low = m.get("rx_low_warn_mw")
    rx = list(m.get("rx_mw", ()))
    if low is not None and rx and min(rx) <= low:
        return "rx power %.4f mW (its low warning threshold %.4f mW)" % (min(rx), low)
    if m.get("flags"):
        return "flags " + ", ".join(m["flags"][:3])
    return None
