"""Rules that turn GPU readings into findings, without crying wolf.

- A GPU that stopped answering (NVML's GpuIsLost, a handle that cannot be opened, nvidia-smi's "Unable to
  determine the device handle") is GPU_LOST at once, with its PCI bus id; it clears after ``confirm`` samples in
  which it answers again. The other GPUs are judged as usual meanwhile.
- Idle is not a fault. The PCIe rules judge a GPU only while it is under load: utilisation >= ``load_util_pct``, or
  power draw >= ``load_power_frac`` of its enforced limit, or PCIe traffic >= ``load_pcie_mbps`` (any one). An idle
  GPU drops its link to Gen1 and may narrow it on purpose (nvidia-smi: "may be reduced when the GPU is not in use"),
  in P0 as well (idle H100s sit in P0). Under load, a generation below the link's maximum or a width below it
  needs ``confirm`` consecutive loaded samples to raise and ``confirm`` good samples to clear; an idle sample
  neither raises nor clears and restarts the count. When no load signal can be read at all (the seed's five
  nvidia-smi columns), the seed's rules apply: generation only in P0, width at any time.
- Temperature against the GPU's own slowdown threshold from NVML; where the source has no thresholds
  (nvidia-smi fallback) the seed's fixed 82 C applies. Clears ``thermal_hysteresis_c`` below the threshold.
- NVLink error counters (replay, recovery, CRC flit, CRC data) that increase between samples; the condition
  clears after ``nvlink_quiet_s`` without increases.
- Utilisation that falls from busy (>= busy_pct somewhere in the last ``util_window_s``) to <= idle_pct for
  ``util_drop_s`` while compute processes still hold the GPU (a job that ended is not a drop).
"""

from . import events
from .xid import pci_text


class GpuRules:
    def __init__(
        self,
        *,
        confirm=2,
        expected_gen=0,
        expected_width=0,
        thermal_fallback_c=82.0,
        thermal_hysteresis_c=3.0,
        nvlink_min_delta=1,
        nvlink_quiet_s=60.0,
        util_drop=True,
        busy_pct=80.0,
        idle_pct=5.0,
        util_window_s=30.0,
        util_drop_s=10.0,
        load_util_pct=20.0,
        load_power_frac=0.3,
        load_pcie_mbps=1000.0,
    ):
        if int(confirm) < 1:
            raise ValueError("confirm must be >= 1 sample")
        if not 0 < float(load_power_frac) <= 1:
            raise ValueError("load_power_frac must be in (0, 1] (a fraction of the power limit)")
        self.load_util_pct = float(load_util_pct)
        self.load_power_frac = float(load_power_frac)
        self.load_pcie_mbps = float(load_pcie_mbps)
        self.confirm = int(confirm)
        self.expected_gen = int(expected_gen)
        self.expected_width = int(expected_width)
        self.thermal_fallback_c = float(thermal_fallback_c)
        self.thermal_hysteresis_c = float(thermal_hysteresis_c)
        self.nvlink_min_delta = int(nvlink_min_delta)
        self.nvlink_quiet_s = float(nvlink_quiet_s)
        self.util_drop = bool(util_drop)
        self.busy_pct = float(busy_pct)
        self.idle_pct = float(idle_pct)
        self.util_window_s = float(util_window_s)
        self.util_drop_s = float(util_drop_s)


class _Confirmed:
    """A link property (PCIe generation or width) judged over samples: down after `confirm` bad samples in a row, up
    again after `confirm` good ones; a sample that cannot be judged (an idle link saving power) resets the bad run."""

    __slots__ = ("bad", "good", "down")

    def __init__(self):
        self.bad = self.good = 0
        self.down = False

    def sample(self, value, expected, judge, confirm):
        if value >= expected:
            self.good += 1
            self.bad = 0
        elif judge:
            self.bad += 1
            self.good = 0
        else:
            self.bad = 0
        if self.bad >= confirm:
            self.down = True
        elif self.good >= confirm:
            self.down = False


class _Gpu:
    __slots__ = (
        "dev",
        "gen",
        "width",
        "seen",
        "hot_bad",
        "hot_good",
        "hot",
        "nvlink_prev",
        "nvlink_last_inc",
        "nvlink_detail",
        "utils",
        "low_since",
        "low_after_busy",
        "drop",
        "drop_good",
        "lost",
        "lost_good",
        "lost_why",
    )

    def __init__(self, dev):
        self.dev = dev
        self.gen = _Confirmed()
        self.width = _Confirmed()
        self.seen = None  # (gen, width) when the downgrade was confirmed
        self.hot_bad = self.hot_good = 0
        self.hot = False
        self.nvlink_prev = None
        self.nvlink_last_inc = None
        self.nvlink_detail = None
        self.utils = []  # recent (t, util), bounded by util_window_s
        self.low_since = None
        self.low_after_busy = False
        self.drop = False
        self.drop_good = 0
        self.lost = False
        self.lost_good = 0
        self.lost_why = None


class GpuChecker:
    """Feed it every sample; it returns the findings that stand after that sample."""

    def __init__(self, devices, rules=None):
        self.rules = rules or GpuRules()
        self._gpus = {d["index"]: _Gpu(d) for d in devices}
        self.last_util = {}

    def refresh(self, devices):
        """New device facts (a GPU lost at start was opened again: its maxima and thresholds are known now)."""
        for d in devices:
            g = self._gpus.get(d["index"])
            if g is None:
                self._gpus[d["index"]] = _Gpu(d)
            else:
                g.dev = d

    def check(self, readings, now):
        out = []
        for r in readings:
            g = self._gpus.get(r["index"])
            if g is None:  # a GPU that appeared after start (hot-plug is rare): learn it with unknown maxima
                g = self._gpus[r["index"]] = _Gpu(
                    {"index": r["index"], "max_gen": None, "max_width": None, "temp_slowdown": None, "temp_max": None}
                )
            f = self._lost(g, r)
            if f:
                out.append(f)
            if g.lost:
                continue  # nothing else about a GPU that does not answer: its standing findings stay as they are
            if r.get("util") is not None:
                self.last_util[r["index"]] = r["util"]
            f = self._pcie(g, r)
            if f:
                out.append(f)
            f = self._thermal(g, r)
            if f:
                out.append(f)
            f = self._nvlink(g, r, now)
            if f:
                out.append(f)
            if self.rules.util_drop:
                f = self._util(g, r, now)
                if f:
                    out.append(f)
        return out

    def _lost(self, g, r):
        dev = g.dev
        if r.get("lost"):
            g.lost_good = 0
            if not g.lost:
                g.lost = True
                g.lost_why = r.get("error") or dev.get("error") or "no answer"
        elif g.lost:
            g.lost_good += 1
            if g.lost_good >= self.rules.confirm:
                g.lost = False
        if not g.lost:
            return None
        pci = pci_text(dev.get("pci"))
        detail = "GPU %d lost (%s): %s" % (dev["index"], dev.get("bus_id") or pci or "bus unknown", g.lost_why)
        return events.Finding(
            ("lost", dev["index"]),
            events.GPU_LOST,
            dev["index"],
            detail,
            pci=pci,
            bus_id=dev.get("bus_id"),
            error=g.lost_why,
        )

    def load(self, g, r):
        """True (under load), False (idle) or None (no load signal readable)."""
        rules = self.rules
        util, power, pcie = r.get("util"), r.get("power_w"), r.get("pcie_mbps")
        limit = g.dev.get("power_limit_w")
        known = False
        if util is not None:
            known = True
            if util >= rules.load_util_pct:
                return True
        if power is not None and limit:
            known = True
            if power >= rules.load_power_frac * limit:
                return True
        if pcie is not None:
            known = True
            if pcie >= rules.load_pcie_mbps:
                return True
        return False if known else None

    def _pcie(self, g, r):
        rules, dev = self.rules, g.dev
        gen, width = r.get("gen"), r.get("width")
        exp_gen = rules.expected_gen or dev.get("max_gen")
        exp_width = rules.expected_width or dev.get("max_width")
        load = self.load(g, r)
        # under load: judge; idle: no evidence either way; unknown load: the seed's rules (gen in P0, width always)
        judge_gen = load is True or (load is None and r.get("pstate") == 0)
        judge_width = load is not False
        if gen is not None and exp_gen:
            g.gen.sample(gen, exp_gen, judge_gen, rules.confirm)
        if width is not None and exp_width:
            g.width.sample(width, exp_width, judge_width, rules.confirm)
        if not (g.gen.down or g.width.down):
            g.seen = None
            return None
        if g.seen is None:
            g.seen = (gen, width)
        gen0, width0 = g.seen
        detail = "PCIe link Gen%s x%s, expected Gen%s x%s" % (gen0, width0, exp_gen, exp_width)
        return events.Finding(
            ("pcie", dev["index"]),
            events.PCIE_DOWNGRADE,
            dev["index"],
            detail,
            link_gen=gen0,
            link_width=width0,
            max_gen=exp_gen,
            max_width=exp_width,
        )

    def _thermal(self, g, r):
        rules, dev = self.rules, g.dev
        temp = r.get("temp")
        if temp is None:
            return self._thermal_finding(g, None) if g.hot else None
        limit = dev.get("temp_slowdown")
        if limit:
            bad = temp >= limit
        else:
            limit = rules.thermal_fallback_c
            bad = temp > limit  # the seed's rule is strictly above 82 C
        if bad:
            g.hot_bad += 1
            g.hot_good = 0
        elif temp < limit - rules.thermal_hysteresis_c:
            g.hot_good += 1
            g.hot_bad = 0
        else:
            g.hot_bad = g.hot_good = 0
        if g.hot_bad >= rules.confirm:
            g.hot = True
        elif g.hot_good >= rules.confirm:
            g.hot = False
        return self._thermal_finding(g, temp, limit) if g.hot else None

    def _thermal_finding(self, g, temp, limit=None):
        dev = g.dev
        crit = temp is not None and dev.get("temp_max") and temp >= dev["temp_max"]
        detail = "GPU temperature %s C, slowdown threshold %s C%s" % (
            temp,
            limit,
            " (at GPU max %s C)" % dev["temp_max"] if crit else "",
        )
        return events.Finding(
            ("thermal", dev["index"]), events.THERMAL, dev["index"], detail, temp_c=temp, limit_c=limit
        )

    def _nvlink(self, g, r, now):
        cur = r.get("nvlink")
        prev = g.nvlink_prev
        if cur is not None:  # None: counters not read this sample (the source reads them less often)
            g.nvlink_prev = dict(cur)
        if prev is not None and cur is not None:
            incs = []
            for k, v in cur.items():
                p = prev.get(k)
                # a drop means the counters were reset (GPU reset, driver reload): rebase silently
                if p is not None and v - p >= self.rules.nvlink_min_delta:
                    incs.append((k, v - p))
            if incs:
                if g.nvlink_last_inc is None:
                    incs.sort()
                    g.nvlink_detail = "NVLink errors increasing: " + ", ".join(
                        "link %s +%d" % (k.replace(":", " "), d) for k, d in incs[:4]
                    )
                g.nvlink_last_inc = now
        if g.nvlink_last_inc is not None and now - g.nvlink_last_inc >= self.rules.nvlink_quiet_s:
            g.nvlink_last_inc = None
        if g.nvlink_last_inc is None:
            return None
        return events.Finding(("nvlink", g.dev["index"]), events.NVLINK_ERROR, g.dev["index"], g.nvlink_detail)

    def _util(self, g, r, now):
        rules = self.rules
        u = r.get("util")
        if u is None:
            return self._drop_finding(g) if g.drop else None
        procs = r.get("procs")
        window = g.utils
        window.append((now, u))
        while window and now - window[0][0] > rules.util_window_s + rules.util_drop_s:
            window.pop(0)
        if u <= rules.idle_pct:
            if g.low_since is None:
                g.low_since = now
                g.low_after_busy = any(
                    v >= rules.busy_pct for t, v in window[:-1] if g.low_since - t <= rules.util_window_s
                )
            g.drop_good = 0
            if not g.drop and g.low_after_busy and now - g.low_since >= rules.util_drop_s and procs != 0:
                g.drop = True
        else:
            g.low_since = None
            g.low_after_busy = False
            g.drop_good += 1
            if g.drop and g.drop_good >= rules.confirm:
                g.drop = False
        if g.drop and procs == 0:
            g.drop = False  # the job let go of the GPU: whatever it was, it is not a hang any more
        return self._drop_finding(g) if g.drop else None

    def _drop_finding(self, g):
        detail = "GPU utilisation fell from >= %d%% to <= %d%% for %ds with processes still attached" % (
            self.rules.busy_pct,
            self.rules.idle_pct,
            self.rules.util_drop_s,
        )
        return events.Finding(("util", g.dev["index"]), events.GPU_UTIL_DROP, g.dev["index"], detail)
