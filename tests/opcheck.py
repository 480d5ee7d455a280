"""Helpers for the operator's-mistake tests (issue 26): run a CLI through its real entry point, as root or as an
unprivileged user, and check that it answered with one line on stderr and no traceback. Not a test module."""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
NOBODY = 65534


def script(name, module):
    """The console script the install made (.venv/bin/NAME), else python -m MODULE."""
    exe = os.path.join(BIN, name)
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", module]


def unprivileged(cmd):
    """cmd run as a user without root's right to read and write anything: nobody (setpriv) when the suite runs as
    root, the suite's own user otherwise. Skips the test where that user cannot run this checkout's Python (a venv
    made from an interpreter under /root: docs/DEPLOY.md's point)."""
    import pytest

    if os.geteuid() != 0:
        return cmd
    prefix = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    p = subprocess.run(prefix + [sys.executable, "-c", "import host_client"], cwd="/", capture_output=True)
    if p.returncode != 0:
        pytest.skip("user nobody cannot run %s: %s" % (sys.executable, p.stderr.decode(errors="replace")[-200:]))
    return prefix + cmd


def shared_tmp():
    """A directory an unprivileged child can enter (pytest's tmp_path is 0700 root's when the suite runs as root)."""
    d = tempfile.mkdtemp(prefix="sentinel-op-")
    os.chmod(d, 0o755)
    return d


def remove(d):
    shutil.rmtree(d, ignore_errors=True)


def run(cmd, *, env=None, timeout=60, **kw):
    full = dict(os.environ)
    full.pop("SENTINEL_URL", None)
    full.update(env or {})
    return subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout, **kw)


def one_line(p, rc):
    """The process exited with rc and said why in exactly one line on stderr, without a traceback; the line."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == rc, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert len(lines) == 1, p.stderr
    return lines[0]
