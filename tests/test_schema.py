"""host_client.schema: the one declared way the host side checks its config files (issue 38). Each loader's own
tests pin its errors (test_gateway_config.py, test_cli_probe_mistakes.py, test_client.py); these pin the helper's
rules on a table of its own, as a new loader (the remedy daemon's) would declare one."""

import pytest

from host_client import schema
from host_client.errors import ConfigError
from host_client.schema import Key

KEYS = {
    "lane": {
        "timeout_s": Key("float", 2.0, lo=0.05, hi=600),
        "mode": Key("str", "drain", choices=("drain", "watch")),
        "hosts": Key("strlist", []),
        "enabled": Key("bool", True),
        "retries": Key("int", 3, lo=0),
        "grace_s": Key("num"),
    },
}


def test_defaults_fill_and_values_are_checked():
    doc = schema.parse_toml('[lane]\ntimeout_s = 3\nhosts = ["gpu-1"]\n')
    schema.check_sections(doc, KEYS)
    got = schema.section(doc, "lane", KEYS["lane"])
    assert got == {
        "timeout_s": 3.0,
        "mode": "drain",
        "hosts": ["gpu-1"],
        "enabled": True,
        "retries": 3,
        "grace_s": None,
    }
    assert isinstance(got["timeout_s"], float)


@pytest.mark.parametrize(
    "lane,says",
    [
        ({"timeout_s": 0}, "lane.timeout_s must be >= 0.05"),
        ({"timeout_s": 601}, "lane.timeout_s must be <= 600"),
        ({"timeout_s": True}, "lane.timeout_s must be a number"),
        ({"mode": "dran"}, "lane.mode must be one of drain, watch"),
        ({"hosts": ["a", 1]}, "lane.hosts must be a list of strings"),
        ({"enabled": "yes"}, "lane.enabled must be true or false"),
        ({"retries": 1.5}, "lane.retries must be an integer"),
        ({"mdoe": "watch"}, "unknown key lane.mdoe: did you mean mode? (known: enabled, grace_s, hosts, mode, "),
        ({"xyz": 1}, "unknown key lane.xyz (known: enabled,"),
    ],
)
def test_one_line_errors_name_the_key(lane, says):
    with pytest.raises(ConfigError) as e:
        schema.section({"lane": lane}, "lane", KEYS["lane"])
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_the_probes_wording_ends_with_the_value():
    with pytest.raises(ConfigError, match=r"^\[lane\] retries must not be negative, got -1$"):
        schema.section({"lane": {"retries": -1}}, "lane", KEYS["lane"], schema.BRACKETED)


def test_a_loaders_own_wording_a_range_between_and_keys_at_the_top():
    """sentinel-remedy's style: "between lo and hi (got v)", and keys at the top of a file named alone."""
    style = schema.Style("%s.%s", got=True, sorted_known=True, got_text=" (got %r)", between=True)
    keys = {"grace_s": Key("float", 120.0, lo=0, hi=86400), "mode": Key("str", "off", choices=("off", "on"))}
    with pytest.raises(ConfigError, match=r"^slurm\.grace_s must be between 0 and 86400 \(got -1\)$"):
        schema.section({"slurm": {"grace_s": -1}}, "slurm", keys, style)
    with pytest.raises(ConfigError, match=r"^mode must be one of off, on \(got 'of'\)$"):
        schema.section({"mode": "of"}, "", keys, style, table={"mode": "of"})
    with pytest.raises(ConfigError, match=r"^unknown key mdoe: did you mean mode\?"):
        schema.section({"mdoe": "on"}, "", keys, style, table={"mdoe": "on"})


def test_unknown_section_is_named_with_the_closest():
    with pytest.raises(ConfigError, match=r"^unknown section \[lnae\]: did you mean lane\? \(known: lane\)$"):
        schema.check_sections({"lnae": {}}, KEYS)
    with pytest.raises(ConfigError, match=r"^\[lane\] must be a table$"):
        schema.check_sections({"lane": 3}, KEYS)


def test_removed_keys_are_refused_with_their_message():
    with pytest.raises(ConfigError, match="^lane.threads was removed: delete it$"):
        schema.section(
            {"lane": {"threads": 4}}, "lane", KEYS["lane"], removed={"threads": "lane.threads was removed: delete it"}
        )


def test_read_toml_words_its_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[lane\n")
    with pytest.raises(ConfigError, match="bad.toml is not valid TOML"):
        schema.read_toml(str(bad))
    with pytest.raises(ConfigError, match="cannot read .*missing.toml: No such file or directory"):
        schema.read_toml(str(tmp_path / "missing.toml"))
    bad.write_bytes(b'[lane]\nmode = "\xff"\n')
    with pytest.raises(ConfigError, match="bad.toml is not valid TOML"):
        schema.read_toml(str(bad))
