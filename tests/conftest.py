import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shared core is importable as on the board (/lib), the common-subset tests import each other by name, and the
# helpers shared with the benches are the checkout's testkit package.
for p in (os.path.join(ROOT, "firmware", "lib"), os.path.join(ROOT, "tests", "core"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

# The files whose tests take minutes (measured: pytest --durations) are collected first, so that in make test's
# parallel pass (pytest-xdist --dist loadfile hands out files in collection order) they start at once instead of
# starting last and holding the whole run up. Within a file the order is unchanged.
_LONG_FIRST = (
    "test_firmware_suites.py",  # test_memory_figures_stay_in_bounds: 2-4 min of MicroPython under node
    "test_deploy_host.py",  # the plain-host steps: venvs and installs
    "test_terminal_machine.py",  # the hypothesis state machine
    "test_gateway_alertmanager_ha.py",  # a real Alertmanager HA pair, 60 s of watching
    "test_deploy_path_alerts.py",  # real Prometheus and Alertmanager, a rule's for: 2m
    "test_deploy_e2e_prometheus.py",  # real Prometheus and Alertmanager
    "test_hostile_fuzz.py",
    "test_firmware_pyright.py",
    "test_emulator_voice.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = os.path.basename(str(item.path))
        return _LONG_FIRST.index(name) if name in _LONG_FIRST else len(_LONG_FIRST)

    items.sort(key=rank)
