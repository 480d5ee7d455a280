"""How the emulator reads an alarm text aloud: which voice reads which part, and how technical tokens are said.

An alarm text mixes scripts: "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁". No single espeak-ng voice
reads that well. On espeak-ng 1.51 (Debian 12, Ubuntu 24.04) the `cmn` voice falls back to English for most hanzi and
reads them as English-spelled pinyin (espeak-ng #1236), while `cmn-latn-pinyin` reads hanzi correctly but reads
"gpu-worker-08" as pinyin. So the text is split into runs: hanzi (with their punctuation and the numbers of the
sentence, as Chinese numerals) for the Mandarin voice, Latin tokens for the English voice, spoken back to back as one
utterance with short pauses (emulator.voice joins the audio).

Technical tokens are read as an operator says them, in both languages:

    gpu-worker-08   G P U worker zero eight        (digits in a name with a leading zero: one by one)
    gpu-node-117    G P U node one one seven       (three digits or more in a name: one by one)
    A03, B12        A zero three, B twelve
    XID 79          X I D seventy-nine             (a number on its own stays a number)
    Gen3 x4         Gen three by four              (a PCIe link's generation and width)
    NCCL, NVLink    nickel, N V link
    8 GPUs, XIDs    eight G P U's, X I D's         (an initialism's plural: "G P Us" is read "G P us")
    85 C, 85°C      eighty-five degrees; 八十五度   (a temperature: a number, then C, °C or ℃)
    91%             ninety-one percent; 百分之九十一
    120 s, 50 ms    a hundred and twenty seconds, fifty milliseconds; 一百二十秒, 五十毫秒
    job 4183275     job four one eight three two seven five; 作业 四一八三二七五 (an id after job / 作业: digit by
                    digit, every id of a list "jobs 1234, 1235" / "作业 1234、1235")
    第 3 号卡        第三号卡 (Mandarin numerals inside a Chinese sentence; 2 before a measure word is 两)
"""

import re

# Code points read by the Mandarin voice: CJK ideographs, CJK punctuation, full-width forms.
_CJK_RANGES = (
    (0x3000, 0x303F),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2FA1F),
)


def is_cjk(ch):
    c = ord(ch)
    for lo, hi in _CJK_RANGES:
        if lo <= c <= hi:
            return True
    return False


def is_chinese(text):
    return any(is_cjk(ch) for ch in text)


# Acronyms and names said in a way espeak would not guess from the letters.
SAY_EN = {
    "nccl": "nickel",
    "gpu": "G P U",
    "gpus": "G P U's",  # "G P Us" is read "G P us"; espeak says the 's as the plural's z
    "cpu": "C P U",
    "xid": "X I D",
    "pci": "P C I",
    "pcie": "P C I E",
    "nvlink": "N V link",
    "ecc": "E C C",
    "nvml": "N V M L",
    "hbm": "H B M",
    "smi": "S M I",
    "dcgm": "D C G M",
    "ib": "I B",
    "rdma": "R D M A",
    "nic": "nick",
    "ntp": "N T P",
    "ack": "ack",
    "ok": "okay",
    "p0": "P zero",
    "p1": "P one",
    "id": "I D",
    "ip": "I P",
    "io": "I O",
    "sm": "S M",
    "os": "O S",
    "slurmctld": "slurm C T L D",
    "slurmd": "slurm D",
}
# A lone capital A is read as the article ("a#"): its letter name is written out.
_LETTER: dict[str, str] = {"a": "eh"}
_WORD = re.compile(r"[A-Za-z0-9]+(?:[-_:/.][A-Za-z0-9]+)*%?")
_PIECES = re.compile(r"[A-Za-z]+|[0-9]+")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_PAUSE_PUNCT = set("，。、；：！？,.;:!?")
_MEASURE = set("个张台块条次位名")

_ZH_DIGITS = "零一二三四五六七八九"


def zh_number(text):
    """Digits (optionally with one decimal point) as a Mandarin numeral: 37 三十七, 105 一百零五, 2.5 二点五."""
    if "." in text:
        whole, frac = text.split(".", 1)
        return zh_number(whole or "0") + "点" + "".join(_ZH_DIGITS[int(d)] for d in frac)
    if len(text) > 1 and text[0] == "0":
        return "".join(_ZH_DIGITS[int(d)] for d in text)  # 08: 零八, as a code, not a count
    n = int(text)
    if n >= 10**8:
        return "".join(_ZH_DIGITS[int(d)] for d in text)
    if n == 0:
        return "零"
    out = ""
    if n >= 10000:
        out = _zh_below_10000(n // 10000) + "万"
        n %= 10000
        if n and n < 1000:
            out += "零"
    if n:
        out += _zh_below_10000(n)
    if out.startswith("一十"):
        out = out[1:]  # 十五, not 一十五
    return out


def _zh_below_10000(n):
    out = ""
    zero = False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value
        n %= value
        if d:
            if zero:
                out += "零"
                zero = False
            out += _ZH_DIGITS[d] + unit
        elif out:
            zero = True
    return out


def _digits_one_by_one(digits):
    return " ".join(digits)


def say_word_en(tok):
    """One Latin token (letters, digits, joiners) as English words for espeak."""
    percent = tok.endswith("%")
    if percent:
        tok = tok[:-1]
    if tok.replace(".", "", 1).isdigit():
        if len(tok) > 1 and tok[0] == "0" and "." not in tok:
            return _digits_one_by_one(tok) + (" percent" if percent else "")
        return tok + (" percent" if percent else "")
    lower = tok.lower()
    if lower in SAY_EN:
        return SAY_EN[lower]
    words = []
    groups = re.split(r"[-_:/]", tok)
    spelled = ":" in tok  # a bus id or a MAC: every character on its own
    for group in groups:
        if not group:
            continue
        if spelled:
            words.append(
                " point ".join(" ".join(_letter(c) if c.isalpha() else c for c in part) for part in group.split("."))
                + ","
            )
            continue
        pieces = _PIECES.findall(group)
        for i, piece in enumerate(pieces):
            if piece.isdigit():
                prev = pieces[i - 1].lower() if i else ""
                if prev == "x" or prev == "gen":
                    words.append(piece)  # Gen3, x4: a number
                elif piece[0] == "0" and len(piece) > 1 or len(piece) >= 3:
                    words.append(_digits_one_by_one(piece))  # 08, 117 in a name: one by one
                else:
                    words.append(piece)  # B12: twelve
                continue
            low = piece.lower()
            nxt = pieces[i + 1] if i + 1 < len(pieces) else ""
            if low == "x" and nxt.isdigit():
                words.append("by")  # x4: the link width, "by four"
            elif low in SAY_EN:
                words.append(SAY_EN[low])
            elif len(piece) >= 3 and piece[-1] == "s" and piece[:-1].isupper():
                words.append(_say_letters(piece))  # GPUs, XIDs: an initialism's plural, not camel case
            elif not piece.isupper() and not piece.islower() and not piece.istitle():
                words.extend(_say_letters(w) for w in _CAMEL.findall(piece))  # GpuXidFatal: Gpu Xid Fatal
            else:
                words.append(_say_letters(piece))
    out = " ".join(w for w in words if w).rstrip(",")
    return out + (" percent" if percent else "")


def _say_letters(piece):
    low = piece.lower()
    if low in SAY_EN:
        return SAY_EN[low]
    if len(piece) >= 3 and piece[-1] == "s" and piece[:-1].isupper():
        stem = _say_letters(piece[:-1])  # XIDs, NICs: the plural of an initialism
        return stem + ("'s" if " " in stem else "s")
    if len(piece) == 1:
        return _letter(piece)
    if piece.isupper() and len(piece) <= 5 and not _pronounceable(piece):
        return " ".join(_letter(c) for c in piece)
    return piece


def _letter(c: str) -> str:
    return _LETTER.get(c.lower(), c.upper())


def _pronounceable(word):
    # Upper-case words that are words (WARN, FAIL, DOWN), not initialisms: they hold a vowel after a consonant.
    w = word.lower()
    return len(w) >= 4 and any(v in w[1:] for v in "aeiou")


class Run:
    """A piece of an utterance: its language ("zh" or "en"), the words the voice gets, and the pause before it."""

    __slots__ = ("lang", "text", "pause_s", "source")

    def __init__(self, lang, text, pause_s, source):
        self.lang = lang
        self.text = text
        self.pause_s = pause_s
        self.source = source

    def __repr__(self):
        return "Run(%s, %r, %.2f)" % (self.lang, self.text, self.pause_s)

    def as_dict(self):
        return {"lang": self.lang, "text": self.text, "pause_s": self.pause_s}


SHORT_PAUSE_S = 0.08  # between a Chinese word and a Latin name in the same clause
LONG_PAUSE_S = 0.28  # after a comma or a full stop


def _tokens(text):
    """(kind, text) with kind word, cjk, space or other."""
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        m = _WORD.match(text, i)
        if m is not None and m.end() > i:
            yield "word", m.group(0)
            i = m.end()
            continue
        if is_cjk(ch):
            j = i + 1
            while j < n and is_cjk(text[j]):
                j += 1
            yield "cjk", text[i:j]
            i = j
            continue
        if ch.isspace():
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            yield "space", text[i:j]
            i = j
            continue
        yield "other", ch
        i += 1


# A temperature: a number, then C, °C or ℃ (the Prometheus rules say "at 85 C"); not 85Cx or 85 CPU.
_DEGREES = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?) ?(?:°\s?C|℃|°|C)(?![A-Za-z0-9])")


def _degrees_en(m):
    return "%s degree%s" % (m.group(1), "" if m.group(1) == "1" else "s")


# A duration: a number, then s or ms ("requeue in 120 s"); a lone s would be read as the letter.
_SECONDS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?) ?(s|ms)(?![A-Za-z0-9])")


def _seconds_en(m):
    unit = "millisecond" if m.group(2) == "ms" else "second"
    return "%s %s%s" % (m.group(1), unit, "" if m.group(1) == "1" else "s")


def _seconds_zh(m):
    return m.group(1) + ("毫秒" if m.group(2) == "ms" else "秒")


# The words after which a number is an id, read digit by digit (a job id is no quantity); "、" and "," go on a list.
_ID_AFTER_EN = {"job", "jobs"}
_ID_AFTER_ZH = ("作业", "任务")


def _id_digits_zh(digits):
    return "".join(_ZH_DIGITS[int(d)] for d in digits)


def runs(text):
    """Split an utterance into Runs. Text without any CJK character is one English run."""
    if not is_chinese(text):
        text = _SECONDS.sub(_seconds_en, _DEGREES.sub(_degrees_en, text))
    else:
        text = _SECONDS.sub(_seconds_zh, _DEGREES.sub(lambda m: m.group(1) + "度", text))
    if not is_chinese(text):
        parts = []
        ident = False  # after "job": the numbers that follow are ids
        for kind, tok in _tokens(text):
            if kind != "word":
                parts.append(tok)
                continue
            if ident and tok.isdigit():
                parts.append(_digits_one_by_one(tok))
                continue
            ident = tok.lower() in _ID_AFTER_EN
            parts.append(say_word_en(tok))
        spoken = re.sub(r"\s+", " ", "".join(parts)).strip()
        return [Run("en", spoken, 0.0, text)] if spoken else []
    pieces = []  # (lang, spoken, source)
    toks = list(_tokens(text))
    ident = False  # after 作业: the numbers that follow are ids
    for i, (kind, tok) in enumerate(toks):
        if kind == "cjk":
            pieces.append(("zh", tok, tok))
            ident = tok.endswith(_ID_AFTER_ZH) or (ident and tok == "、")
        elif kind == "word":
            bare = tok[:-1] if tok.endswith("%") else tok
            if ident and tok.isdigit():
                pieces.append(("zh", _id_digits_zh(tok), tok))
            elif bare.replace(".", "", 1).isdigit():
                nxt = ""
                for k2, t2 in toks[i + 1 :]:
                    if k2 != "space":
                        nxt = t2[0]
                        break
                spoken = "两" if bare == "2" and nxt in _MEASURE else zh_number(bare)
                if tok.endswith("%"):
                    spoken = "百分之" + spoken
                pieces.append(("zh", spoken, tok))
            else:
                ident = False
                pieces.append(("en", say_word_en(tok), tok))
        elif kind == "space":
            pieces.append((None, " ", tok))
        else:
            # ASCII punctuation: a pause where it separates, nothing to say.
            pieces.append((None, tok if tok in _PAUSE_PUNCT else " ", tok))
    out = []
    cur = None  # [lang, spoken, source]
    punct = False  # punctuation since the current run's last words
    for lang, spoken, src in pieces:
        if lang is None:
            if cur is not None:
                cur[2] += src
                if spoken.strip():
                    punct = True
                    if cur[0] == "en":
                        cur[1] += spoken
                elif cur[0] == "en":
                    cur[1] += " "
            continue
        if cur is not None and lang == cur[0]:
            if lang == "en" and not cur[1].endswith(" "):
                cur[1] += " "
            cur[1] += spoken
            cur[2] += src
            punct = False
            continue
        pause = 0.0
        if cur is not None:
            out.append(Run(cur[0], _tidy(cur[1]), 0.0, cur[2]))
            ends = cur[1].rstrip()[-1:]
            pause = LONG_PAUSE_S if punct or ends in _PAUSE_PUNCT else SHORT_PAUSE_S
        cur = [lang, spoken, src]
        punct = False
        out.append(None)  # marks the pause before the next run
        out[-1] = pause
    if cur is not None:
        out.append(Run(cur[0], _tidy(cur[1]), 0.0, cur[2]))
    result = []
    pause = 0.0
    for x in out:
        if isinstance(x, Run):
            if x.text:
                x.pause_s = pause if result else 0.0
                result.append(x)
            pause = 0.0
        else:
            pause = max(pause, x)
    return result


def _tidy(spoken):
    return re.sub(r"\s+", " ", spoken).strip()
