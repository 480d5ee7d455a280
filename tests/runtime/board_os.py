# os for the board runner (tests/runtime/board.py): the Unix port's own os, with rename's target made relative to
# "/" (the current directory there). Under a VFS mounted at "/", this port's rename of one absolute path to another
# fails with ENOENT; relative to the current directory it works, which is what the board's VFS does with either.
import os as _os

for _k in dir(_os):
    if not _k.startswith("__"):
        globals()[_k] = getattr(_os, _k)


def rename(old, new):
    if new.startswith("/") and _os.getcwd() == "/":
        new = new[1:]
    _os.rename(old, new)
