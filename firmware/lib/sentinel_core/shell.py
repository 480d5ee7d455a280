# The glue between the core and a shell (the board's sentinel_fw.app, the emulator's emulator.engine): one object
# that takes what the shell saw (a Receiver result, button levels, the end of an utterance, `now`), drives the
# Terminal, the Button and the Renderer, counts what /metrics publishes, and answers what the shell must do as named
# results. The shell keeps only its I/O (sockets, LEDs, the speech chip or the laptop's voice, flash or a file).
# The contract, step by step: docs/SHELL_CONTRACT.md. Checked on both interpreters by tests/vectors/shell.json.

from sentinel_core.compat import const
from sentinel_core.terminal import Terminal

# What a step asks of its shell (None: nothing).
PERSIST = "persist"  # the state that survives a reboot changed: write it (write_state, then saved)
SAY = "say"  # hand glue.utterance to the voice: its text, and its seq to report back with voice_done
STOP = "stop"  # cut the voice off now (the utterance is already over for the terminal)

# How an utterance ended, for voice_done (and the index of its counter in glue.utterances).
COMPLETED = 0
CUT = 1
FAILED = 2  # the voice could not say it (a text the chip's encoder refuses, a voice that broke)

# Request outcomes: the index of each counter in glue.requests. Private constants, folded at compile time: no name
# interned on the board for them (sentinel_core.metrics says why names count).
_ACCEPTED = const(0)
_DUPLICATE = const(1)
_REFUSED = const(2)

# At most this many utterances are consumed per step by a shell without a voice.
_SILENT_PER_STEP = const(4)


def applied(result):
    """Whether ShellGlue.request acts on this Receiver result (accepted and new): what changed the terminal."""
    return result.status == 200 and not result.duplicate


class ShellGlue:
    """config: the config's terminal section (None: the defaults). A section the Terminal refuses falls
    back to the defaults and shows config_error with the reason; config_error: a problem the shell found in its own
    config, shown the same way. receiver: a sentinel_core.receiver.Receiver (its replay guard is saved and restored
    with the terminal's state). renderer: a sentinel_core.render.Renderer. button: a sentinel_core.button.Button,
    None when the shell has none."""

    def __init__(self, config, receiver, renderer, button, now, config_error=None):
        try:
            self.terminal = Terminal(config)
        except ValueError as e:
            config_error = str(e)
            self.terminal = Terminal()
        self.config_error = config_error
        if config_error:
            self.terminal.set_health("config", False, now, config_error)
        self.receiver = receiver
        self.renderer = renderer
        self.button = button
        self.utterance = None  # what the last SAY asked to say
        self.display = None  # what the last frame showed (a sentinel_core.display.Display)
        self.lamp = False  # the button's lamp: on while an alarm above NORMAL is shown
        # What /metrics counts (sentinel_core.metrics), the same on both shells.
        self.requests = [0, 0, 0]  # accepted, duplicate, refused
        self.refused = {}  # error code -> refused requests
        self.accepted = {}  # kind (alarm, ack, heartbeat, unmute) -> accepted new requests
        self.alarms = [0, 0, 0]  # accepted alarms by level (NORMAL, P1, P0)
        self.presses = [0, 0]  # short, long
        self.utterances = [0, 0, 0]  # COMPLETED, CUT, FAILED
        self.frames = 0

    # ---- inputs ----------------------------------------------------------------------------------------------

    def request(self, result, now):
        """A Receiver result (receiver.handle(..., commit=False)): applied to the terminal when it was accepted and
        new, and only then recorded in the replay memory (Receiver.commit), so a request the terminal could not take
        (a MemoryError on the board: the shell answers 503) is applied on its retry, not answered "duplicate".
        Returns PERSIST when the state to save changed, else None. The shell answers result.status and
        result.body_bytes()."""
        if result.status != 200:
            self.refusal(result.answer.get("error"))
            return None
        if result.duplicate:
            self.requests[_DUPLICATE] += 1
            return None
        t = self.terminal
        kind = result.kind
        if kind == "alarm":
            t.on_alarm(result.alarm, now)
            self.alarms[result.alarm.level] += 1
        elif kind == "ack":
            t.on_ack(result.ack["key"], result.ack["long"], now, result.ack.get("by"))
        elif kind == "heartbeat":
            t.on_heartbeat(result.heartbeat["interval"], now)
        elif kind == "unmute":
            t.on_unmute(result.payload["key"], now)
        self.receiver.commit(result)
        # Counted once applied: a request the terminal could not take was not accepted (its shell answered 503).
        self.requests[_ACCEPTED] += 1
        self.accepted[kind] = self.accepted.get(kind, 0) + 1
        return PERSIST if t.dirty else None

    def http_totals(self):
        """(requests answered, of them refused): what the board's /status says under "http"."""
        n = self.requests
        return n[_ACCEPTED] + n[_DUPLICATE] + n[_REFUSED], n[_REFUSED]

    def refusal(self, code):
        """A request the shell refused itself before the receiver saw it (the board's server, a body too large by
        its Content-Length alone): counted as the receiver's refusals are."""
        self.requests[_REFUSED] += 1
        self.refused[code] = self.refused.get(code, 0) + 1

    def button_level(self, pressed, t_ms):
        """One raw sample of the ACK button (True: held down) at ms tick t_ms: the debounced press it completes,
        "short" or "long", which the shell hands to press() with `now`; else None. Allocation-free, and needs no
        `now` (the box polls at 100 Hz, and its Unix seconds are a heap object each)."""
        b = self.button
        if b is None:
            return None
        return b.sample(pressed, t_ms)

    def press(self, event, now, by="button"):
        """A debounced press ("short" mutes, "long" clears) acts on the terminal: returns PERSIST. by: who pressed
        (the emulator's browser page says "page")."""
        self.presses[0 if event == "short" else 1] += 1
        self.terminal.on_button(event, now, by)
        return PERSIST

    def unmute(self, key, now):
        """The way out of an ACK from the shell's own controls (key None: everything): returns PERSIST."""
        self.terminal.on_unmute(key, now)
        return PERSIST

    def voice_done(self, now, seq, outcome):
        """The voice finished the utterance seq (outcome COMPLETED, CUT or FAILED). An utterance already over for
        the terminal (cut off by a STOP, or replaced) is ignored."""
        t = self.terminal
        u = t.speaking
        if u is None or u.seq != seq:
            return
        t.speech_finished(now, seq)
        self.utterances[outcome] += 1

    def health(self, name, ok, now, detail=None):
        """A fact the shell measures about itself: "clock" (synced), "network" (up), "speech" (the voice
        answers), "config"."""
        self.terminal.set_health(name, ok, now, detail)

    # ---- steps -----------------------------------------------------------------------------------------------

    def speech(self, now, busy):
        """One step of the voice. busy: True while the shell's voice is speaking (or finishing), False when idle,
        None when the shell has no voice (utterances are then consumed at once, so the queue and its timing rules
        still run). Returns STOP (cut the voice now), SAY (glue.utterance) or None."""
        t = self.terminal
        u = t.speaking
        if u is not None and t.must_interrupt(now):
            t.speech_finished(now, u.seq)
            self.utterances[CUT] += 1
            return None if busy is None else STOP
        if busy:
            return None
        if busy is None:
            for _ in range(_SILENT_PER_STEP):
                u = t.next_utterance(now)
                if u is None:
                    break
                t.speech_finished(now, u.seq)
            return None
        if u is not None:
            # The voice is idle but has not reported this utterance's end yet (voice_done is on its way).
            return None
        u = t.next_utterance(now)
        if u is None:
            return None
        self.utterance = u
        return SAY

    def frame(self, now, t_ms):
        """The LED buffer of the frame at ms tick t_ms (the renderer's; the shell shows it). glue.display and
        glue.lamp say what it shows."""
        d = self.terminal.display(now)
        self.display = d
        self.lamp = d.level is not None and d.level > 0
        self.frames += 1
        return self.renderer.render(d, t_ms)

    def tick(self, now):
        """Time passes (alarms expire, the mute ends): PERSIST when the state to save changed, else None."""
        t = self.terminal
        t.tick(now)
        return PERSIST if t.dirty else None

    # ---- the saved state ---------------------------------------------------------------------------------------

    def restore(self, d, now):
        """Load a saved document (what write_state wrote, parsed): the replay floor first, so that nothing accepted
        before a reboot is accepted again even when the rest cannot be used; then the terminal's part, which raises
        ValueError (the state left untouched) when it is malformed. The shell reports its clock (health "clock")
        before this: deadlines are absolute only when the clock can be trusted."""
        self.receiver.replay.restore(d)
        t = self.terminal
        t.restore(d, now)
        t.mark_saved(d.get("version"))

    def write_state(self, f):
        """Write the state document into the open text file f, field by field (never built whole in the heap).
        Returns its version: once the shell has committed the file, it calls saved(version)."""
        from sentinel_core.persist import write_state

        t = self.terminal
        version = t.state_version
        write_state(t, f, self.receiver.replay.export())
        return version

    def saved(self, version):
        self.terminal.mark_saved(version)

    @property
    def dirty(self):
        return self.terminal.dirty
