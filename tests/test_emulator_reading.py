"""How the emulator splits an alarm text into runs for its voices and says technical tokens (no speech engine here;
tests/test_emulator_voice.py checks what espeak-ng makes of it)."""

import pytest
from alarm_texts import product_alarm_texts

from emulator.reading import LONG_PAUSE_S, is_cjk, runs, say_word_en, zh_number


@pytest.mark.parametrize(
    "digits,said",
    [
        ("0", "零"),
        ("2", "二"),
        ("10", "十"),
        ("15", "十五"),
        ("37", "三十七"),
        ("105", "一百零五"),
        ("110", "一百一十"),
        ("1001", "一千零一"),
        ("10005", "一万零五"),
        ("123456", "十二万三千四百五十六"),
        ("08", "零八"),
        ("2.5", "二点五"),
    ],
)
def test_mandarin_numerals(digits, said):
    assert zh_number(digits) == said


@pytest.mark.parametrize(
    "token,said",
    [
        ("gpu-worker-08", "G P U worker 0 8"),  # a name's digits with a leading zero: one by one
        ("gpu-node-117", "G P U node 1 1 7"),  # three digits in a name: one by one
        ("gpu-worker-3", "G P U worker 3"),
        ("A03", "eh 0 3"),  # a lone A would be the article "a"
        ("B12", "B 12"),  # B twelve
        ("XID", "X I D"),
        ("79", "79"),  # a number on its own stays a number: seventy-nine
        ("Gen3", "Gen 3"),
        ("x4", "by 4"),  # the link width: "by four"
        ("NCCL", "nickel"),
        ("NVLink", "N V link"),
        ("PCIe", "P C I E"),
        ("0000:3b:00.0", "0 0 0 0, 3 B, 0 0 point 0"),
        ("GpuXidFatal", "G P U X I D Fatal"),
        ("37%", "37 percent"),
        ("WARN", "WARN"),
        ("slurmctld", "slurm C T L D"),
    ],
)
def test_technical_tokens_in_english(token, said):
    assert say_word_en(token) == said


def test_english_text_is_one_english_run():
    r = runs("GPU 7 fell off the bus: XID 79, PCIe Gen3 x4")
    assert [(x.lang, x.text) for x in r] == [("en", "G P U 7 fell off the bus: X I D 79, P C I E Gen 3 by 4")]


def test_chinese_text_alternates_voices_with_pauses():
    r = runs("训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起")
    assert [(x.lang, x.text) for x in r] == [
        ("zh", "训练集群紧急预警，机架"),
        ("en", "eh 0 3"),
        ("zh", "节点"),
        ("en", "G P U worker 0 8"),
        ("zh", "触发通信死锁，全环算力挂起"),
    ]
    assert r[0].pause_s == 0 and all(0 < x.pause_s < 0.5 for x in r[1:])


def test_numbers_inside_chinese_are_mandarin():
    r = runs("硬件致命故障，机架 B12 节点 gpu-node-117 第 3 号卡发生驱动级报错")
    assert r[-1].text == "第三号卡发生驱动级报错"
    assert runs("告警汇总，2 个机架 5 个节点：通信死锁")[0].text == "告警汇总，两个机架五个节点：通信死锁"
    assert runs("算力利用率突降至百分之 37")[0].text == "算力利用率突降至百分之三十七"
    # A pause after punctuation is longer than the one between a word and a name.
    r = runs("告警汇总，2 个机架：XID 报错")
    assert r[1].lang == "en" and r[1].pause_s == LONG_PAUSE_S


def test_durations_and_job_ids_are_said_as_an_operator_says_them():
    """sentinel-remedy's "requeue in 120 s" (issue 34): seconds, not the letter S; a job id digit by digit in both
    languages, every id of a list, and only after job / 作业 (a count stays a count)."""
    r = runs("gpu-worker-08 drained, jobs 4183275, 4183276 asked to checkpoint, requeue in 120 s")
    assert (
        r[0].text
        == "G P U worker 0 8 drained, jobs 4 1 8 3 2 7 5, 4 1 8 3 2 7 6 asked to checkpoint, requeue in 120 seconds"
    )
    assert runs("retry in 1 s, 50 ms later")[0].text == "retry in 1 second, 50 milliseconds later"
    assert runs("job 1234 not requeued: requeued 3 times already")[0].text.endswith("requeued 3 times already")
    r = runs("gpu-worker-08 已隔离，作业 1234、1235 已通知保存检查点，120 秒后重新排队")
    assert r[-1].text == "已隔离，作业一二三四、一二三五已通知保存检查点，一百二十秒后重新排队"
    assert runs("作业 1234 未重新排队：已重排 3 次")[0].text == "作业一二三四未重新排队：已重排三次"
    assert [x.text for x in runs("隔离失败：scontrol did not answer within 15 s")][-1] == "十五秒"


def test_every_product_text_splits_cleanly():
    texts = product_alarm_texts()
    assert len(texts) > 60
    for origin, lang, text in texts:
        r = runs(text)
        assert r, origin
        numerals = set("零一二三四五六七八九十百千万两点度秒毫")  # and the units reading writes out
        hanzi = [ch for ch in text if is_cjk(ch) and ch.isalpha() and ch not in numerals]
        spoken = [ch for x in r if x.lang == "zh" for ch in x.text if ch.isalpha() and ch not in numerals]
        # every hanzi goes to the Mandarin voice, in order, and only hanzi and their punctuation do
        assert spoken == hanzi, origin
        for x in r:
            if x.lang == "zh":
                assert not any(c.isascii() and c.isalnum() for c in x.text), (origin, x)
            else:
                assert x.text.isascii(), (origin, x)
        if lang == "en":
            assert [x.lang for x in r] == ["en"], origin
