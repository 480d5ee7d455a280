# The one shim between the two interpreters: MicroPython's compiler folds `_NAME = const(123)` (int only) into the
# code that uses it and, for a name starting with "_", keeps neither a global nor an interned name for it, which
# saves heap on the board. CPython has no such builtin: there const() just returns its value.
try:
    from micropython import const
except ImportError:
    def const(x):
        return x
