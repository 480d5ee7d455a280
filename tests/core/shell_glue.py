# Replays tests/vectors/shell.json against the core's shell glue (sentinel_core.shell.ShellGlue): signed requests
# through a real Receiver, raw button levels, a voice that reports when it is done, frames, ticks and reboots through
# the state document, with what the glue tells its shell to do and the /metrics samples it publishes at each step.
# Runs on CPython and MicroPython alike (tests/test_core_shared.py, tests/mpy/run.mjs); the same file drives the
# board's Sentinel (tests/firmware/shell_box.py) and the emulator's Engine (tests/test_shell_parity.py), so the
# two shells cannot drift from the glue or from each other.
import json

from sentinel_core import metrics, shell
from sentinel_core.alarm import preset
from sentinel_core.button import Button
from sentinel_core.keyring import KeyRing
from sentinel_core.layout import Layout
from sentinel_core.receiver import Receiver
from sentinel_core.render import Renderer
from sentinel_core.signing import scope, sign

VECTORS = "shell.json"

KEY_ID = "gw-test"
SECRET = "0123456789abcdef0123456789abcdef"
ACTS = {None: None, shell.PERSIST: "persist", shell.SAY: "say", shell.STOP: "stop"}
OUTCOMES = {"completed": shell.COMPLETED, "cut": shell.CUT, "failed": shell.FAILED}


def request_of(step, now):
    """(method, path, headers, body) of a step's request, signed with the vectors' key unless it says otherwise."""
    if "preset" in step:
        p = step["preset"]
        body = preset(p["name"], p.get("text"), key=p.get("key"), id=p.get("id")).to_wire()
    else:
        body = step.get("body", {})
    body = json.dumps(body).encode()
    ts = str(now + step.get("ts_skew", 0))
    method = step.get("method", "POST")
    path = step.get("path", "/api/v1/send_msg")
    sig = sign(SECRET.encode(), ts, body, scope(method, path))
    if step.get("forged"):
        sig = "0" * 64
    headers = {"Content-Type": "application/json", "X-API-Key": KEY_ID, "X-Timestamp": ts, "X-Signature": sig}
    return method, path, headers, body


def make_glue(case, now):
    """The glue as a shell builds it from the case's config: a 16x16 panel, the vectors' key."""
    cfg = case.get("config") or {}
    receiver = Receiver(KeyRing({KEY_ID: SECRET.encode()}))
    renderer = Renderer(Layout(16, 16), brightness=64, night_brightness=16, budget_ma=2000)
    b = case.get("button", {})
    g = shell.ShellGlue(
        cfg.get("terminal"), receiver, renderer, Button(b.get("debounce_ms", 30), b.get("long_ms", 3000)), now
    )
    g.health("clock", case.get("clock", True), now)
    return g


def samples(text):
    """{sample's name and labels: value} of a /metrics page."""
    out = {}
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            i = line.rindex(" ")
            v = line[i + 1 :]
            out[line[:i]] = float(v) if "." in v else int(v)
    return out


def page(g, now):
    return "".join(metrics.parts(g, now, {}))


def _fail(name, i, what, want, got):
    raise AssertionError("%s step %d: %s: want %r, got %r" % (name, i, what, want, got))


class Core:
    """The vectors' steps played straight on a ShellGlue (the shells' runners have the same methods)."""

    def __init__(self, case):
        self.case = case
        self.start = case["start"]
        self.glue = make_glue(case, self.start)
        self.voice = case.get("voice", True)  # False: a shell without a voice (busy=None)
        self.busy = False
        self.said = []

    def request(self, step, now):
        m, p, h, b = request_of(step, now)
        r = self.glue.receiver.handle(m, p, h, b, now, True, False)
        return r.status, self.glue.request(r, now)

    def button(self, level, t_ms, now):
        ev = self.glue.button_level(level, t_ms)
        return None if ev is None else self.glue.press(ev, now)

    def speech(self, now):
        act = self.glue.speech(now, self.busy if self.voice else None)
        if act == shell.SAY:
            self.said.append(self.glue.utterance.text)
            self.busy = True
        return act

    def voice_done(self, now, outcome, seq=None):
        self.busy = False
        if seq is None:
            u = self.glue.terminal.speaking
            seq = u.seq if u is not None else -1
        self.glue.voice_done(now, seq, OUTCOMES[outcome])

    def voice_stopped(self):
        self.busy = False

    def frame(self, now, t_ms):
        self.glue.frame(now, t_ms)
        return self.glue.display.pattern, self.glue.lamp

    def tick(self, now):
        return self.glue.tick(now)

    def health(self, name, ok, now):
        self.glue.health(name, ok, now)

    def reboot(self, now, clock):
        # Through the text a shell writes, parsed back as a shell loads it; the voice dies with the box.
        try:
            from io import StringIO
        except ImportError:
            from uio import StringIO  # pyright: ignore[reportMissingImports]
        f = StringIO()
        self.glue.write_state(f)
        d = json.loads(f.getvalue())  # pyright: ignore[reportAttributeAccessIssue]
        case = dict(self.case)
        case["clock"] = clock
        self.glue = make_glue(case, now)
        self.busy = False
        self.glue.restore(d, now)

    def metrics(self, now):
        return samples(page(self.glue, now))

    def snapshot(self, now):
        return self.glue.terminal.snapshot(now)


def play(case, runner):
    """Play case's steps on runner (Core here; the shells' runners elsewhere) and check every expectation."""
    name = case.get("name", "?")
    start = case["start"]
    for i in range(len(case["steps"])):
        step = case["steps"][i]
        now = start + step.get("at", 0)
        ms = step.get("ms", step.get("at", 0) * 1000)
        do = step.get("do")
        act = None
        exp = step.get("expect", {})
        if do == "request":
            status, act = runner.request(step, now)
            if "status" in exp and exp["status"] != status:
                _fail(name, i, "status", exp["status"], status)
        elif do == "button":
            # levels: [[ms after the step's ms, level], ...]; act: the acts that were not None, in order.
            acts = []
            for at, level in step["levels"]:
                a = runner.button(bool(level), ms + at, now)
                if a is not None:
                    acts.append(ACTS[a])
            if "acts" in exp and exp["acts"] != acts:
                _fail(name, i, "acts", exp["acts"], acts)
        elif do == "speech":
            act = runner.speech(now)
            if act == shell.STOP:
                runner.voice_stopped()
        elif do == "voice_done":
            runner.voice_done(now, step.get("outcome", "completed"), step.get("seq"))
        elif do == "frame":
            pattern, lamp = runner.frame(now, ms)
            if "pattern" in exp and exp["pattern"] != pattern:
                _fail(name, i, "pattern", exp["pattern"], pattern)
            if "lamp" in exp and exp["lamp"] != lamp:
                _fail(name, i, "lamp", exp["lamp"], lamp)
        elif do == "tick":
            act = runner.tick(now)
        elif do == "health":
            runner.health(step["name"], step["ok"], now)
        elif do == "reboot":
            runner.reboot(now, step.get("clock", True))
        elif do is not None:
            raise AssertionError("%s step %d: unknown action %r" % (name, i, do))
        if "act" in exp and exp["act"] != ACTS[act]:
            _fail(name, i, "act", exp["act"], ACTS[act])
        if "said" in exp and exp["said"] != runner.said:
            _fail(name, i, "said", exp["said"], runner.said)
        _check_state(name, i, runner, now, exp)


def _check_state(name, i, runner, now, exp):
    if "metrics" in exp:
        got = runner.metrics(now)
        want = exp["metrics"]
        for k in want:
            if got.get(k) != want[k]:
                _fail(name, i, "metric " + k, want[k], got.get(k))
    keys = ("active", "queued", "speaking", "muted", "problems", "dirty")
    for k in keys:
        if k in exp:
            break
    else:
        return
    snap = runner.snapshot(now)
    got = {
        "active": [a["key"] for a in snap["active"]],
        "queued": [q["key"] for q in snap["speech"]["queued"]],
        "speaking": None if snap["speech"]["speaking"] is None else snap["speech"]["speaking"]["text"],
        "muted": snap["mute"]["active"],
        "problems": snap["health"]["problems"],
        "dirty": runner.glue.dirty,
    }
    for k in keys:
        if k in exp and exp[k] != got[k]:
            _fail(name, i, k, exp[k], got[k])


def run_case(case):
    play(case, Core(case))


def test_a_varying_label_is_escaped_as_the_text_format_says():
    # Issue 38: a label value that varies (a refusal's code) is escaped by the one escaper, metrics.label, which the
    # host's pages use too: the same text on MicroPython as on CPython.
    got = "".join(metrics.family("# x\n", 'x{code="%s"} %s\n', {'a\\b"c\nd': 1}))
    assert got == '# x\nx{code="a\\\\b\\"c\\nd"} 1\n', got
