"""Every alarm text the product itself generates, collected from the code that generates it (not a hand list):
the gateway's speech templates in each language (GPU-numbered, node-level and PCI wordings) for two of the RFC's
racks and nodes, its summaries, the Alertmanager bridge's resolved wording, the presets' built-in text, the demo's
story, the send command the emulator prints at first start, and every announcement of sentinel-remedy as the gateway
makes it of remedy's alert (issue 34)."""

import inspect
import re

from emulator import config as emulator_config
from emulator.demo import P0_TEXT
from host_client.gateway import alertmanager, events, grouping
from host_client.gateway.config import Config as GatewayConfig
from host_client.remedy import announce
from sentinel_core.alarm import RECOVERED_TEXT

RACK = "A03"
PLACES = (("A03", "gpu-worker-08"), ("B12", "gpu-node-117-5f8d9c7b"))  # the second one's pod hash is cleaned
PCI = "0000:3b:00.0"
ALERTNAME = "GpuXidFatal"


def _event(place, etype, gpu_index, util=None, pci=None, recovers=None, xid=None, action=None, **more):
    return events.Event(
        place[0],
        place[1],
        etype,
        gpu_index=gpu_index,
        gpu_util=util,
        recovers=recovers,
        pci=pci,
        xid=xid,
        action=action,
        **more,
    )


def component_of(etype):
    """The part an issue 35 type names, as the probe names it: a switch and link, a PCI device, a NIC port."""
    if etype.startswith("NVSWITCH"):
        return "nvswitch3 link 44"
    return PCI if etype.startswith("PCIE") else "mlx5_3/2"


# The XIDs a room hears most, with the catalogue's action the probe sends: the facts the texts carry (issue 37).
XID_FACTS = (("XID_FATAL", 79, "RESTART_BM"), ("XID_FATAL", 48, "WORKFLOW_XID_48"), ("XID_WARNING", 13, "RESTART_APP"))


def _fill(tpl, phrases):
    """A summary template with its %d / %s filled: counts 2 and 5, the rack, the joined event phrases last."""
    n = [0]

    def one(m):
        n[0] += 1
        if m.group(0) == "%d":
            return "2" if n[0] == 1 else "5"
        return phrases if m.end() == len(tpl) else RACK

    return re.sub(r"%[sd]", one, tpl)


# What sentinel-remedy announces, with the values it meets: Slurm job ids as squeue prints them (an array task too),
# the grace and breaker defaults, and the one-line reasons its Slurm backend gives (host_client/remedy/slurm.py; the
# slurmctld-down line is the one real Slurm 22.05 printed in tests/test_remedy_chain.py).
REMEDY_JOBS = (["1234"], ["4183275", "4183276"], ["4183275_3"])
REMEDY_WHY = (
    "Slurm does not know node gpu-worker-99",
    "scontrol not found (set [slurm] scontrol to its path)",
    "scontrol did not answer within 15 s (slurmctld slow or down?)",
    "scontrol show node: slurm_load_node error: Unable to contact slurm controller (connect failure)",
)
# A drain a person or NHC set (NHC's reason format, https://github.com/mej/nhc README "check_fs_mount").
REMEDY_FOREIGN_REASON = "NHC: check_fs_mount: /scratch not mounted"


def remedy_announcements():
    """[(origin, texts {zh, en}, firing)] from host_client/remedy/announce.py's functions."""
    node = PLACES[0][1]
    out = []
    for jobs in REMEDY_JOBS:
        for dry in (False, True):
            out.append(("remedy drained dry=%s" % dry, announce.isolated_text(node, jobs, 120, dry_run=dry), True))
            out.append(("remedy signalled dry=%s" % dry, announce.signalled_text(node, jobs, dry_run=dry), True))
        out.append(("remedy running again", announce.running_again_text(jobs[0], "gpu-worker-11"), False))
        out.append(("remedy not requeued", announce.not_requeued_text(jobs[0], 3, 3), True))
    out.append(("remedy drained, no job", announce.isolated_text(node, [], 120), True))
    for why in REMEDY_WHY:
        out.append(("remedy isolation failed", announce.failed_text(why), True))
    out.append(("remedy breaker open", announce.breaker_text(2, 600, "gpu-worker-10"), True))
    out.append(("remedy left alone", announce.left_alone_text(node, REMEDY_FOREIGN_REASON), True))
    out.append(("remedy resumed", announce.resumed_text(node), False))
    return out


def remedy_alarm_texts():
    """What a terminal gets of each announcement: remedy's alert through the gateway's Alertmanager bridge."""
    cfg = GatewayConfig.from_dict({})
    out = []
    for origin, texts, firing in remedy_announcements():
        a = announce.alert(fingerprint="remedy:t", texts=texts, severity="warning", host=PLACES[0][1], firing=firing)
        (inc,) = alertmanager.parse_webhook({"version": "4", "alerts": [a]}, cfg)
        for lang in ("zh", "en"):
            out.append((origin, lang, inc.text_for(lang)))
    return out


def product_alarm_texts():
    """[(origin, language, text)] without duplicates."""
    out = []
    for place in PLACES:
        for etype in events.EVENT_TYPES:
            for lang in ("zh", "en"):
                if etype == "RECOVERED":
                    ev = _event(place, "XID_FATAL", 3, recovers="XID_FATAL")
                    out.append(("gateway recovery", lang, ev.text(lang)))
                    continue
                out.append(("gateway %s" % etype, lang, _event(place, etype, 3, util=37.0).text(lang)))
                if etype == "GPU_UTIL_DROP":
                    out.append(("gateway %s critical" % etype, lang, _event(place, etype, 3, util=2.0).text(lang)))
                spec = events.EVENT_TYPES[etype]
                if lang + "_node" in spec:
                    out.append(("gateway %s node" % etype, lang, _event(place, etype, -1).text(lang)))
                if lang + "_pci" in spec:
                    out.append(("gateway %s pci" % etype, lang, _event(place, etype, -1, pci=PCI).text(lang)))
    for place in PLACES:  # issue 35: the component a fabric / hardware type names, a hang after a fabric warning
        for lang in ("zh", "en"):
            for etype in sorted(events.COMPONENT_SCOPED):
                ev = _event(place, etype, -1, component=component_of(etype))
                out.append(("gateway %s component" % etype, lang, ev.text(lang)))
            for hang in sorted(events.HANG_TYPES):
                for after in sorted(events.AFTER_TYPES):
                    ev = _event(place, hang, 3, util=37.0, after=(after, "mlx5_3"))
                    out.append(("gateway %s after %s" % (hang, after), lang, ev.text(lang)))
    for place in PLACES:
        for etype, xid, action in XID_FACTS:
            for lang in ("zh", "en"):
                for gpu in (3, -1):
                    ev = _event(place, etype, gpu, util=37.0, pci=PCI, xid=xid, action=action)
                    out.append(("gateway %s XID %d gpu %d" % (etype, xid, gpu), lang, ev.text(lang)))
    for lang, tpl in alertmanager.RESOLVED_TEXT.items():
        out.append(("alertmanager resolved", lang, tpl % ("%s %s %s" % (ALERTNAME, PLACES[0][0], PLACES[0][1]))))
    for lang, table in grouping.SUMMARY_TEXT.items():
        phrases = table["sep"].join(events.phrase(t, lang) for t in list(events.EVENT_TYPES)[:3])
        for name, tpl in table.items():
            if name != "sep":
                out.append(("gateway summary %s" % name, lang, _fill(tpl, phrases)))
    out.append(("preset normal", "zh", RECOVERED_TEXT))
    out.append(("demo", "zh", P0_TEXT))
    first = inspect.signature(emulator_config.send_command).parameters["text"].default
    out.append(("first-start send command", "en", first))
    out.extend(remedy_alarm_texts())
    seen = set()
    unique = []
    for origin, lang, text in out:
        if text not in seen:
            seen.add(text)
            unique.append((origin, lang, text))
    return unique
