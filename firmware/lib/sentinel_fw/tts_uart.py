# The speech chip (SYN6288 or XFS5152CE) on a UART. The core's encoder builds every frame; this driver only moves
# bytes, paces multi-frame texts, and tells when the chip has finished: from the BUSY pin when it is wired, else
# from status queries, else (a chip that never answers) from an estimate, so the state machine keeps moving.
from sentinel_core.compat import const
from sentinel_fw import ticks

GRACE_MS = const(300)  # BUSY rises a few ms after a frame is accepted; the status reply lags similarly
_POLL_MS = const(250)  # status query period while speaking without a BUSY pin
_ANSWER_MS = const(600)  # a query not answered within this: the chip is not answering
_HEALTH_MS = const(15000)  # idle status query period: notices a chip that was unplugged or lost power
_MS_PER_UNIT = const(280)  # estimated speaking time per UTF-16 unit when nothing tells us (~3.5 syllables/s)


class TtsUart:
    def __init__(self, uart, encoder, busy_pin=None, busy_active_high=True):
        self.uart = uart
        self.encoder = encoder
        self.busy_pin = busy_pin
        self.busy_high = busy_active_high
        self._frames = None  # frames of the utterance being spoken; None: idle
        self.seq = None  # the seq the shell gave the utterance being spoken (reported back when it ends)
        self._next = 0  # index of the frame to send when the chip is free
        self._sent_at = 0
        self._estimate_ms = 0
        self._busy_reply = None  # last busy/idle the chip told us
        self._asked_at = None  # ticks of an unanswered status query
        self._last_query = None
        self._rx = bytearray(32)
        self.answering = None  # None until the first query resolves; then True / False
        self.errors = 0  # frames the chip refused (0x45)
        self.frames_sent = 0
        self.bytes_sent = 0

    def _transmit(self, data):
        """The only place that touches the UART's TX."""
        self.uart.write(data)
        self.frames_sent += 1
        self.bytes_sent += len(data)

    def _read(self):
        n = self.uart.any()
        if not n:
            return None
        if n > len(self._rx):
            n = len(self._rx)
        got = self.uart.readinto(self._rx, n)
        if not got:
            return None
        return self.encoder.parse_reply(memoryview(self._rx)[:got])

    def query(self, t_ms):
        self._transmit(self.encoder.status())
        self._last_query = t_ms
        if self._asked_at is None:
            self._asked_at = t_ms

    @property
    def speaking(self):
        return self._frames is not None

    def say(self, text, t_ms, seq=None):
        """Start speaking text (cuts whatever was playing); seq: the utterance's number, kept in self.seq until the
        next say. ValueError from the encoder for unusable text."""
        frames = self.encoder.synthesize(text)
        self.seq = seq
        if self._frames is not None:
            self._transmit(self.encoder.stop())
        self._frames = frames
        self._next = 0
        self._send_next(t_ms)

    def stop(self, t_ms=0):
        """Silence at once."""
        self._transmit(self.encoder.stop())
        self._frames = None
        self._busy_reply = None

    def _send_next(self, t_ms):
        f = self._frames[self._next]
        self._next += 1
        self._busy_reply = None
        self._transmit(f)
        self._sent_at = t_ms
        # Unicode: 2 bytes per unit; the frame header and tags are a few units too, harmless in an estimate.
        self._estimate_ms = (len(f) // 2) * _MS_PER_UNIT

    def _busy(self, t_ms):
        since = ticks.diff(t_ms, self._sent_at)
        if since < GRACE_MS:
            return True
        if self.busy_pin is not None and self.answering is not False:
            return (self.busy_pin.value() == 1) == self.busy_high
        if self.answering is False:
            return since < self._estimate_ms
        if self._last_query is None or ticks.diff(t_ms, self._last_query) >= _POLL_MS:
            self.query(t_ms)
        if self._busy_reply is None:
            # No verdict yet: keep waiting, but never longer than the estimate (a lost reply must not hang speech).
            return since < self._estimate_ms + GRACE_MS
        return self._busy_reply

    def step(self, t_ms):
        """Read replies, pace frames, probe health. Returns True once when the current utterance has finished."""
        r = self._read()
        if r is not None:
            if r.accepted or r.busy is not None or r.init or r.error:
                self.answering = True
                self._asked_at = None
            if r.busy is not None:
                self._busy_reply = r.busy
            if r.error:
                self.errors += 1
        if self._asked_at is not None and ticks.diff(t_ms, self._asked_at) > _ANSWER_MS:
            self.answering = False
            self._asked_at = None
        if self._frames is None:
            if self._last_query is None or ticks.diff(t_ms, self._last_query) >= _HEALTH_MS:
                self.query(t_ms)
            return False
        if self._busy(t_ms):
            return False
        if self._next < len(self._frames):
            self._send_next(t_ms)
            return False
        self._frames = None
        return True


def make_encoder(chip, volume=None, speed=None):
    """The core's encoder for a chip name from the config."""
    if chip == "syn6288":
        from sentinel_core import tts_syn6288 as mod
    elif chip == "xfs5152":
        from sentinel_core import tts_xfs5152 as mod
    else:
        raise ValueError("unknown TTS chip %r (syn6288, xfs5152)" % chip)
    return mod.Encoder(volume=volume, speed=speed)
