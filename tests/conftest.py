import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shared core is importable as on the board (/lib) and the common-subset tests import each other by name.
for p in (os.path.join(ROOT, "firmware", "lib"), os.path.join(ROOT, "tests", "core")):
    if p not in sys.path:
        sys.path.insert(0, p)
