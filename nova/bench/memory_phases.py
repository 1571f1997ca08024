"""The training benchmark's memory diagnostic (CUDA, on by default, a few counter reads per phase):
torch's allocator counters at each phase of a run, beside the compiled program's own phases and the
plan's predicted components, so one device run splits what the program allocates ("inside") from
what happens around it (optimizer state the first step creates, the benchmark's data, the caching
allocator's reserve).

    diagnostic = MemoryDiagnostic()
    diagnostic.start(torch, device)                       # after the memory cap, before the model
    diagnostic.mark("setup: model, optimizer and data on the device")
    diagnostic.compiled = nova_compile(step)              # its program's phases join in (nova only)
    ...
    record["memory_diagnostic"] = diagnostic.report()     # also after an out-of-memory error

Each phase: ``allocated_bytes``/``reserved_bytes`` (``torch.cuda.memory_allocated``/``_reserved``
now), ``max_allocated_bytes``/``max_reserved_bytes`` (the peaks since the last reset: the program
resets them when it builds, so a phase's peak covers the phases since then), ``device_used_bytes``
(``cudaMemGetInfo``'s total - free: also the CUDA context, kernels' code and memory torch does not
allocate), ``t_s`` (seconds since ``start``).  The program's phases (``Program.memory_phases``: its
build, binding, warm-up and CUDA graph capture) are merged in time order, marked ``program``.

``predicted`` (nova): the plan's components (``program_predicted``): the user's tensors by role,
the arena (with its launch workspaces), what lies outside it by allocator and lifetime, and their sum
as torch counts it (``torch_peak_bytes``: the plan's peak less its ``cuMemAlloc`` part).
``measured``: torch's peak over the phases, the benchmark's own data, and ``unexplained_bytes`` =
peak - predicted torch peak - the benchmark's data (> 0: torch allocated more than the plan states);
``reserved_over_allocated_bytes``: what the caching allocator holds beyond its peak (a cap on
reserved memory, ``cap_memory``, needs that room too).
"""
from __future__ import annotations

import time


class MemoryDiagnostic:
    """The phases of one benchmark process (module docstring); inactive (records nothing) off CUDA."""

    def __init__(self):
        self.torch = None
        self.device = None
        self.phases: list[dict] = []
        self.compiled = None              # the nova.compile step, whose program's phases join the report
        self.data_device_bytes = 0        # the benchmark's own token tensors on the device
        self._t0 = 0.0

    @property
    def active(self) -> bool:
        return self.device is not None

    def start(self, torch, device) -> None:
        self.torch, self.device, self._t0 = torch, device, time.perf_counter()
        self.mark("start: CUDA initialised, nothing of the run allocated")

    def mark(self, phase: str) -> None:
        if not self.active:
            return
        self.phases.append(snapshot(self.torch, self.device, phase))

    def report(self) -> dict | None:
        """The result JSON's ``memory_diagnostic`` (None when inactive)."""
        if not self.active:
            return None
        program = program_of(self.compiled)
        phases = [dict(p, source="benchmark") for p in self.phases]
        if program is not None:
            phases += [dict(p, source="program") for p in getattr(program, "memory_phases", [])]
        phases.sort(key=lambda p: p["t"])
        previous = 0
        for p in phases:
            p["t_s"] = round(p.pop("t") - self._t0, 3)
            p["allocated_delta_bytes"] = p["allocated_bytes"] - previous
            previous = p["allocated_bytes"]
        out: dict = {"phases": phases}
        peak_allocated = max(p["max_allocated_bytes"] for p in phases)
        peak_reserved = max(p["max_reserved_bytes"] for p in phases)
        measured = {"peak_allocated_bytes": peak_allocated, "peak_reserved_bytes": peak_reserved,
                    "reserved_over_allocated_bytes": peak_reserved - peak_allocated,
                    "benchmark_data_bytes": self.data_device_bytes}
        if program is not None:
            predicted = program_predicted(program)
            out["predicted"] = predicted
            measured["program_measured_peak_bytes"] = program.stats.get("measured_peak_bytes")
            measured["unexplained_bytes"] = peak_allocated - predicted["torch_peak_bytes"] - self.data_device_bytes
        out["measured"] = measured
        return out


def snapshot(torch, device, phase: str) -> dict:
    """torch's allocator counters and the device's used memory now."""
    free, total = torch.cuda.mem_get_info(device)
    return {"phase": phase, "t": time.perf_counter(),
            "allocated_bytes": torch.cuda.memory_allocated(device),
            "reserved_bytes": torch.cuda.memory_reserved(device),
            "max_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "device_used_bytes": total - free}


def program_of(compiled):
    """The executor's program of a ``nova.compile`` step's last entry (None before one is built)."""
    last = getattr(compiled, "_last", None)
    return getattr(getattr(last, "engine", None), "program", None)


def program_predicted(program) -> dict:
    """The plan's predicted components of ``program``'s step (``MemoryPlan`` as the executor reads it):
    the user's tensors (graph inputs) by role, the arena and its launch workspaces, the allocations
    outside it by allocator and lifetime (what each adds at the peak), and the totals."""
    plan = program.plan
    by_role: dict[str, int] = {}
    for spec in program.graph.inputs:
        by_role[spec.role] = by_role.get(spec.role, 0) + spec.value.type.nbytes
    outside = list(plan.outside or [])
    torch_items = [i for i in outside if i.allocator == "torch"]
    launch = [i.nbytes for i in torch_items if i.lifetime == "launch"]
    torch_outside = {lifetime: sum(i.nbytes for i in torch_items if i.lifetime == lifetime)
                     for lifetime in ("program", "step")}
    torch_outside["launch_largest"] = max(launch, default=0)
    driver_bytes = sum(i.nbytes for i in outside if i.allocator == "driver")
    return {"user_tensors_bytes": dict(sorted(by_role.items())),
            "arena_bytes": plan.arena_bytes,
            "launch_workspaces": {"count": len(plan.workspaces),
                                  "bytes_if_apart": sum(n for _, n in plan.workspaces.values())},
            "outside_arena_torch_bytes": torch_outside,
            "outside_arena_driver_bytes": driver_bytes,
            "peak_bytes": plan.peak_bytes,
            "torch_peak_bytes": plan.peak_bytes - driver_bytes,
            "source": "the plan (nova.passes.memory.MemoryPlan): arena + user tensors + outside the arena"}
