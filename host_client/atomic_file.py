"""The one way the host side replaces a state file: a temporary file beside it, written, flushed, fsynced (unless
asked not to), renamed over the old one. A crash leaves the old file or the new one, never half of either."""

from __future__ import annotations

import os
import tempfile

__all__ = ["replace"]


def replace(path: str, data: bytes, *, fsync: bool = True) -> None:
    """path holds data afterwards. fsync=False still survives a crash of this process (the rename is atomic and the
    page cache keeps the data); fsync=True also survives the machine's. The temporary file never outlives a failure."""
    fd, tmp = tempfile.mkstemp(prefix=".%s.tmp." % os.path.basename(path), dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
