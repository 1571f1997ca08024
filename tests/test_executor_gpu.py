"""GPU tests of the executor: the hand-built graphs of tests/executor_support.py, planned by the
real pipeline (``nova.passes.pipeline``), as CUDA programs (Nova GEMMs, ATen kernels, one CUDA graph
per step) against the reference interpreter run on the CPU in float64, at TF32 tolerance.  The CPU
twin (tests/test_executor.py::test_gpu_cases_plan_and_describe_on_meta) builds these cases as meta
programs and runs the precompile list and the float64 reference without a GPU.

Kernels come from a cache precompiled on a host with MLIR (the printed lines: ``nova precompile gemm``
for the GEMMs, then this script with ``--build`` for every kernel, the fused pointwise and
multi-tensor optimizer kernels included):

    python tests/test_executor_gpu.py --target h200 | NOVA_CACHE_DIR=.nova-cache sh     # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_executor_gpu.py   # GPU
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest
import torch

from executor_support import (attention_block, batched_attention_step, deep_k_gradient, example_case, grouped_attention,
                              linear_inference, memory_ops_step, mlp_training_step, planned, pointwise_zoo, rel_error,
                              widen)
from nova.compiler.executor import build, gemm_problems, precompile_commands
from nova.ir import interpreter
from nova.passes.examples import transformer_step

# Shapes: GEMM dimensions of 16..384, T = 40 (the efficient-attention log-sum-exp is padded to 64),
# grouped-query heads, cross attention with Tq != Tk (the reference fallback), a truly batched matmul
# (grouped: ATen, its batch axes are not one stride apart) and attention spelled with batched matmuls
# (bmm: each one batched Nova GEMM of B*H matrices).
CASES = {
    "mlp": lambda: mlp_training_step(B=4, T=32, C=64, H=128, V=96),
    "attention": lambda: attention_block(B=2, T=40, heads=4, D=16),
    "grouped": lambda: grouped_attention(B=2, Hq=4, Hk=2, Tq=40, Tk=40, D=16),
    "cross": lambda: grouped_attention(B=2, Hq=2, Hk=2, Tq=24, Tk=40, D=16),
    "memory": lambda: memory_ops_step(B=4, T=16, C=32, V=50, Tmax=16),
    "pointwise": lambda: pointwise_zoo(N=16, M=32),
    "linear": lambda: linear_inference(B=4, T=16, C=64, H=128),
    "gpt": lambda: example_case(transformer_step(batch=2, seq=40, dim=64, heads=4, vocab=96), int_high=96),
    "bmm": lambda: batched_attention_step(B=2, H=4, T=40, D=16),
    # head dimension 64: Nova's attention kernels, writing out with its heads merged and dq, dk, dv into
    # their slices of the fused projection's gradient (nova/passes/storage.py)
    "gpt_d64": lambda: example_case(transformer_step(batch=2, seq=64, dim=128, heads=2, vocab=96), int_high=96),
    # K = 8192: split-K through a workspace with an operand prep, both in the arena (poisoned: NaN bytes)
    "deep_k": lambda: deep_k_gradient(K=8192, M=64, N=128),
}
TOL = 5e-3              # relative Frobenius error against float64: TF32 GEMMs and attention, chained
# a case on Nova's TF32 attention kernels (head dimension 64): their own gradient bound
# (tests/test_attention_gpu.py, TOL["tf32"][1]); run 7 measured 5.3e-3 .. 6.4e-3 on gpt_d64's gradients
CASE_TOL = {"gpt_d64": 1e-2}


def _cuda_reason() -> str:
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return ""


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_cuda_reason()), reason=_cuda_reason() or "gpu")]


@pytest.fixture
def kernels():
    """Tests that launch Nova GEMMs need them in the cache (offline) or a code generator (online)."""
    from nova.runtime.cache import is_offline, mlir_available
    if not is_offline() and not mlir_available():
        pytest.skip("no MLIR here: precompile (`python tests/test_executor_gpu.py --target T` prints the "
                    "commands) and run with NOVA_OFFLINE=1 NOVA_CACHE_DIR=<carried cache>")


def reference64(graph, inputs):
    """The interpreter on the float64 version of ``graph`` (``widen``) and CPU float64 copies of
    ``inputs`` (integers kept)."""
    xs = [x.detach().cpu().double() if x.is_floating_point() else x.detach().cpu() for x in inputs]
    return interpreter.run(widen(graph), xs)


def assert_close(graph, got, ref, what, tol=TOL):
    errors = {o.name: rel_error(g, r) for o, g, r in zip(graph.outputs, got, ref)}
    bad = {k: f"{e:.2e}" for k, e in errors.items() if not e <= tol}
    assert not bad, f"{graph.name} {what}: outputs off the float64 reference: {bad}"


def refresh_data(case, state, seed):
    fresh = case.inputs(seed, "cuda")
    for i, spec in enumerate(case.graph.inputs):
        if spec.role == "data":
            state[i] = fresh[i]


@pytest.mark.parametrize("name", list(CASES))
def test_program_replays_match_float64(name, kernels):
    """Three steps on fresh data: the first runs and captures, the next two replay the CUDA graph;
    every output against float64, donated outputs are the input objects, updated in place."""
    case = CASES[name]()
    graph = case.graph
    plan = planned(graph)
    state = case.inputs(1, "cuda")
    pointers = {i: state[i].data_ptr() for i, s in enumerate(graph.inputs) if s.role != "data"}
    program = build(plan, "cuda", poison=True)
    for step in range(3):
        refresh_data(case, state, 100 + step)
        ref = reference64(graph, state)
        got = program.run(state)
        torch.cuda.synchronize()
        assert_close(graph, got, ref, f"step {step}", CASE_TOL.get(name, TOL))
        for k, i in plan.memory.donations:
            assert got[k] is state[i], f"{graph.outputs[k].name}: a donated output must be the input object"
    assert {i: state[i].data_ptr() for i in pointers} == pointers, "bound inputs moved"
    s = program.stats
    assert s["cuda_graph"] and s["captures"] == 1 and s["runs"] == 3 and s["rebinds"] == 0
    assert s["donated_outputs"] == len(plan.memory.donations)
    check_gemm_backends(plan, program)


def check_gemm_backends(plan, program) -> None:
    """Nova GEMMs where the planner chose a Nova kernel, torch.matmul only where it chose ATen (a
    batched right operand, say); no scratch (also run on meta programs by the CPU twin)."""
    s = program.stats
    nova_groups = sum(g.kind == "gemm" and g.kernel == "nova" for g in plan.groups)
    aten_groups = sum(g.kind == "gemm" and g.kernel != "nova" for g in plan.groups)
    assert (s["nova_gemm_launches"] >= nova_groups) and (s["nova_gemm_launches"] > 0) == (nova_groups > 0), s
    assert s["torch_gemms"] == aten_groups and not s["fallbacks"], s["fallbacks"]
    assert s["scratch_bytes"] == 0
    # every launch workspace (GEMM preps and split-K partials, rows partials) in the arena, where the plan put it
    assert s["launch_workspaces_outside_arena_bytes"] == 0 and s["launch_workspaces_in_arena"] == len(plan.memory.workspaces)


def test_replay_reads_new_data_each_step(kernels):
    """The captured graph reads the static slots: new data gives new results (not step 1's)."""
    case = CASES["linear"]()
    program = build(planned(case.graph), "cuda")
    a, b = case.inputs(1, "cuda"), case.inputs(2, "cuda")
    b[1:] = a[1:]                                          # same parameters, other data
    first = program.run(a)[0]
    second = program.run(b)[0]
    third = program.run(a)[0]
    torch.cuda.synchronize()
    assert rel_error(second, first) > 0.1 and rel_error(third, first) < 1e-6
    assert rel_error(second, reference64(case.graph, b)[0]) < TOL
    # gelu after the first linear, bias + relu after the second (its pre-activation written beside it)
    assert program.stats["fused_epilogue_nodes"] == 3 and program.stats["captures"] == 1


def test_donated_parameters_update_in_place(kernels):
    case = CASES["mlp"]()
    program = build(planned(case.graph), "cuda")
    state = case.inputs(3, "cuda")
    params = [i for i, s in enumerate(case.graph.inputs) if s.role in ("param", "opt_state")]
    before = {i: state[i].clone() for i in params}
    ptrs = {i: state[i].data_ptr() for i in params}
    for _ in range(2):
        got = program.run(state)
    torch.cuda.synchronize()
    for k, o in enumerate(case.graph.outputs):
        if o.updates is not None:
            assert got[k] is state[o.updates] and state[o.updates].data_ptr() == ptrs[o.updates]
            assert not torch.equal(state[o.updates], before[o.updates]), f"{o.name} not updated"
    assert float(state[-1]) == float(before[len(state) - 1]) + 2


def offloaded_plan(graph):
    """``graph``'s plan under a budget of 0.95x its peak, its host offloads timed on a timeline where
    every group takes 1 ms (every copy of these small steps hides; activations of any size count)."""
    from nova.compiler.outside_arena import account
    from nova.passes import offload, pipeline
    from nova.passes.budget import allocator_headroom
    base = planned(graph)
    keep, offload.MIN_BYTES = offload.MIN_BYTES, 0
    try:
        return pipeline(graph, base.target, outside_arena=account,
                        memory_budget=int(base.memory.peak_bytes * 0.95) + allocator_headroom(graph),
                        host_offload=lambda p: [1000.0] * len(p.groups))
    finally:
        offload.MIN_BYTES = keep


def test_host_offloads_run_on_copy_streams_inside_the_cuda_graph(kernels):
    """Saved activations copied to page-locked host memory and back on two copy streams, forked from
    and joined into the captured step: three steps (capture, two replays) against float64."""
    case = CASES["gpt"]()
    plan = offloaded_plan(case.graph)
    assert plan.memory.host_bytes > 0
    state = case.inputs(5, "cuda")
    program = build(plan, "cuda", poison=True)
    for step in range(3):
        refresh_data(case, state, 300 + step)
        ref = reference64(case.graph, state)
        got = program.run(state)
        torch.cuda.synchronize()
        assert_close(case.graph, got, ref, f"step {step}")
    s = program.stats
    assert s["cuda_graph"] and s["captures"] == 1 and s["host_bytes"] >= plan.memory.host_bytes


def test_peak_memory_within_the_plan(kernels):
    """Measured at the first step (arena, constants, static slots, workspaces, the kernels'
    temporaries and the CUDA graph's pool): the plan's bytes plus a small slack."""
    case = CASES["mlp"]()
    state = case.inputs(4, "cuda")
    torch.cuda.synchronize()
    program = build(planned(case.graph), "cuda")
    program.run(state)
    s = program.stats
    owned = sum(s[k] for k in ("arena_bytes", "constants_bytes", "static_input_bytes", "scratch_bytes",
                               "workspace_bytes", "launch_workspaces_outside_arena_bytes"))
    params = sum(x.numel() * x.element_size() for x, spec in zip(state, case.graph.inputs) if spec.role == "param")
    slack = 2 * params + (2 << 20)            # foreach temporaries (sqrt of the moments), allocator rounding
    assert s["arena_bytes"] <= s["measured_peak_bytes"] <= owned + slack, program.describe()


def test_attention_writes_its_results_in_the_readers_layout(kernels):
    """Nova's attention kernels write out [B, T, H, D]-strided and dq, dk, dv into the concat's buffer
    ([B, T, 3, H, D]): no copy launches, no concat, no operand copied by the launcher; one eager step
    (no CUDA graph, arena poisoned) against float64, every gradient and update included."""
    case = CASES["gpt_d64"]()
    plan = planned(case.graph)
    program = build(plan, "cuda", cuda_graph=False, poison=True)
    state = case.inputs(8, "cuda")
    ref = reference64(case.graph, state)
    got = program.run(state)
    torch.cuda.synchronize()
    assert_close(case.graph, got, ref, "one step", CASE_TOL["gpt_d64"])
    attention = [k for launch in program.launches for k in launch.kernels if k.attention]
    assert len(attention) == 2 and all(k.copies == 0 for k in attention), [k.what for k in attention]
    (fwd, _), (bwd, _) = program.attention_kernels()
    T, C = 64, 128
    assert dict(fwd.strides)["out"] == (T * C, 64, C)
    fused_qkv = (T * 3 * C, 64, 3 * C)                     # [B, T, 3, H, D] -> [B, H, T, D]
    assert all(dict(bwd.strides)[n] == fused_qkv for n in ("dq", "dk", "dv"))
    launched = [n.op for launch in program.launches for n in launch.nodes]
    assert "concat" not in launched and program.stats["launches"].get("view", 0) == 0


def test_attention_the_plan_keeps_on_aten_runs_on_aten(kernels):
    """``NOVA_ATTENTION=aten`` (``KernelSwitch(attention=False)``): the plan gives the head-dimension-64
    attention to ATen, and the program runs ATen's efficient attention there (no Nova attention
    launch, no fallback noted), one replayed step against float64."""
    from nova.kernels.switch import KernelSwitch
    case = CASES["gpt_d64"]()
    plan = planned(case.graph, kernels=KernelSwitch(attention=False))
    program = build(plan, "cuda", poison=True)
    state = case.inputs(9, "cuda")
    for step in range(2):
        refresh_data(case, state, 200 + step)
        ref = reference64(case.graph, state)
        got = program.run(state)
        torch.cuda.synchronize()
        assert_close(case.graph, got, ref, f"step {step}", CASE_TOL["gpt_d64"])
    assert not [k for launch in program.launches for k in launch.kernels if k.attention]
    whats = [k.what for launch in program.launches for k in launch.kernels]
    assert sum("_scaled_dot_product_efficient_attention" in w for w in whats) == 2, whats
    assert not program.stats["fallbacks"]


def test_eager_mode_matches(kernels):
    case = CASES["attention"]()
    program = build(planned(case.graph), "cuda", cuda_graph=False, poison=True)
    state = case.inputs(5, "cuda")
    got = program.run(state)
    torch.cuda.synchronize()
    assert_close(case.graph, got, reference64(case.graph, state), "eager")
    assert program.stats["captures"] == 0 and not program.stats["cuda_graph"]
    # the log-sum-exp of T = 40 rows is padded to 64 for the efficient kernel's backward
    assert program.stats["workspace_bytes"] >= 2 * 4 * 64 * 4


def test_replaced_parameter_rebinds_and_recaptures(kernels):
    case = CASES["mlp"]()
    program = build(planned(case.graph), "cuda")
    state = case.inputs(6, "cuda")
    program.run(state)
    state[2] = state[2].clone()                 # a parameter with new storage (not updated in place)
    ref = reference64(case.graph, state)
    got = program.run(state)
    torch.cuda.synchronize()
    assert_close(case.graph, got, ref, "after rebinding")
    assert program.stats["rebinds"] == 1 and program.stats["captures"] == 2


def test_offline_missing_kernel_fails_before_touching_parameters(tmp_path, monkeypatch):
    from nova.runtime import cache as cache_mod, matmul as mm
    from nova.runtime.cache import NotPrecompiledError
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "empty"))
    cache_mod.set_offline(True)
    mm.reset()
    try:
        case = mlp_training_step(B=3, T=5, C=24, H=40, V=56)
        state = case.inputs(7, "cuda")
        before = [x.clone() for x in state]
        program = build(planned(case.graph), "cuda")
        for _ in range(2):                      # the program stays unbound: the second run fails the same way
            with pytest.raises(NotPrecompiledError, match=r"^(\d+) kernels of .* are not precompiled for \w+ in .* "
                                                          r"\(the first: .*\); each is recorded in .*misses: on a "
                                                          r"machine with MLIR run `nova precompile misses --cache-dir") as e:
                program.run(state)
            assert "\n" not in str(e.value)
        assert all(torch.equal(a, b) for a, b in zip(state, before)), "a parameter changed before the error"
        # every kernel of the step is recorded for `nova precompile misses`, each once
        assert len(cache_mod.KernelCache(tmp_path / "empty").misses()) == int(str(e.value).split()[0])
    finally:
        cache_mod.set_offline(None)
        mm.reset()


# --------------------------------------------------------------------------- precompile commands
def all_plans() -> list:
    """The plan of every program these tests build: the real pipeline's plan of each case, the
    head-dimension-64 case's plan with attention kept on ATen, and the GPT case's with host offloads."""
    from nova.kernels.switch import KernelSwitch
    return [planned(make().graph) for make in CASES.values()] + \
        [planned(CASES["gpt_d64"]().graph, kernels=KernelSwitch(attention=False)), offloaded_plan(CASES["gpt"]().graph)]


def all_problems() -> list:
    """Every Nova GEMM the programs of these tests launch."""
    problems = {}
    for plan in all_plans():
        for p in gemm_problems(plan):
            problems.setdefault(p, None)
    return list(problems)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="print the commands that build the kernels of these GPU tests "
                                             "(--build: build them all here, into NOVA_CACHE_DIR; needs MLIR)")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true",
                    help="compile every Nova kernel of the cases (GEMMs, rows, fused pointwise, multi-tensor updates)")
    ap.add_argument("--cache-dir", default=None, help="--build: the cache directory (default NOVA_CACHE_DIR)")
    args = ap.parse_args()
    if args.build:
        from nova.compiler.precompile import precompile_planned
        from nova.hwmodel import get_target
        from nova.runtime.cache import KernelCache
        gpu, cache = get_target(args.target), KernelCache(args.cache_dir)
        failed = sum(precompile_planned(plan, gpu, cache)["failed"] for plan in all_plans())
        sys.exit(1 if failed else 0)
    for line in precompile_commands(all_problems(), args.target):
        print(line)
    # the pointwise and multi-tensor kernels have no command line of their own: this script builds them
    print(f"python3 {sys.argv[0]} --target {args.target} --build")
    sys.exit(0)
