"""The kernel cache: an on-disk store of kernel artifacts under their structural keys.

The keys come from the kernel families (``nova.kernels.family.kernel_key``: sha256 of a canonical
JSON of the family, the problem, the schedule, the target, the Nova version and the toolchain and
the family's ABI).  Equal inputs give equal keys on any machine, so ``nova precompile --target h200``
on a build host fills exactly the entries an H200 runtime looks up.  This module names no family.

Layout: ``<dir>/kernels/<key[:2]>/<key>.json`` holding the artifact's ``to_dict()`` plus ``key``,
``summary`` and ``sha256`` (of the canonical JSON of every other field).  Writes are atomic (temp
file in the same directory + ``os.replace``), so concurrent writers of one key both succeed and a
reader never sees a partial file.  A corrupt entry is reported once, deleted and rebuilt.
``<dir>/misses/<key>.pickle``: what an offline look-up wanted and did not find (``record_miss``), so
that a host with MLIR builds exactly that (``nova precompile misses``) -- the device's torch may
trace a model into other kernels than the host's.

Offline mode (``NOVA_OFFLINE=1`` or ``set_offline(True)``): cache only; a miss raises
``NotPrecompiledError``, whose message (``nova.messages``) tells how to precompile.  Online: a miss
compiles (MLIR imported lazily).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path

from nova import options
from nova.codegen.artifact import KernelArtifact
from nova.fileio import atomic_write, discard_bad_entry
from nova.messages import not_precompiled, summary_line  # noqa: F401  (summary_line: nova.runtime's)
from nova.runtime.driver import NovaRuntimeError
from nova.version import __version__

CODEGEN_TOOLCHAIN = "xtc-mlir-python-bindings==22.1.8.4"
ENTRY_FORMAT = 1


class NotPrecompiledError(NovaRuntimeError):
    """Offline mode and the kernel is not in the cache: carries ``problem``, ``target``, ``key`` and
    ``cache_root``; the message (``nova.messages.not_precompiled`` for GEMMs, ``message`` from other
    kernel families) names the command that builds it."""

    def __init__(self, problem, target, key: str, cache_root, message: str | None = None):
        super().__init__(message or not_precompiled(problem, target, key, cache_root))
        self.problem, self.target, self.key, self.cache_root = problem, target, key, cache_root
        self.message = message

    def __reduce__(self):
        return type(self), (self.problem, self.target, self.key, self.cache_root, self.message)


class CompilerUnavailableError(NovaRuntimeError):
    """Online mode missed the cache but MLIR (the code generator's dependency) is not importable."""


class CacheCorruptionWarning(UserWarning):
    """A cache entry failed to parse or its checksum did not match; it was deleted and will be rebuilt."""


# --------------------------------------------------------------------------- the structural hash
def canonical_json(obj) -> str:
    """Sorted keys, no whitespace, ASCII: the same text for equal data whatever the dict order."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# --------------------------------------------------------------------------- offline switch
_offline_override: bool | None = None


def set_offline(flag: bool | None) -> None:
    """Force offline (True) or online (False) mode; ``None`` goes back to ``NOVA_OFFLINE``."""
    global _offline_override
    _offline_override = None if flag is None else bool(flag)


def is_offline() -> bool:
    """``set_offline``'s setting, else ``NOVA_OFFLINE``."""
    if _offline_override is not None:
        return _offline_override
    return options.current().offline


# --------------------------------------------------------------------------- the on-disk store
def default_cache_dir() -> Path:
    """``$NOVA_CACHE_DIR``, else ``$XDG_CACHE_HOME/nova``, else ``~/.cache/nova``."""
    configured = options.current().cache_dir
    if configured is not None:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nova"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    summary: str
    path: Path
    size: int
    valid: bool
    has_cubin: bool = False             # the entry carries a cubin (else PTX only, JIT at load)
    pruned: str = ""                    # why ``prune`` removed it: "corrupt", "stale" or "unused"


class KernelCache:
    """``get(key)``, ``put(key, artifact, summary)``, ``entries()``, ``clear()`` on one directory."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.root = Path(path).expanduser() if path is not None else default_cache_dir()
        self._reported: set[tuple] = set()
        self._lock = threading.Lock()

    @property
    def kernels_dir(self) -> Path:
        return self.root / "kernels"

    def path_for(self, key: str) -> Path:
        return self.kernels_dir / key[:2] / f"{key}.json"

    @property
    def misses_dir(self) -> Path:
        return self.root / "misses"

    # ---- read
    def get(self, key: str) -> KernelArtifact | None:
        """The artifact stored under ``key``, or None (missing, or corrupt: warned once and deleted)."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._corrupt(path, f"unreadable ({e})")
            return None
        try:
            entry = json.loads(data.decode("utf-8"))
            problem = _verify(entry, key)
            if problem:
                self._corrupt(path, problem)
                return None
            artifact = KernelArtifact.from_dict(entry)
        except (ValueError, KeyError, TypeError) as e:   # UTF-8, JSON, base64 and missing-field errors
            self._corrupt(path, f"unparsable ({type(e).__name__}: {e})")
            return None
        try:                                             # the entry's last use: prune --max-size drops the
            os.utime(path)                               # least recently used first (a read-only cache: as it is)
        except OSError:
            pass
        return artifact

    def _corrupt(self, path: Path, why: str) -> None:
        discard_bad_entry(path, f"Nova kernel cache entry {path} is corrupt ({why}); ignoring it, it will be rebuilt",
                          CacheCorruptionWarning, self._reported, self._lock, stacklevel=3)

    # ---- write
    def put(self, key: str, artifact: KernelArtifact, summary: str, abi: int | None = None) -> Path:
        """Store atomically: write a temp file next to the target, fsync, ``os.replace``; ``abi`` is
        the family's ABI counter the key was made with (recorded, not checked)."""
        entry = dict(artifact.to_dict(), key=key, summary=summary, format=ENTRY_FORMAT,
                     nova=__version__, toolchain=CODEGEN_TOOLCHAIN, abi=abi)
        entry["sha256"] = _digest(entry)
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, canonical_json(entry).encode("utf-8"), key)
        return path

    # ---- offline misses
    def record_miss(self, key: str, record: dict) -> Path | None:
        """Keep what an offline lookup of ``key`` wanted (``record``: the family's name, the problem,
        schedule and role objects, the target's name and arch, the summary), pickled, for ``nova
        precompile misses`` on a host of the same Nova; None where the record cannot be kept (a
        problem that does not pickle, a cache that is not writable: the miss is raised all the same)."""
        path = self.misses_dir / f"{key}.pickle"
        try:
            data = pickle.dumps(dict(record, key=key))
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, key)
        except Exception:        # a record is a courtesy: never in the way of the miss it records
            return None
        return path

    def miss_paths(self) -> list[Path]:
        """The files of the recorded misses (nothing read), sorted."""
        return sorted(self.misses_dir.glob("*.pickle"))

    def misses(self) -> list[tuple[Path, dict]]:
        """Every recorded miss, ``(path, record)``, sorted by summary.  Records are pickles this cache's
        own offline runs wrote: read them only from a cache directory you trust."""
        out = []
        for path in self.miss_paths():
            try:
                out.append((path, pickle.loads(path.read_bytes())))
            except Exception as e:       # unreadable, or written by a Nova whose classes moved
                out.append((path, {"error": f"{type(e).__name__}: {e}", "key": path.stem}))
        return sorted(out, key=lambda pair: (str(pair[1].get("summary", "")), pair[0].name))

    # ---- listing and maintenance
    def entries(self) -> list[CacheEntry]:
        """Every entry on disk (sorted by summary); corrupt ones are listed with ``valid=False``."""
        return [e for e, _ in self._scan()]

    def _scan(self) -> list[tuple[CacheEntry, dict | None]]:
        """Every entry on disk with its parsed JSON (None where it does not parse), sorted by summary."""
        out = []
        for path in sorted(self.kernels_dir.glob("*/*.json")):
            key = path.stem
            try:
                entry = json.loads(path.read_bytes().decode("utf-8"))
                valid = not _verify(entry, key)
                summary = str(entry.get("summary", "?"))
                has_cubin = bool(entry.get("cubin"))
            except (OSError, ValueError, AttributeError):
                entry, valid, summary, has_cubin = None, False, "?", False
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
            out.append((CacheEntry(key, summary, path, size, valid, has_cubin), entry))
        return sorted(out, key=lambda pair: (pair[0].summary, pair[0].key))

    def prune(self, dry_run: bool = False, max_bytes: int | None = None, current_keys=None) -> list[CacheEntry]:
        """Delete (unless ``dry_run``) the entries today's code would never look up: corrupt ones and
        stale ones (``current_keys(entry)``, the kernel families' ``nova.kernels.family.current_keys``:
        the keys today's code gives the entry's problem and schedule; an entry built by an older Nova,
        toolchain or family ABI is stored under none of them; None: corrupt ones only); then, with ``max_bytes``, the least recently used of the rest
        (file mtime: ``get`` refreshes it, ``put`` sets it) until the entries take at most
        ``max_bytes`` (a tuning run leaves hundreds of candidates behind).  Returns what was (or would
        be) removed, the stale ones first, each with ``pruned`` saying why."""
        gone, kept = [], []
        for e, entry in self._scan():
            stale = not e.valid
            if not stale and current_keys is not None:
                try:
                    stale = e.key not in current_keys(entry)
                except (KeyError, TypeError):
                    stale = True
            if stale:
                gone.append(dataclasses.replace(e, pruned="stale" if e.valid else "corrupt"))
            else:
                kept.append(e)
        if max_bytes is not None:
            total = sum(e.size for e in kept)
            for e in sorted(kept, key=lambda e: (_mtime(e.path), e.key)):
                if total <= max_bytes:
                    break
                gone.append(dataclasses.replace(e, pruned="unused"))
                total -= e.size
        if not dry_run:
            for e in gone:
                try:
                    e.path.unlink()
                except FileNotFoundError:
                    pass
        return gone

    def clear(self) -> int:
        """Delete every entry (and stray temp files); returns how many entries were removed."""
        removed = 0
        if not self.kernels_dir.exists():
            return 0
        for path in self.kernels_dir.glob("*/*"):
            if path.is_file() and (path.suffix == ".json" or path.suffix == ".tmp"):
                try:
                    path.unlink()
                    removed += path.suffix == ".json"
                except FileNotFoundError:
                    pass
        for sub in self.kernels_dir.glob("*"):
            try:
                sub.rmdir()
            except OSError:
                pass
        return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _digest(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _verify(entry, key: str) -> str:
    """Empty string when ``entry`` is intact and belongs to ``key``, else what is wrong."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("sha256") != _digest(entry):
        return "sha256 mismatch"
    if entry.get("key") != key:
        return f"stored under {key[:12]}… but its key is {str(entry.get('key'))[:12]}…"
    return ""


# --------------------------------------------------------------------------- the code generator
def mlir_available() -> bool:
    try:
        return importlib.util.find_spec("mlir.ir") is not None
    except (ImportError, ValueError):
        return False


def precompile_each(items, compile_one, describe, log=print, label: str = "") -> dict:
    """Run ``compile_one(item) -> (key, status)`` for every item, one line each through ``log``;
    returns the counts by status (compiled, cached, failed).  A kernel that fails is reported and
    counted (``NOVA_DEBUG=1`` raises it) and the rest go on; a missing MLIR stops the batch."""
    import time
    from nova import options
    counts = {"compiled": 0, "cached": 0, "failed": 0}
    for i, item in enumerate(items, 1):
        line = f"[{label}{i}/{len(items)}] {describe(item)}"
        t0 = time.perf_counter()
        try:
            key, status = compile_one(item)
        except CompilerUnavailableError:
            raise
        except Exception as e:        # one bad kernel must not stop the batch; reported and counted
            if options.current().debug:
                raise
            counts["failed"] += 1
            log(f"{line}: FAILED: {type(e).__name__}: {e}")
            continue
        counts[status] += 1
        what = "already cached" if status == "cached" else f"compiled in {time.perf_counter() - t0:.2f} s"
        log(f"{line}: {what} (key {key[:12]})")
    return counts
