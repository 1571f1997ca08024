"""The compiled-step cache: ``pipeline``'s ``Planned`` on disk, keyed by the captured graph's
structural hash, so a second process (or a second ``nova.compile`` of the same step) captures,
hashes, loads the plan and builds the program without running the passes.

Key = sha256 of the canonical JSON of ``structural_hash(captured graph)``, the target name, the
device kind, the memory budget in bytes (None: unbudgeted), the ``NOVA_MEMORY_POLICY`` fraction (None:
``fast``), the ``NOVA_POINTWISE`` and ``NOVA_ATTENTION`` settings, the
Nova version, ``PLAN_ABI`` and a fingerprint of the planning code (the sources of ``nova/ir``,
``nova/passes`` and the kernel families whose problems the plan holds, ``nova/kernels/pointwise``,
``nova/kernels/optimizer`` and ``nova/kernels/attention``, and the hardware model ``nova/hwmodel``:
editing a pass or a target's figure in a checkout never reuses a plan made before).  Layout: ``<cache dir>/plans/<key[:2]>/<key>.plan``
under the kernel cache directory (``NOVA_CACHE_DIR``, ``nova.runtime.cache.default_cache_dir``).
An entry is ``MAGIC``, the sha256 of the payload, a newline, then the pickled payload (a dict with
the key, the captured and optimized graphs' structural hashes and the ``Planned``).  The checksum is
verified before unpickling; after loading, the optimized graph's hash and its inputs/outputs are
checked position by position against the captured graph.  Writes are atomic (temp file in the same
directory + ``os.replace``).  A corrupt, unreadable or stale entry is warned about once
(``PlanCacheWarning``), deleted and rebuilt.  ``NOVA_PLAN_CACHE=0`` turns the cache off.

Like the kernel cache (whose cubins run on the GPU), the directory must be trusted: entries are
pickles.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import threading
from pathlib import Path

from nova.version import __version__
from nova.fileio import atomic_write, discard_bad_entry
from nova.ir.hashing import structural_hash

PLAN_ABI = 13           # bump whenever Planned, Graph, Group, MemoryPlan or the passes' output changes meaning
MAGIC = b"NOVAPLAN1\n"
# the sources that size the allocations a plan lists outside its arena (MemoryPlan.outside) and the
# launch workspaces it places in it (MemoryPlan.workspaces: the schedules of the GEMM, rows and
# embedding kernels and their workspace layouts)
OUTSIDE_ARENA_SOURCES = ("compiler/outside_arena.py", "compiler/executor.py", "compiler/aten_kernels.py",
                         "compiler/rows_lowering.py", "compiler/embedding_lowering.py", "compiler/gemm_lowering.py",
                         "compiler/role_kernels.py", "runtime/tma.py")
WORKSPACE_SIZING_FOLDERS = ("kernels/gemm", "kernels/rows", "kernels/embedding", "configurator", "hwmodel")
SOURCE_SUFFIXES = ("*.py", "*.toml", "*.json")   # code, and the figures and calibrations it reads (gpus.toml)

_reported: set = set()
_lock = threading.Lock()


class PlanCacheWarning(UserWarning):
    """A plan cache entry could not be read or did not match its key; it was deleted and is rebuilt."""


def enabled() -> bool:
    """``NOVA_PLAN_CACHE`` (on unless turned off)."""
    from nova import options
    return options.current().plan_cache


def plans_dir(root: str | os.PathLike | None = None) -> Path:
    if root is None:
        from nova.runtime.cache import default_cache_dir
        root = default_cache_dir()
    return Path(root).expanduser() / "plans"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over the sources that decide a plan: ``nova/ir``, ``nova/passes``, the pointwise,
    optimizer and attention kernel families (their problems are on the plan's groups) and the
    switch that gives groups to them (``kernels/switch.py``), this module, the
    executor's allocation sites the plan lists outside its arena (``OUTSIDE_ARENA_SOURCES``) and what
    sizes the launch workspaces it places (``WORKSPACE_SIZING_FOLDERS``: the kernels' schedules and the
    hardware model), each folder's data files with its code (``SOURCE_SUFFIXES``: a target's figures and
    calibrations decide plans too: the offload's link and its toll, the step clock the memory policy
    prices plans at)."""
    base = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    folders = ("ir", "passes", "kernels/pointwise", "kernels/optimizer", "kernels/attention") + WORKSPACE_SIZING_FOLDERS
    files = [base / f for f in OUTSIDE_ARENA_SOURCES + ("kernels/switch.py",)]
    for path in sorted([*(p for f in folders for suffix in SOURCE_SUFFIXES for p in base.joinpath(f).rglob(suffix)),
                        *files, Path(__file__).resolve()]):
        h.update(str(path.relative_to(base)).encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            pass
    return h.hexdigest()


def plan_key(graph_hash: str, target_name: str | None, device_kind: str, kernels: str = "all", *,
             memory_budget: int | None = None, memory_policy: float | None = None,
             host_offload: bool = True) -> str:
    """``kernels``: the ``NOVA_POINTWISE`` and ``NOVA_ATTENTION`` settings the plan was made under
    (``KernelSwitch.key``);
    ``memory_policy``: the ``NOVA_MEMORY_POLICY`` fraction (None: ``fast``); ``host_offload``:
    ``NOVA_HOST_OFFLOAD``."""
    import json
    payload = {"graph": graph_hash, "target": str(target_name), "device": device_kind, "budget": memory_budget,
               "nova": __version__, "abi": PLAN_ABI, "code": code_fingerprint(), "kernels": kernels,
               "memory_policy": memory_policy, "host_offload": host_offload}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def path_for(key: str, root=None) -> Path:
    return plans_dir(root) / key[:2] / f"{key}.plan"


def _matches(captured, planned) -> str:
    """Why the loaded plan's graph does not line up with the captured graph by position ('' if it does)."""
    g = planned.graph
    if len(g.inputs) != len(captured.inputs) or len(g.outputs) != len(captured.outputs):
        return "its inputs/outputs differ in number from the captured graph's"
    for i, (a, b) in enumerate(zip(g.inputs, captured.inputs)):
        if str(a.value.type) != str(b.value.type) or a.role != b.role:
            return f"input {i} differs ({a.value.type} {a.role} vs {b.value.type} {b.role})"
    for i, (a, b) in enumerate(zip(g.outputs, captured.outputs)):
        if (str(a.value.type) != str(b.value.type) or a.role != b.role or a.updates != b.updates):
            return f"output {i} differs"
    return ""


def _warn(path: Path, why: str) -> None:
    discard_bad_entry(path, f"Nova plan cache entry {path} is unusable ({why}); ignoring it, the plan is rebuilt",
                      PlanCacheWarning, _reported, _lock, stacklevel=4)


def load(graph, target_name, device_kind: str, root=None, graph_hash: str | None = None, kernels: str = "all", *,
         memory_budget: int | None = None, memory_policy: float | None = None, host_offload: bool = True):
    """The cached ``Planned`` of ``graph`` (the captured graph) or None (miss, or an unusable entry:
    warned once and deleted)."""
    graph_hash = graph_hash or structural_hash(graph)
    key = plan_key(graph_hash, target_name, device_kind, kernels, memory_budget=memory_budget,
                   memory_policy=memory_policy, host_offload=host_offload)
    path = path_for(key, root)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn(path, f"unreadable: {e}")
        return None
    head = len(MAGIC) + 65
    if not data.startswith(MAGIC) or len(data) < head or data[head - 1:head] != b"\n":
        _warn(path, "not a Nova plan file")
        return None
    digest, body = data[len(MAGIC):head - 1].decode("ascii", "replace"), data[head:]
    if hashlib.sha256(body).hexdigest() != digest:
        _warn(path, "checksum mismatch")
        return None
    try:
        entry = pickle.loads(body)
        planned = entry["planned"]
        ok = (entry.get("key") == key and entry.get("graph_hash") == graph_hash
              and structural_hash(planned.graph) == entry.get("plan_hash"))
    except Exception as e:       # a stale class path, a truncated pickle, a missing field
        _warn(path, f"unloadable ({type(e).__name__}: {e})")
        return None
    if not ok:
        _warn(path, "its hashes do not match the key")
        return None
    why = _matches(graph, planned)
    if why:
        _warn(path, why)
        return None
    return planned


def store(graph, planned, target_name, device_kind: str, root=None, graph_hash: str | None = None,
          kernels: str = "all", *, memory_budget: int | None = None, memory_policy: float | None = None,
          host_offload: bool = True) -> Path | None:
    """Write ``planned`` under ``graph``'s key atomically; None when it could not be written (the
    cache is an optimisation: a failure to store is silent)."""
    graph_hash = graph_hash or structural_hash(graph)
    key = plan_key(graph_hash, target_name, device_kind, kernels, memory_budget=memory_budget,
                   memory_policy=memory_policy, host_offload=host_offload)
    path = path_for(key, root)
    try:
        body = pickle.dumps({"key": key, "graph_hash": graph_hash, "plan_hash": structural_hash(planned.graph),
                             "nova": __version__, "abi": PLAN_ABI, "planned": planned},
                            protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, RecursionError, TypeError, AttributeError):
        return None
    data = MAGIC + hashlib.sha256(body).hexdigest().encode("ascii") + b"\n" + body
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, key)
        return path
    except OSError:
        return None


def plan(graph, target=None, device_kind: str = "cpu", root=None, target_name=None, *, memory_budget=None):
    """``(planned, status)``: the cached plan of ``graph`` (status ``"hit"``), else ``pipeline(graph,
    target, memory_budget=, outside_arena=)`` (the CUDA program's allocations outside the arena
    listed on the plan, ``nova.compiler.outside_arena``) stored for next time (``"miss"``), or ``"off"`` when
    ``NOVA_PLAN_CACHE=0``.  A budget the step cannot fit raises ``MemoryBudgetError`` (nothing stored).
    The ``NOVA_POINTWISE``, ``NOVA_ATTENTION``, ``NOVA_MEMORY_POLICY`` and ``NOVA_HOST_OFFLOAD`` settings are read once
    here, passed to the passes and keyed."""
    from nova import options
    from nova.compiler.explain import host_offload, memory_policy
    from nova.compiler.outside_arena import account
    from nova.kernels.switch import kernel_switch
    from nova.passes import pipeline
    from nova.passes.budget import parse_size
    if target_name is None:
        target_name = getattr(target, "name", target)
    if memory_budget is not None:
        memory_budget = parse_size(memory_budget)
    kernels = kernel_switch()
    opts = options.current()
    fraction, offload = opts.memory_policy, opts.host_offload
    policy = memory_policy(fraction, target)
    timed = host_offload(offload, target)
    if not enabled():
        return pipeline(graph, target, kernels, memory_budget=memory_budget, outside_arena=account,
                        memory_policy=policy, host_offload=timed), "off"
    graph_hash = structural_hash(graph)
    keyed = {"memory_budget": memory_budget, "memory_policy": fraction, "host_offload": offload}
    planned = load(graph, target_name, device_kind, root, graph_hash, kernels.key(), **keyed)
    if planned is not None:
        return planned, "hit"
    planned = pipeline(graph, target, kernels, memory_budget=memory_budget, outside_arena=account, memory_policy=policy,
                       host_offload=timed)
    store(graph, planned, target_name, device_kind, root, graph_hash, kernels.key(), **keyed)
    return planned, "miss"
