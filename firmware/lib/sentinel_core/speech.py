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
        return {
            "text": self.text,
            "level": ("NORMAL", "P1", "P0")[self.level],
            "key": self.key,
            "id": self.id,
            "seq": self.seq,
            "n": self.n,
            "of": self.of,
        }

    def __repr__(self):
        return "Utterance(%r level=%d key=%r %d/%d)" % (self.text, self.level, self.key, self.n, self.of)


class Entry:
    """An incident's pending speech: its alarm (what to say, at which level, under which id), `remaining` of `of`
    repetitions (those said: of - remaining), when the next is due. order is new at every add, a repeat of the
    incident included: the terminal tells by it that the entry was replaced while it was being spoken, so the
    utterance in flight does not use up a repetition of the new alarm."""

    # Six attributes: a member table of six slots (64 B on the board, for each of up to `capacity` entries).
    def __init__(self, key, alarm, count, due, order):
        self.key = key
        self.alarm = alarm
        self.remaining = count
        self.of = count
        self.due = due
        self.order = order


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

    def add(self, key, alarm, count, now, busy_key=None):
        """Queue count repetitions of an incident's alarm (its text, level and id). Returns the entry, or None when
        it was dropped (queue full of more urgent things). busy_key: the incident being spoken, never chosen as the
        victim."""
        self._order += 1
        level = alarm.level
        e = self.find(key)
        if e is not None:
            e.alarm = alarm
            e.remaining = count
            e.of = count
            e.due = now
            e.order = self._order
            return e
        if len(self.entries) >= self.capacity:
            victim = None
            for x in self.entries:
                if x.key == busy_key:
                    continue
                lx = x.alarm.level
                if victim is None or lx < victim.alarm.level or (lx == victim.alarm.level and x.order < victim.order):
                    victim = x
            if victim is None or victim.alarm.level > level:
                self.dropped += 1
                return None
            self.entries.remove(victim)
            self.dropped += 1
        e = Entry(key, alarm, count, now, self._order)
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
    return (-e.alarm.level, e.due, e.order)
