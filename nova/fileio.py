"""Small file helpers shared by Nova's on-disk caches (kernel cache, plan cache)."""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path


def atomic_write(path: Path, data: bytes, key: str) -> None:
    """Write ``data`` to ``path`` atomically: a temp file next to it, fsync, ``os.replace``.
    The temp file is removed if anything fails; the error propagates."""
    fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def discard_bad_entry(path: Path, message: str, category, reported: set, lock, stacklevel: int) -> None:
    """Warn (once per path, mtime and size) that a cache entry is unusable, then delete it.
    ``stacklevel`` is counted from the caller of this helper, as for ``warnings.warn``."""
    try:
        st = path.stat()
        ident = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        ident = (str(path),)
    with lock:
        first = ident not in reported
        reported.add(ident)
    if first:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    try:
        path.unlink()
    except OSError:
        pass
