# Loads a vector file on both interpreters: /vectors under MicroPython, tests/vectors on CPython.
import json

try:
    import os

    _DIRS = ("/vectors", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vectors"))
except (ImportError, AttributeError):
    _DIRS = ("/vectors",)


def load(name):
    for d in _DIRS:
        try:
            with open(d + "/" + name) as f:
                return json.load(f)
        except OSError:
            pass
    raise OSError("vector file not found: " + name)
