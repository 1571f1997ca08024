"""The pointwise family's index-dependent kernels on the GPU against a float64 reference on fresh
random data, outputs poisoned first (NaN, or an integer sentinel): ``iota`` (i64, i32, a float scale),
concats of inputs read over their slices (the loss's shifted i64 labels, halves along the innermost
axis, a middle axis with a constant fill, a transposed input), copies of strided views (i64, f32) and
gathers of a one-axis table (the padding mask's bool table, a strided f16 table with i32 indices); and
the tiny Hugging Face GPT-2 and Llama steps (with and without a padded batch), whose plans run those
kernels and no ATen one, compiled against eager.

Kernels come from a cache built on a host with MLIR (this file's ``__main__`` builds every kernel
these tests launch, the steps' GEMMs and attention included):

    NOVA_CACHE_DIR=.nova-cache python tests/test_pointwise_indexing_gpu.py --target h200                  # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_pointwise_indexing_gpu.py  # GPU
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from pointwise_indexing_support import CASES, hf_batch, hf_tiny, hf_tiny_planned  # noqa: E402

pytestmark = pytest.mark.gpu
STEPS = [("gpt2", False), ("gpt2", True), ("llama", False), ("llama", True)]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kernel_matches_float64(case):
    from nova.kernels.pointwise.launch import bind
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = case.tensors("cuda", gen)
    out = case.output("cuda", tensors)
    bind(case.problem(tensors), case.operands(tensors), [out])()
    torch.cuda.synchronize()
    case.check(out, tensors)


@pytest.mark.parametrize("which, padded", STEPS, ids=[f"{w}-{'padded' if p else 'plain'}" for w, p in STEPS])
def test_compiled_hugging_face_step_matches_eager(which, padded):
    """Three AdamW steps of the executor's program against eager: the position ids, the label shift's
    concat, the padding mask's gather and RoPE's tables on Nova pointwise kernels."""
    import nova
    model, opt, train_step = hf_tiny("cuda", which, padded)
    twin = copy.deepcopy(model)
    opt_ref = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    step = nova.compile(train_step, backend="executor")
    for seed in range(3):
        batch = hf_batch(seed, "cuda", padded)
        loss = step(*batch)
        ref = twin(*batch)
        ref.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        assert abs(loss.item() - ref.item()) < 1e-3 * abs(ref.item())
    program = step._last.engine.program
    problems = program.pointwise_problems()
    if padded:      # the padding mask's gather; the label shift's pad a gather of the next position with it
        assert any(i.table for p in problems for i in p.inputs)
    else:
        assert any(i.window is not None for p in problems for i in p.inputs)        # the label shift's concat
    assert not [f for f in program.stats["fallbacks"] if "pointwise" in f]


# --------------------------------------------------------------------------- precompiling
def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile every kernel these tests launch for ``target`` into the kernel cache (``NOVA_CACHE_DIR``
    or ``cache_dir``): each case's pointwise kernel and every kernel of the tiny Hugging Face steps."""
    from nova.compiler.precompile import precompile_planned, precompile_pointwise
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), KernelCache(cache_dir)
    counts = precompile_pointwise(list(dict.fromkeys(case.problem() for case in CASES)), gpu, cache, log)
    steps = [precompile_planned(hf_tiny_planned(which, padded, target), gpu, cache, log) for which, padded in STEPS]
    return {k: counts.get(k, 0) + sum(step[k] for step in steps) for k in ("compiled", "cached", "failed")}


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)
