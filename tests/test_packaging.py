"""The distribution is what its names say: a standard-library client, and each other part's needs in its extra.

- what every part (client, gateway, probes, emulator) imports beyond the standard library is in that part's
  extra, read off the source (so a part that changes its server tells which extra to change);
- pip's resolver, from scratch, installs nothing but the distribution for `pip install NAME` (no server, no
  HTTP parser), and httptools (llhttp, from a wheel: no compiler) for `NAME[gateway]`;
- the built wheel, installed alone into a fresh venv without pip, imports and runs the client (sentinel-send) and
  names the missing extra instead of a traceback for the gateway and the emulator.

The wheel is built once per run (the slow step); the resolutions then read only package metadata (from pip's
cache or PyPI).
"""

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
NAME = PYPROJECT["project"]["name"]
OWN = {"host_client", "sentinel_core", "emulator"}
# The shared core runs on MicroPython too, where it imports this module (guarded): not a CPython dependency.
MICROPYTHON_ONLY = {"micropython"}
SERVERS = {"flask", "waitress", "werkzeug", "httptools"}

# part -> (its source files, the extra that carries its needs; None: the plain install)
PARTS = {
    "client": (
        list((ROOT / "host_client").glob("*.py")) + list((ROOT / "firmware/lib/sentinel_core").glob("*.py")),
        None,
    ),
    "gateway": (list((ROOT / "host_client/gateway").rglob("*.py")), "gateway"),
    "probes": (list((ROOT / "host_client/probes").rglob("*.py")), "probes"),
    "remedy": (list((ROOT / "host_client/remedy").rglob("*.py")), "remedy"),
    "emulator": (list((ROOT / "emulator").rglob("*.py")), "emulator"),
}


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(extra):
    """Distribution names an install with this extra (None: none) asks for, self-references expanded."""
    reqs = PYPROJECT["project"]["dependencies"] + (
        PYPROJECT["project"]["optional-dependencies"][extra] if extra else []
    )
    names = set()
    for line in reqs:
        r = Requirement(line)
        if _norm(r.name) == _norm(NAME):
            for e in r.extras:
                names |= _requirements(e)
        else:
            names.add(_norm(r.name))
    return names


def _third_party_imports(files):
    found = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                top = m.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN and top not in MICROPYTHON_ONLY:
                    found.setdefault(top, f.relative_to(ROOT).as_posix())
    return found


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_parts_imports_are_in_its_extra(part):
    files, extra = PARTS[part]
    assert files
    dists = packages_distributions()
    wanted = _requirements(extra)
    missing = []
    for module, where in sorted(_third_party_imports(files).items()):
        # Not installed here (tomli on Python >= 3.11, whose import is the fallback): its module name is its
        # distribution's name.
        provided = {_norm(d) for d in dists.get(module, [module])}
        if not provided & wanted:
            missing.append(
                "%s (imported by %s, from %s) is not in %s"
                % (
                    module,
                    where,
                    "/".join(sorted(provided)),
                    "[%s]" % extra if extra else "the plain install's dependencies",
                )
            )
    assert not missing, "pyproject.toml's extras do not match the imports: " + "; ".join(missing)


def test_client_needs_no_server_and_dev_is_everything():
    assert not _requirements(None) & SERVERS
    assert _requirements("gateway") - _requirements(None) == {"httptools"}  # no WSGI front (flask, waitress)
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - {"dev"}
    for e in extras:
        assert _requirements(e) <= _requirements("dev"), e


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # With the dev venv's setuptools (the [dev] extra has it): an isolated build env would cost a setuptools
    # install per run. The wheel's metadata is the same either way.
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("*.whl")
    return whl


def _resolve(spec, tmp_path):
    report = tmp_path / "report.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "-q",
            "--report",
            str(report),
            spec,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return {_norm(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}


def test_plain_install_resolves_to_the_distribution_alone(wheel, tmp_path):
    assert _resolve(str(wheel), tmp_path) <= {_norm(NAME), "tomli"}


def test_gateway_extra_brings_its_server(wheel, tmp_path):
    got = _resolve("%s[gateway] @ %s" % (NAME, wheel.as_uri()), tmp_path)
    assert "httptools" in got and not got & {"flask", "waitress"}
    assert not got & {"pygame", "pyttsx3", "nvidia-ml-py", "pytest"}


def test_wheel_carries_the_license_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "host_client/py.typed" in names
    assert not [n for n in names if n.startswith("tests/")]
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta


def test_client_runs_in_a_fresh_venv_with_nothing_else(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "PYTHONNOUSERSITE": "1",
    }
    # The fresh venv holds the wheel and nothing else (no system site-packages): no server, no pygame.
    probe = (
        "import importlib.util, sys; import host_client, host_client.cli, host_client.beat, sentinel_core; "
        "print(','.join(m for m in ('flask', 'waitress', 'pygame') if importlib.util.find_spec(m)))"
    )
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
    secret = tmp_path / "secret"
    secret.write_text("a-long-enough-secret-for-tests\n")
    bindir = Path(sysconfig.get_path("scripts", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    r = subprocess.run(
        [
            str(bindir / "sentinel-send"),
            "--url",
            "http://127.0.0.1:9",
            "--key-id",
            "ops",
            "--secret-file",
            str(secret),
            "--preset",
            "p1",
            "--text",
            "test",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("curl ") and "X-Signature" in r.stdout
    room = '[terminals.room]\nurl = "http://127.0.0.1:9"\nkey_id = "k"\nsecret_env = "S"\n'
    gw_cfg = tmp_path / "gateway.toml"
    gw_cfg.write_text(room)
    run_env = dict(env, S="a-long-enough-secret-for-tests")
    # The configuration checks out without the extra; serving needs its HTTP parser (httptools), and says so.
    r = subprocess.run(
        [str(bindir / "sentinel-gateway"), "-c", str(gw_cfg), "--check-config"],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    for argv, extra in (
        (["sentinel-emulator", "--headless", "--no-voice", "--no-persist", "--run-for", "0.1"], "emulator"),
        (["sentinel-gateway", "-c", str(gw_cfg), "--host", "127.0.0.1", "--port", "0"], "gateway"),
    ):
        r = subprocess.run(
            [str(bindir / argv[0])] + argv[1:], capture_output=True, text=True, env=run_env, timeout=60, cwd=tmp_path
        )
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert "pip install '%s[%s]'" % (NAME, extra) in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
