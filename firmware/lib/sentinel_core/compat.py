# The one shim between the two interpreters: MicroPython's compiler folds `_NAME = const(123)` (int only) into the
# code that uses it and, for a name starting with "_", keeps neither a global nor an interned name for it, which
# saves heap on the board. CPython has no such builtin: there const() just returns its value.
try:
    # (type: ignore: the stubs' const is positional-only, a syntax MicroPython cannot parse in the fallback)
    from micropython import const  # pyright: ignore[reportAssignmentType]
except ImportError:

    def const(x):
        return x
