"""The kernel cache directory of a command, checked before any work: one usage line (exit 2) for a
directory that is a file, a given directory that does not exist (commands that read it), or one
the command cannot write (commands that compile into it) — never "0 kernels", a "corrupt" entry
or a failure per kernel after minutes of compiling."""
from __future__ import annotations

import os
from pathlib import Path

from nova.cli.common import UsageError


def _source(cache_dir) -> str:
    """Where the directory came from, for the message."""
    if cache_dir is not None:
        return "--cache-dir"
    from nova import options
    return "NOVA_CACHE_DIR" if options.current().cache_dir is not None else "the default cache directory"


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def open_cache(cache_dir=None, *, reads: bool = False, writes: bool = False):
    """The ``KernelCache`` of ``cache_dir`` (None: ``NOVA_CACHE_DIR`` or the default).  ``reads``:
    a directory named with ``--cache-dir`` must exist; ``writes``: the command will store kernels
    there, so it (or, not yet created, its nearest existing parent) must be writable."""
    from nova.runtime.cache import KernelCache
    cache = KernelCache(cache_dir)
    root, source = cache.root, _source(cache_dir)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{source} {root} is a file, not a directory: give the cache's directory")
    if reads and cache_dir is not None and not root.exists():
        raise UsageError(f"{source} {root} does not exist (nova cache path prints the cache directory in use)")
    if writes:
        where = _nearest_existing(cache.kernels_dir)
        if not where.is_dir():
            raise UsageError(f"{source} {root}: {where} is a file, not a directory")
        if not os.access(where, os.W_OK | os.X_OK):
            raise UsageError(f"{source} {root} is not writable ({where} is read-only): pass --cache-dir with a "
                             f"writable directory, or set NOVA_CACHE_DIR")
    return cache
