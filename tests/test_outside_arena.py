"""What a CUDA program allocates outside its arena (``nova/compiler/outside_arena.py``): listed on the
plan, in its peak, reserved by the budget, shown by explain; and checked against every allocation the
executor makes when it builds the program on meta, so a new allocation site cannot go unlisted."""
from __future__ import annotations

import ast
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nova.compiler.outside_arena import RUN_TIME_SITES, AllocationTracker, account, block_bytes
from nova.passes import pipeline
from nova.passes.budget import MemoryBudgetError, allocator_headroom
from nova.passes.memory import OutsideAllocation, outside_peak_bytes, validate_memory_plan

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "nova") + os.sep     # the package's files, wherever the checkout lies (a clone named nova too)
IR = str(ROOT / "nova" / "ir") + os.sep


@pytest.fixture(scope="module", params=["tiny", "llama-tiny"])
def captured(request):
    """A built-in model's AdamW training step captured on meta (batch 4 x 16)."""
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    fn, args, model, opt, _ = training_step(request.param, 4, 16)
    return capture(fn, args, models=[model], optimizers=[opt], name=f"train_{request.param}").graph


def _allocations(run) -> list[tuple[str, int]]:
    """``(site, bytes)`` of every meta storage created while ``run()`` runs, the site being the
    innermost named ``nova`` function on the stack outside the IR's op references
    (``"executor._allocate"``), found by a dispatch mode
    independent of the executor's bookkeeping."""
    import traceback
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = {}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor) and t.device.type == "meta" and t.untyped_storage()._cdata not in seen:
                    frame = next(f for f in reversed(traceback.extract_stack())
                                 if os.path.realpath(f.filename).startswith(PACKAGE)
                                 and not os.path.realpath(f.filename).startswith(IR) and not f.name.startswith("<"))
                    site = f"{Path(frame.filename).stem}.{frame.name}"
                    seen[t.untyped_storage()._cdata] = (site, t.untyped_storage().nbytes(), t)
            return out

    with Record():
        run()
    return [(site, n) for site, n, _ in seen.values()]


# where the meta build allocates, and what each site is on a CUDA device
BUILD_SITES = {
    "executor._allocate": "the arena and the byte areas (listed: constants, static slots, scratch)",
    "aten_kernels.workspace": "static workspaces (listed, by group)",
    "executor._fill_constants": "the temporary a constant is computed in before its copy (listed)",
    "executor.__init__": "the dry run's stand-ins for the user's inputs (meta only, nothing on CUDA)",
    "executor._resolve": "stand-ins for the values a rows kernel keeps inside, never written (meta: nothing on CUDA)",
}
META_ONLY = ("executor.__init__", "executor._resolve")


def test_every_allocation_of_the_meta_program_is_in_the_arena_or_listed(captured):
    """Every allocation the executor makes while it builds the program on meta (its own byte areas,
    and the dry run's launches with their workspaces) comes from a known site, and each one that a
    CUDA program makes is the arena or an item of the plan's outside list (sizes as listed)."""
    from nova.compiler.executor import Program
    planned = pipeline(captured, "h200", outside_arena=account)
    mem = planned.memory
    made = _allocations(lambda: Program(planned, "meta"))
    unknown = {site for site, _ in made} - set(BUILD_SITES)
    assert not unknown, f"allocation sites not accounted outside the arena: {unknown}"
    listed = Counter(i.nbytes for i in mem.outside if i.allocator == "torch")
    for site, nbytes in made:
        if site in META_ONLY or nbytes == 0:
            continue
        if site == "executor._allocate" and nbytes == mem.arena_bytes:
            continue
        assert block_bytes(nbytes) in listed, f"{site} allocates {nbytes} bytes, which the plan does not list"
    workspaces = Counter(block_bytes(n) for site, n in made if site == "aten_kernels.workspace")
    stated = Counter(i.nbytes for i in mem.outside if i.what.startswith("workspace "))
    assert workspaces == stated, "the dry run's launches take each listed workspace once"


def test_the_plan_states_what_lies_outside_the_arena(captured):
    planned = pipeline(captured, "h200", outside_arena=account)
    mem = planned.memory
    kinds = {i.lifetime for i in mem.outside}
    assert {"program", "step"} <= kinds                       # the data slots, the returned loss
    assert any(i.what.startswith("static slots of the data inputs") for i in mem.outside)
    assert any(i.what.startswith("output") and "clone" in i.what for i in mem.outside)
    assert mem.outside_bytes == outside_peak_bytes(mem.outside) > 0
    assert mem.peak_bytes == mem.arena_bytes + mem.external_bytes + mem.outside_bytes
    assert mem.breakdown["outside_arena"] == mem.outside_bytes
    assert sum(mem.breakdown.values()) == mem.peak_bytes
    plain = pipeline(captured, "h200")                        # the passes alone list nothing, place nothing
    assert plain.memory.outside is None and plain.memory.outside_bytes == 0 and plain.memory.workspaces == []
    grown = mem.arena_bytes - plain.memory.arena_bytes        # the launch workspaces no gap held
    assert 0 <= grown <= sum(-(-w.nbytes // 256) * 256 for w in mem.workspaces) and mem.workspaces
    assert plain.memory.peak_bytes == mem.peak_bytes - mem.outside_bytes - grown
    assert not any(i.allocator == "driver" for i in mem.outside)     # GEMM workspaces: in the arena now
    validate_memory_plan(planned.graph, planned.groups, mem)


def test_launch_temporaries_count_the_largest_launch_only():
    items = [OutsideAllocation("a", 1024, "program"), OutsideAllocation("b", 4096, "launch"),
             OutsideAllocation("c", 2048, "launch"), OutsideAllocation("d", 512, "step")]
    assert outside_peak_bytes(items) == 1024 + 4096 + 512


def test_the_tracker_follows_temporaries_until_freed():
    """Alive at once: a 4 KiB and a 2 KiB temporary (the first freed before the third is made)."""
    out = torch.empty(256, device="meta")
    tracker = AllocationTracker()
    with tracker:
        a = torch.empty(1024, device="meta")             # 4 KiB
        b = torch.exp(a[:512])                            # 2 KiB
        del a
        c = torch.empty(768, device="meta")               # 3 KiB, after a was freed
        del b, c
    assert tracker.peak == 4096 + 2048
    tracker = AllocationTracker()
    with tracker:
        torch.add(out, out, out=out)                     # in place into a given tensor: nothing new
    assert tracker.peak == 0


def test_the_budget_reserves_what_lies_outside_the_arena(captured):
    """A large listed allocation is reserved: the plan fitting the budget fits it too, and a refusal names it."""
    base = pipeline(captured, "h200", outside_arena=account)
    big = base.memory.arena_bytes // 10

    def with_big(planned):
        return account(planned) + [OutsideAllocation("a test's workspace", big, "program")]
    reserved = pipeline(captured, "h200", outside_arena=with_big)
    assert reserved.memory.peak_bytes == base.memory.peak_bytes + big
    budget = base.memory.peak_bytes                  # what the plan without the extra bytes needs
    headroom = allocator_headroom(captured)          # kept for the caching allocator (budget.py)
    fitted = pipeline(captured, "h200", memory_budget=budget + headroom, outside_arena=with_big)
    assert fitted.memory.peak_bytes <= budget and fitted.budget.fits
    assert fitted.budget.outside_bytes == fitted.memory.outside_bytes >= big
    assert fitted.memory.arena_bytes < base.memory.arena_bytes       # the arena made the room
    with pytest.raises(MemoryBudgetError) as e:
        pipeline(captured, "h200", memory_budget=base.memory.external_bytes + big, outside_arena=with_big)
    assert "outside the arena" in str(e.value) and "\n" not in str(e.value)


def test_explain_train_lists_what_lies_outside_the_arena(capsys):
    from nova.cli.config import main
    assert main(["explain", "train", "tiny", "--batch", "4", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert mem["outside_arena_bytes"] > 0 and mem["breakdown"]["outside_arena"] == mem["outside_arena_bytes"]
    assert mem["peak_bytes"] == mem["arena_bytes"] + mem["external_bytes"] + mem["outside_arena_bytes"]
    items = mem["outside_arena"]
    assert {i["lifetime"] for i in items} >= {"program", "step"} and all(i["nbytes"] > 0 for i in items)
    assert main(["explain", "train", "tiny", "--batch", "4"]) == 0
    text = capsys.readouterr().out
    largest = max((i for i in items if i["lifetime"] != "launch"), key=lambda i: i["nbytes"])
    assert "outside the arena:" in text and largest["what"] in text


# ------------------------------------------------------------------ allocation sites at launch time
RUN_TIME_MODULES = [*sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "nova/kernels").glob("*/launch.py")),
                    "nova/kernels/optimizer/sum_launch.py", "nova/runtime/tma.py", "nova/runtime/matmul.py",
                    "nova/compiler/rows_lowering.py", "nova/compiler/embedding_lowering.py"]
ALLOCATING = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "clone",
              "contiguous", "new_empty", "new_zeros", "cuMemAlloc"}


def _allocation_sites(path: str) -> set:
    """(path, innermost function) of every allocating call in the module."""
    sites = set()

    class Visit(ast.NodeVisitor):
        def __init__(self):
            self.stack = []

        def visit_FunctionDef(self, node):
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        def visit_Call(self, node):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if self.stack and (name in ALLOCATING or
                               (name == "to" and any(k.arg == "memory_format" for k in node.keywords))):
                sites.add((path, self.stack[-1]))
            self.generic_visit(node)

    Visit().visit(ast.parse((ROOT / path).read_text()))
    return sites


def test_every_run_time_allocation_site_is_accounted():
    """Code that runs at launch time and that the meta run cannot execute (Nova's launchers, the GEMM
    runtime): each function that allocates is listed in ``RUN_TIME_SITES`` with where it is accounted."""
    found = set().union(*(_allocation_sites(p) for p in RUN_TIME_MODULES))
    assert found - set(RUN_TIME_SITES) == set(), "allocation sites not accounted in nova/compiler/outside_arena.py"
    assert set(RUN_TIME_SITES) - found == set(), "RUN_TIME_SITES names sites that no longer allocate"


# ------------------------------------------------------------------ the benchmark's cap
def test_the_benchmark_caps_the_process_at_the_budget():
    from types import SimpleNamespace
    from nova.bench.train import cap_memory, oom_line, parser
    calls = []
    fake = SimpleNamespace(cuda=SimpleNamespace(
        get_device_properties=lambda dev: SimpleNamespace(total_memory=16 * 2**30), current_device=lambda: 0,
        set_per_process_memory_fraction=lambda fraction, dev: calls.append((fraction, dev))))
    cap_memory(fake, SimpleNamespace(type="cuda", index=None), "12GiB")      # torch.device("cuda"): no index
    cap = cap_memory(fake, "cuda:0", "12GiB")
    assert calls == [(0.75, 0), (0.75, 0)] and cap["budget_bytes"] == 12 * 2**30 and cap["fraction"] == 0.75

    class OutOfMemoryError(RuntimeError):
        pass
    try:
        try:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore text")
        except OutOfMemoryError as inner:
            raise ValueError("launch 12 failed") from inner
    except ValueError as e:
        line = oom_line(e, "12GiB")
    assert line is not None and "--memory-budget 12GiB" in line and "\n" not in line
    assert oom_line(ValueError("something else"), "12GiB") is None
    help_text = parser().format_help()
    assert "set_per_process_memory_fraction" in " ".join(help_text.split())


# ------------------------------------------------------------------ on the GPU
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("case_name", ["mlp", "attention"])
def test_measured_peak_is_the_arena_plus_the_listed_outside(case_name):
    """The program's measured peak (torch's counter, build and first step) lies between its arena and
    the arena plus what the plan lists outside it (less anything from cuMemAlloc, which torch does not
    see: nothing, the GEMM workspaces are launch workspaces in the arena), within the allocator's
    rounding of a few blocks; every launch takes its workspace from the arena; the program records
    torch's counters at each phase of its build and first step."""
    from executor_support import attention_block, mlp_training_step
    from nova.compiler.executor import build
    from nova.runtime.cache import is_offline, mlir_available
    if not is_offline() and not mlir_available():
        pytest.skip("no MLIR here: precompile and run with NOVA_OFFLINE=1 NOVA_CACHE_DIR=<carried cache>")
    case = {"mlp": lambda: mlp_training_step(B=4, T=32, C=64, H=128, V=96),
            "attention": lambda: attention_block(B=2, T=40, heads=4, D=16)}[case_name]()
    state = case.inputs(4, "cuda")
    torch.cuda.synchronize()
    planned = pipeline(case.graph, outside_arena=account)
    program = build(planned, "cuda")
    program.run(state)
    torch.cuda.synchronize()
    s = program.stats
    predicted = s["arena_bytes"] + s["outside_arena_bytes"] - s["outside_arena_driver_bytes"]
    assert s["arena_bytes"] <= s["measured_peak_bytes"] <= predicted + (2 << 20), program.describe()
    assert s["outside_arena_driver_bytes"] == 0 and s["launch_workspaces_outside_arena_bytes"] == 0
    assert s["launch_workspaces_in_arena"] == len(planned.memory.workspaces) > 0
    phases = [p["phase"] for p in program.memory_phases]
    assert phases == ["program build: before the arena", "program build: arena, constants, static slots",
                      "first step: inputs bound, launches built (program workspaces)",
                      "first step: executed once (warm-up)", "first step: captured as a CUDA graph"]
    before, built = program.memory_phases[:2]
    assert built["allocated_bytes"] - before["allocated_bytes"] >= s["arena_bytes"]


def test_the_efficient_attention_backward_counts_its_cuda_workspace():
    """ATen's memory-efficient attention backward allocates a workspace inside the call its meta kernel
    does not: gq = ceil(M/I) ceil(D/J) (I J + 4) floats per (b, h) (FP32 at D <= 64: 64x64 blocks; 16-bit
    at D <= 128: 128x128), measured on an H100 at B*H = 128, M = N = 16
    (bench/results/h100-2026-12-06/mem-eff-attention-allocs): FP32 D = 32 2,099,200 bytes, BF16 D = 128 8,390,656.  The chunked-loss GPU test's step (B 128, H 4, T 16, D 8) peaked 9,000 KiB
    above its allocations in each attention backward (bench/results/h100-2026-12-06/run84-h100/
    chunked_loss_memory.txt): its gradients, delta and this workspace."""
    from nova.compiler.outside_arena import efficient_attention_backward_scratch
    meta = lambda *shape, dtype=torch.float32: torch.empty(*shape, device="meta", dtype=dtype)   # noqa: E731
    dout = meta(128, 16, 1, 32).transpose(1, 2)             # [B, H, M, D] over a [B, M, H, D] layout: no copy
    q = meta(128, 1, 16, 32)
    delta = 128 * 16 * 4
    assert efficient_attention_backward_scratch(dout, q, q, q) == delta + block_bytes(2_099_200)
    q16 = meta(128, 1, 16, 128, dtype=torch.bfloat16)
    dout16 = meta(128, 16, 1, 128, dtype=torch.bfloat16).transpose(1, 2)
    assert efficient_attention_backward_scratch(dout16, q16, q16, q16) == delta + block_bytes(8_390_656)
    # a [B, H, M, D]-contiguous dO with H > 1 is copied to [B, M, H, D] first
    q4 = meta(128, 4, 16, 8)
    assert efficient_attention_backward_scratch(q4, q4, q4, q4) - efficient_attention_backward_scratch(
        meta(128, 16, 4, 8).transpose(1, 2), q4, q4, q4) == block_bytes(128 * 4 * 16 * 8 * 4)
    from test_memory_policy import _chunked_gpu_plan
    backward = [a for a in account(_chunked_gpu_plan()[2]) if "attention_backward" in a.what]
    assert backward and all(a.nbytes == 9000 << 10 for a in backward)
