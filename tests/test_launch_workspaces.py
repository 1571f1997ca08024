"""Launch workspaces in the arena: the scratch a group's kernels use only while its launch runs (a Nova
GEMM's operand preps and split-K partials, a rows kernel's partial sums, the embedding backward's sort
buffers) placed by the plan over bytes dead during that launch (``nova.passes.memory.place_workspaces``),
validated, counted in the peak and the breakdown, found on the meta program by the compiler
(``outside_arena.account``) and handed to the launches by the executor (``KernelContext.launch_workspace``)."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from nova.compiler.outside_arena import account
from nova.passes import pipeline, validate_memory_plan
from nova.passes.examples import transformer_step
from nova.passes.memory import LaunchWorkspace, aligned, place_workspaces
from nova.passes.peak import busiest_position, live_profile


@pytest.fixture(scope="module")
def step():
    return pipeline(transformer_step(layers=2))


@pytest.fixture(scope="module", params=["tiny", "llama-tiny"])
def model_plan(request):
    """A built-in model's AdamW step (batch 4 x 16) planned for h200 with the compiler's account."""
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    fn, args, model, opt, _ = training_step(request.param, 4, 16)
    graph = capture(fn, args, models=[model], optimizers=[opt], name=f"train_{request.param}").graph
    return pipeline(graph, "h200", outside_arena=account)


def _fresh(planned):
    """A copy of the plan's memory that placement may change."""
    mem = copy.copy(planned.memory)
    mem.values, mem.breakdown, mem.workspaces = dict(mem.values), dict(mem.breakdown), []
    return mem


def _live_bytes(mem, first, last) -> int:
    """The most arena bytes (aligned buffers) live at one position of [first, last]."""
    return max(sum(aligned(p.nbytes) for p in mem.values.values()
                   if p.kind == "arena" and p.nbytes and p.live[0] <= t <= p.live[1]) for t in range(first, last + 1))


# ------------------------------------------------------------------ the placement
def test_placing_no_workspace_leaves_the_plan_as_planned(step):
    """The breakdown rebuilt from the plan's values (an in-place chain one buffer) is plan_memory's own."""
    mem = _fresh(step)
    place_workspaces(mem, step.groups, [])
    assert (mem.arena_bytes, mem.peak_bytes, mem.live_peak_bytes, mem.breakdown) == \
        (step.memory.arena_bytes, step.memory.peak_bytes, step.memory.live_peak_bytes, step.memory.breakdown)


def test_a_workspace_takes_bytes_dead_during_its_launch(step):
    """Where the arena is not full during a group's launch, its workspace lies in a gap: the arena does
    not grow, and its bytes hold other values before or after the launch."""
    mem = _fresh(step)
    pos = {n: i for i, n in enumerate(mem.order)}
    spans = [(i, pos[g.nodes[0]], pos[g.nodes[-1]]) for i, g in enumerate(step.groups) if g.nodes]
    index, first, last = min(spans, key=lambda s: _live_bytes(mem, s[1], s[2]))
    room = mem.arena_bytes - _live_bytes(mem, first, last)
    assert room >= 4096
    place_workspaces(mem, step.groups, [LaunchWorkspace(index, 4096, "a test's workspace")])
    [w] = mem.workspaces
    assert mem.arena_bytes == step.memory.arena_bytes and w.live == (first, last)
    assert mem.peak_bytes == mem.arena_bytes + mem.external_bytes + mem.outside_bytes
    assert any(p.kind == "arena" and p.offset < w.offset + w.nbytes and w.offset < p.offset + p.nbytes
               for p in mem.values.values())            # shared with values dead during the launch
    validate_memory_plan(step.graph, step.groups, mem)


def test_a_workspace_larger_than_any_gap_grows_the_arena_and_the_peak(step):
    """A workspace no gap holds goes above what is live during its launch; peak, largest live set and
    breakdown count it (category ``workspace``), and the busiest position moves into its launch."""
    mem = _fresh(step)
    index = len(step.groups) // 2
    big = 2 * step.memory.arena_bytes
    place_workspaces(mem, step.groups, [LaunchWorkspace(index, big, "a test's workspace")])
    [w] = mem.workspaces
    assert mem.arena_bytes == w.offset + aligned(big) > step.memory.arena_bytes
    assert mem.peak_bytes == step.memory.peak_bytes + mem.arena_bytes - step.memory.arena_bytes
    assert sum(mem.breakdown.values()) == mem.peak_bytes and mem.breakdown["workspace"] >= big
    assert mem.live_peak_bytes >= big + mem.external_bytes
    assert w.live[0] <= busiest_position(mem) <= w.live[1]
    assert max(live_profile(mem)) >= big
    validate_memory_plan(step.graph, step.groups, mem)


def test_workspaces_live_at_the_same_time_never_share_bytes(step):
    mem = _fresh(step)
    index = len(step.groups) // 3
    place_workspaces(mem, step.groups, [LaunchWorkspace(index, 8192, "one"), LaunchWorkspace(index + 1, 8192, "two")])
    a, b = mem.workspaces
    if a.live[1] >= b.live[0]:
        assert a.offset + 8192 <= b.offset or b.offset + 8192 <= a.offset
    validate_memory_plan(step.graph, step.groups, mem)
    with pytest.raises(ValueError, match="placed already"):
        place_workspaces(mem, step.groups, [])


def test_the_validator_catches_a_workspace_over_a_live_buffer(step):
    mem = _fresh(step)
    index = len(step.groups) // 2
    place_workspaces(mem, step.groups, [LaunchWorkspace(index, 256, "a test's workspace")])
    [w] = mem.workspaces
    live = next(p for p in mem.values.values() if p.kind == "arena" and p.nbytes and p.live[0] <= w.live[0] <= p.live[1])
    mem.workspaces = [dataclasses.replace(w, offset=live.offset)]
    with pytest.raises(AssertionError, match="overlap"):
        validate_memory_plan(step.graph, step.groups, mem)


# ------------------------------------------------------------------ the compiler's account and the executor
def test_every_launch_workspace_of_the_program_is_placed_in_the_arena(model_plan):
    """The meta program's launches ask for their workspaces (the GEMMs' from their schedules, the rows
    and embedding kernels' from theirs) and find each one placed; nothing is left to cuMemAlloc."""
    from nova.compiler.executor import Program
    from nova.compiler.gemm_lowering import workspace_bytes
    from nova.hwmodel import get_target
    from nova.kernels.rows.abi import workspace_layout
    from nova.kernels.rows.launch import schedule_for
    mem = model_plan.memory
    program = Program(model_plan, "meta")
    needs = program.launch_workspaces()
    assert needs and {w.group: w.nbytes for w in mem.workspaces} == {g: n for g, (n, _) in needs.items()}
    s = program.stats
    assert s["launch_workspaces_in_arena"] == len(needs) and s["launch_workspaces_outside_arena_bytes"] == 0
    assert not any(i.allocator == "driver" for i in mem.outside)
    h200 = get_target("h200")
    for launch in program.launches:
        if launch.group not in needs:
            continue
        asked = [workspace_bytes(p, h200) for gl in launch.gemms for p in gl.problems()] + \
            [workspace_layout(k.rows, schedule_for(k.rows, h200))[1] for k in launch.kernels if k.rows is not None]
        if asked:
            assert needs[launch.group][0] == max(asked)
    kinds = {what.split(" of ")[0] for _, what in needs.values()}
    assert {"GEMM workspace", "rows workspace", "embedding workspace"} <= kinds
    validate_memory_plan(model_plan.graph, model_plan.groups, mem)


def test_gemm_launches_get_their_arena_workspace(model_plan):
    """Each Nova GEMM call is given its group's workspace: a view of the arena at the planned offset, and
    ``eager=False`` (the device pick, whose workspace the plan sized)."""
    from nova.compiler.executor import Program
    calls = []

    def gemm(a, b, *, out, bias=None, activation="none", target=None, deterministic=None, workspace=None,
             residual=None, preactivation=None, round_through=False, activation_grad=False, eager=True):  # nova.matmul's
        assert eager is False
        calls.append(workspace)
    program = Program(model_plan, "meta", gemm=gemm)
    arena = program._dry_ctx.arena
    placed = {w.group: w for w in model_plan.memory.workspaces}
    checked = 0
    for launch in program.launches:
        for gl in launch.gemms:
            if gl.backend != "nova":
                continue
            calls.clear()
            for kernel in launch.kernels:
                if kernel.what == gl.describe():
                    kernel.run()
            w = placed.get(launch.group)
            assert calls and all((ws is None) == (w is None) for ws in calls)
            for ws in calls:
                if ws is not None:
                    assert ws.untyped_storage()._cdata == arena.untyped_storage()._cdata
                    assert ws.storage_offset() == w.offset and ws.numel() == w.nbytes
                    checked += 1
    assert checked


def test_the_executor_refuses_a_workspace_over_a_live_value(model_plan):
    from nova.compiler.executor import ExecutorError, Program
    broken = copy.copy(model_plan)
    broken.memory = mem = copy.copy(model_plan.memory)
    w = max(mem.workspaces, key=lambda w: w.nbytes)
    live = next(p for p in mem.values.values() if p.kind == "arena" and p.nbytes >= 256
                and p.live[0] < w.live[0] <= p.live[1])
    mem.workspaces = [dataclasses.replace(u, offset=live.offset) if u is w else u for u in mem.workspaces]
    with pytest.raises(ExecutorError, match=f"the launch workspace of group {w.group}"):
        Program(broken, "meta")


def test_a_launch_workspace_is_the_placed_bytes_else_the_shared_buffer_else_its_own():
    from nova.compiler.aten_kernels import KernelContext
    arena, shared = torch.empty(4096, dtype=torch.uint8), torch.empty(1024, dtype=torch.uint8)
    ctx = KernelContext("cuda", torch.device("cpu"), arena=arena, placed={3: (512, 2048)}, shared=shared)
    ctx.group = 3
    ws = ctx.launch_workspace(1500, "GEMM workspace of one")
    assert ws.data_ptr() == arena.data_ptr() + 512 and ws.numel() == 1500
    assert ctx.launch_workspace(0, "none") is None
    ctx.group = 4                                       # not placed: the shared buffer's start
    assert ctx.launch_workspace(1000, "rows workspace").data_ptr() == shared.data_ptr()
    own = ctx.launch_workspace(2000, "rows workspace of a larger kind")     # larger than the shared buffer
    assert own.data_ptr() not in (shared.data_ptr(), arena.data_ptr()) and ctx.private == [(4, own)]
    assert ctx.needs == {3: (1500, "GEMM workspace of one"), 4: (2000, "rows workspace of a larger kind")}
    ctx.group = 3
    assert ctx.launch_workspace(4000, "larger than placed").data_ptr() != arena.data_ptr() + 512


def test_a_plan_made_without_the_account_states_its_launches_as_unplaced(model_plan):
    """The passes alone place no workspace: the program's dry run finds what its launches need (at bind
    on CUDA they share one buffer of the largest, noted in the stats' fallbacks)."""
    from nova.compiler.executor import Program
    plain = pipeline(model_plan.graph, "h200")        # the optimized graph re-planned, no account
    program = Program(plain, "meta")
    assert plain.memory.workspaces == [] and program._unplaced
    assert program.stats["launch_workspaces_in_arena"] == 0
    assert set(program._unplaced) == set(program.launch_workspaces())
