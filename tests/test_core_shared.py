"""Runs the common-subset tests in tests/core on CPython: the same modules, functions and vector files
that tests/mpy/run.mjs runs under MicroPython."""

import asyncio
import importlib
import inspect
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE_TESTS = os.path.join(ROOT, "tests", "core")
VECTORS = os.path.join(ROOT, "tests", "vectors")


def _modules():
    return sorted(n[:-3] for n in os.listdir(CORE_TESTS) if n.endswith(".py") and not n.startswith("_"))


def _functions():
    for name in _modules():
        mod = importlib.import_module(name)
        for attr in sorted(dir(mod)):
            if attr.startswith("test_") and callable(getattr(mod, attr)):
                yield pytest.param(name, attr, id="%s.%s" % (name, attr))


def _cases():
    for name in _modules():
        mod = importlib.import_module(name)
        vec = getattr(mod, "VECTORS", None)
        if vec and hasattr(mod, "run_case"):
            with open(os.path.join(VECTORS, vec), encoding="utf-8") as f:
                cases = json.load(f)["cases"]
            for i, case in enumerate(cases):
                label = case.get("name", i) if isinstance(case, dict) else i
                yield pytest.param(name, i, id="%s[%s]" % (name, label))


def _call(result):
    if inspect.iscoroutine(result):
        asyncio.run(result)


@pytest.mark.parametrize("module,func", list(_functions()))
def test_core_function(module, func):
    _call(getattr(importlib.import_module(module), func)())


@pytest.mark.parametrize("module,index", list(_cases()))
def test_core_vector(module, index):
    mod = importlib.import_module(module)
    with open(os.path.join(VECTORS, mod.VECTORS), encoding="utf-8") as f:
        case = json.load(f)["cases"][index]
    _call(mod.run_case(case))
