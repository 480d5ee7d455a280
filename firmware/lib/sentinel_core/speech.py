# What the voice has to say: one entry per incident (repeats of the same incident coalesce), a hard bound on the
# number of entries, and the utterances handed to the shell one at a time. Policy (who may speak when) is the
# terminal's; this module only keeps the queue bounded and ordered.


class Utterance:
    """One thing for the chip to say. seq is unique per utterance handed out; n of `of` repetitions."""

    def __init__(self, text, level, key, id, seq, n, of):
        self.text = text
        self.level = level
        self.key = key
        self.id = id
        self.seq = seq
        self.n = n
        self.of = of

    def to_dict(self):
        return {"text": self.text, "level": ("NORMAL", "P1", "P0")[self.level], "key": self.key, "id": self.id,
                "seq": self.seq, "n": self.n, "of": self.of}

    def __repr__(self):
        return "Utterance(%r level=%d key=%r %d/%d)" % (self.text, self.level, self.key, self.n, self.of)


class Entry:
    def __init__(self, key, level, text, id, count, due, order):
        self.key = key
        self.level = level
        self.text = text
        self.id = id
        self.remaining = count
        self.of = count
        self.spoken = 0
        self.due = due
        self.order = order
        # Bumped when a repeat of the incident replaces the entry while it is being spoken, so the utterance in
        # flight does not use up a repetition of the new alarm.
        self.gen = 0


class SpeechQueue:
    def __init__(self, capacity=8):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError("speech queue capacity must be an int >= 1")
        self.capacity = capacity
        self.entries = []
        self.dropped = 0
        self._order = 0

    def __len__(self):
        return len(self.entries)

    def find(self, key):
        for e in self.entries:
            if e.key == key:
                return e
        return None

    def add(self, key, level, text, id, count, now, busy_key=None):
        """Queue count repetitions for an incident. Returns the entry, or None when it was dropped (queue full of
        more urgent things). busy_key: the incident being spoken, never chosen as the victim."""
        self._order += 1
        e = self.find(key)
        if e is not None:
            e.level = level
            e.text = text
            e.id = id
            e.remaining = count
            e.of = count
            e.spoken = 0
            e.due = now
            e.order = self._order
            e.gen += 1
            return e
        if len(self.entries) >= self.capacity:
            victim = None
            for x in self.entries:
                if x.key == busy_key:
                    continue
                if victim is None or x.level < victim.level or (x.level == victim.level and x.order < victim.order):
                    victim = x
            if victim is None or victim.level > level:
                self.dropped += 1
                return None
            self.entries.remove(victim)
            self.dropped += 1
        e = Entry(key, level, text, id, count, now, self._order)
        self.entries.append(e)
        return e

    def remove(self, key):
        e = self.find(key)
        if e is not None:
            self.entries.remove(e)
        return e

    def clear(self):
        self.entries = []

    def due(self, now):
        """Entries ready to speak, most urgent first: level, then the earliest due, then arrival."""
        ready = [e for e in self.entries if e.due <= now]
        ready.sort(key=_urgency)
        return ready

    def shift(self, delta):
        for e in self.entries:
            e.due += delta


def _urgency(e):
    return (-e.level, e.due, e.order)
