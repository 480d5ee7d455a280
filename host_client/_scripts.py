"""Console scripts for the parts that need an extra: a missing one is named with its pip line, not a traceback.

The client itself (sentinel-send) needs nothing beyond the standard library; the gateway's server and the
emulator's window, voice and server come with the distribution's extras (pyproject.toml).
"""

import importlib
import sys

DISTRIBUTION = "gpu-sentinel-alarm"
_OWN = ("host_client", "sentinel_core", "emulator")


def _run(module, extra, prog):
    try:
        return importlib.import_module(module).main()
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if not top or top in _OWN:
            raise
        print(
            "%s: the Python package %r is missing; it comes with the %s extra: pip install '%s[%s]'"
            % (prog, top, extra, DISTRIBUTION, extra),
            file=sys.stderr,
        )
        return 2


def gateway():
    return _run("host_client.gateway.cli", "gateway", "sentinel-gateway")


def emulator():
    return _run("emulator.__main__", "emulator", "sentinel-emulator")


def remedy():
    return _run("host_client.remedy.cli", "remedy", "sentinel-remedy")
