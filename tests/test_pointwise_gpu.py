"""Fused pointwise kernels on the GPU against a float64 reference on fresh random data, outputs
NaN-poisoned first: odd sizes, broadcast and strided (non-contiguous) inputs, f32/bf16/f16; outputs
written at strides (slices of a concat's buffer, permuted heads, a transpose); and compiled GPT-tiny
and Llama-tiny steps whose pointwise groups run on them, against eager.

Kernels come from a cache built on a host with MLIR (this file's ``__main__`` builds every kernel
these tests launch, the GPT-tiny step's GEMMs included):

    NOVA_CACHE_DIR=.nova-cache python tests/test_pointwise_gpu.py --target h200                  # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_pointwise_gpu.py  # GPU
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from nova.ir.ops import opdef  # noqa: E402
from pointwise_support import (CASES, GPT_BATCH, GPT_SEQ, STRIDED_CASES, TOL, TORCH, gpt_tiny,  # noqa: E402
                               gpt_tiny_planned, llama_tiny, llama_tiny_planned)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kernel_matches_float64(case):
    from nova.kernels.pointwise.launch import bind
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = case.tensors("cuda", gen)
    g, xs, out = case.graph()
    problem = case.problem(tensors)
    result = torch.full(out.shape, float("nan"), device="cuda", dtype=TORCH[out.dtype])
    bind(problem, tensors, [result])()
    torch.cuda.synchronize()
    env = {v: t.double().cpu() for v, t in zip(xs, tensors)}
    for n in g.nodes:
        env[n.outputs[0]] = opdef(n.op).reference(torch, *[env[v] for v in n.inputs], **n.attrs)
    ref = env[out].double()
    got = result.double().cpu()
    assert not got.isnan().any()
    err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err < TOL[case.dtype], err


@pytest.mark.parametrize("case", STRIDED_CASES, ids=[case.name for case in STRIDED_CASES])
def test_strided_outputs_match_float64(case):
    """Each output lands exactly on its view of a NaN-filled buffer: the values there match float64, and
    the buffer's other elements are still NaN (nothing written outside the views)."""
    from nova.kernels.pointwise.launch import bind
    from nova.passes.pointwise_from_ir import kernel_operands
    gen = torch.Generator(device="cuda").manual_seed(1)
    tensors = case.tensors("cuda", gen)
    g, xs, outs = case.graph()
    buf, views = case.outputs("cuda")
    by_value = dict(zip(xs, tensors))             # bound in the kernel's argument order, as the executor binds
    bind(case.problem(), [by_value[v] for v in kernel_operands(g.nodes, xs)], list(views))()
    torch.cuda.synchronize()
    env = {v: t.double().cpu() for v, t in zip(xs, tensors)}
    for n in g.nodes:
        env[n.outputs[0]] = opdef(n.op).reference(torch, *[env[v] for v in n.inputs], **n.attrs)
    covered = torch.zeros(buf.shape, dtype=torch.bool)
    for o, view in zip(outs, case.views(covered)):
        view.fill_(True)
    assert buf.cpu()[~covered].isnan().all()
    for o, view in zip(outs, views):
        ref, got = env[o].double(), view.double().cpu()
        assert not got.isnan().any()
        err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err < TOL[case.dtype], err


def test_compiled_llama_tiny_step_matches_eager():
    """RoPE's rotate-half folded into the kernel that reads its concat (its halves read through windows)
    and the dq/dk head merges stored in place by the pointwise kernels: three AdamW steps against eager."""
    import nova
    model, opt, train_step = llama_tiny("cuda")
    twin = copy.deepcopy(model)
    opt_ref = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    step = nova.compile(train_step, backend="executor")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        idx = torch.randint(0, model.config.vocab_size, (GPT_BATCH, GPT_SEQ), generator=gen, device="cuda")
        loss = step(idx, idx)
        ref = twin(idx, idx)
        ref.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        assert abs(loss.item() - ref.item()) < 1e-3 * abs(ref.item())
    program = step._last.engine.program
    kernels = [k.pointwise for launch in program.launches for k in launch.kernels if k.pointwise is not None]
    assert any(x.window is not None for p in kernels for x in p.inputs)     # the rotate-half's concat folded: read
    assert any(p.stores for p in kernels)                                  # through windows; head merges stored
    assert not [f for f in program.stats["fallbacks"] if "pointwise" in f]


# --------------------------------------------------------------------------- a whole step
def test_compiled_gpt_tiny_step_matches_eager():
    import nova
    model, opt, train_step = gpt_tiny("cuda")
    twin = copy.deepcopy(model)
    opt_ref = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    step = nova.compile(train_step, backend="executor")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        idx = torch.randint(0, model.config.vocab_size, (GPT_BATCH, GPT_SEQ), generator=gen, device="cuda")
        loss = step(idx, idx)
        ref = twin(idx, idx)
        ref.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        assert abs(loss.item() - ref.item()) < 1e-3 * abs(ref.item())
    program = step._last.engine.program
    assert any("nova pointwise kernel" in k.what for launch in program.launches for k in launch.kernels)
    assert not [f for f in program.stats["fallbacks"] if "pointwise" in f]


# --------------------------------------------------------------------------- precompiling
def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile every kernel these tests launch for ``target`` into the kernel cache (``NOVA_CACHE_DIR``
    or ``cache_dir``): each case's pointwise kernel and every kernel of the GPT-tiny and Llama-tiny steps."""
    from nova.compiler.precompile import precompile_planned, precompile_pointwise
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), KernelCache(cache_dir)
    problems = [case.problem() for case in CASES] + [case.problem() for case in STRIDED_CASES]
    counts = precompile_pointwise(list(dict.fromkeys(problems)), gpu, cache, log)
    steps = [precompile_planned(planned, gpu, cache, log) for planned in (gpt_tiny_planned(), llama_tiny_planned())]
    return {k: counts.get(k, 0) + sum(step[k] for step in steps) for k in ("compiled", "cached", "failed")}


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)
