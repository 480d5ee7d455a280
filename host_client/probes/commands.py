"""The one place the probe runs a command for a reading (``ethtool -S``, ``ethtool -m``, ``nvidia-smi -q``).

A command that is missing, not permitted, too slow or failing is a reading that did not happen: the caller gets
``None`` and the failure is kept per command (argv[0] and its first argument) for /status, and logged once per
distinct failure, never raised (docs/PROBES.md, "Fabric and hardware sources").
"""

import logging
import subprocess

from host_client.logs import log_event

log = logging.getLogger("sentinel.probe")

# the words a tool prints when the kernel refused it (ethtool -m without CAP_NET_ADMIN prints this and exits 1)
_REFUSED = ("Operation not permitted", "Permission denied")


class Commands:
    """Runs reading commands with a timeout; ``failures`` maps "ethtool -m" -> the last failure, for /status."""

    def __init__(self, *, timeout_s=2.0, env=None):
        self.timeout_s = float(timeout_s)
        self.env = env
        self.failures = {}  # "tool subcommand" -> one-line reason (cleared when the command works again)
        self.runs = 0

    def run(self, argv):
        """stdout of argv as text, or None (the reason is in ``failures``)."""
        name = " ".join(argv[:2])
        self.runs += 1
        try:
            p = subprocess.run(
                argv,
                capture_output=True,
                timeout=self.timeout_s,
                env=self.env,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return self._fail(name, "%s: not installed (not found on PATH)" % argv[0])
        except PermissionError:
            return self._fail(name, "%s: not permitted (cannot execute)" % argv[0])
        except subprocess.TimeoutExpired:
            return self._fail(name, "%s: no answer within %.1f s" % (name, self.timeout_s))
        except OSError as e:
            return self._fail(name, "%s: %s" % (argv[0], e.strerror or e))
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip().splitlines()
            first = err[0][:160] if err else "exit status %d" % p.returncode
            if any(w in first for w in _REFUSED):
                return self._fail(name, "%s: not permitted (%s)" % (name, first))
            return self._fail(name, "%s: %s" % (name, first))
        if self.failures.pop(name, None) is not None:
            log_event(log, "reading_command_works_again", command=name)
        return out

    def _fail(self, name, reason):
        if self.failures.get(name) != reason:  # said once per distinct reason, not once per poll
            log_event(log, "reading_command_failed", logging.WARNING, command=name, error=reason)
        self.failures[name] = reason
        return None
