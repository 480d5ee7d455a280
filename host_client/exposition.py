"""Prometheus text exposition (format 0.0.4) for the host side's /metrics pages, the gateway's and the probe's.

One writer and one label escaper: escape is the terminal's own (sentinel_core.metrics.label, which the box and the
emulator write their pages with), so a label value reads the same on every page one Prometheus scrapes.

    page = Page()
    page.family("sentinel_x_total", "counter", "What it counts.")
    page.lines.append("sentinel_x_total%s %d" % (page.labels(source="am"), 3))
    page.text()
"""

from __future__ import annotations

from collections.abc import Iterable

from sentinel_core.metrics import label as escape

__all__ = ["Page", "escape"]


class Page:
    """A page being written: lines, appended in the page's order; family() starts a family, labels() writes a
    label set; text() is the page."""

    __slots__ = ("lines",)

    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, typ: str, help_: str) -> None:
        """The HELP and TYPE lines of the family name."""
        self.lines.append("# HELP %s %s" % (name, help_))
        self.lines.append("# TYPE %s %s" % (name, typ))

    def labels(self, **kw) -> str:
        """{k="v",...} in keyword order, every value escaped."""
        return self.label_pairs(kw.items())

    @staticmethod
    def label_pairs(pairs: Iterable[tuple[str, object]]) -> str:
        """{k="v",...} of (name, value) pairs in their order, every value escaped; "" for none."""
        s = ",".join('%s="%s"' % (k, escape(v)) for k, v in pairs)
        return "{%s}" % s if s else ""

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
