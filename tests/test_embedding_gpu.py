"""The embedding kernels on the GPU (skipped without one): the gather and the deterministic scatter-add
against a float64 reference on fresh random data, outputs NaN-poisoned before the launch; repeated
indices (one index repeated over most of the batch), odd row lengths, strided index views and strided
rows, f32 / bf16 / f16 rows, int32 / int64 indices; two backward runs bit-identical; and a compiled
GPT-tiny step (loss and every gradient) against eager PyTorch.  Kernels compile online (MLIR on the
device machine) or come from the cache (``NOVA_OFFLINE=1``).

On a host with MLIR and no GPU, ``python3 tests/test_embedding_gpu.py --target h200 --build`` puts every
kernel these tests launch into ``$NOVA_CACHE_DIR`` (the GPT-tiny step's through ``nova precompile train``,
whose command it runs too) for the offline device run."""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from nova.kernels.embedding import EmbeddingProblem  # noqa: E402

TOL = {"f32": 1e-6, "bf16": 8e-3, "f16": 1e-3}      # relative Frobenius error of a result stored in that type
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
IT = {"i32": torch.int32, "i64": torch.int64}

# (count shape, vocab, dim, dtype, index dtype, index view: None | "transposed", row stride pad)
FORWARD = [((16384,), 32768, 512, "f32", "i64", None, 0), ((4, 333), 1000, 37, "f32", "i32", None, 0),
           ((7, 9), 50, 1000, "bf16", "i64", "transposed", 0), ((100,), 77, 130, "f16", "i32", None, 6),
           ((3, 5), 11, 1, "f32", "i64", None, 0), ((64,), 4096, 768, "bf16", "i32", None, 8)]
BACKWARD = [((16384,), 32768, 512, "f32", "i64", None, 0), ((4, 333), 1000, 37, "f32", "i32", None, 0),
            ((7, 9), 50, 1000, "bf16", "i64", "transposed", 0), ((1000,), 777, 130, "f16", "i32", None, 6),
            ((512,), 512, 512, "f32", "i64", None, 0), ((3000,), 70000, 24, "f32", "i64", None, 0)]


def rel(got, ref) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def indices(shape, vocab, index_dtype, view, gen, repeated=False):
    """Random indices (``repeated``: most of them one index, the rest few distinct ones), as a dense tensor
    or a transposed (strided) view."""
    n = 1
    for d in shape:
        n *= d
    if repeated:
        flat = torch.randint(0, vocab, (n,), generator=gen)
        flat[torch.rand(n, generator=gen) < 0.8] = vocab // 3
        flat[: max(1, n // 10)] = torch.randint(0, min(vocab, 4), (max(1, n // 10),), generator=gen)
    else:
        flat = torch.randint(0, vocab, (n,), generator=gen)
    idx = flat.reshape(shape).to(IT[index_dtype]).cuda()
    if view == "transposed":
        idx = idx.t().contiguous().t()                     # same values, column-major strides
    return idx


def rows_tensor(rows, dim, pad, dtype, gen):
    """[rows, dim] random rows, ``pad`` NaN elements between rows (a strided view)."""
    buf = torch.full((rows, dim + pad), float("nan"), dtype=DT[dtype], device="cuda")
    buf[:, :dim] = torch.randn(rows, dim, generator=gen).to(DT[dtype]).cuda()
    return buf[:, :dim]


def problem_for(direction, rows, idx, vocab):
    from nova.kernels.embedding.launch import problem_of
    return problem_of(direction, rows, idx, vocab)


def forward(table, idx):
    from nova.kernels.embedding.launch import run
    p = problem_for("forward", table, idx, table.shape[0])
    out = torch.full(tuple(idx.shape) + (p.dim,), float("nan"), dtype=table.dtype, device="cuda")
    run(p, {"idx": idx.data_ptr(), "table": table.data_ptr(), "out": out.data_ptr()}, table.device)
    return out


def backward(dy, idx, vocab):
    from nova.kernels.embedding.launch import run
    p = problem_for("backward", dy, idx, vocab)
    grad = torch.full((vocab, p.dim), float("nan"), dtype=dy.dtype, device="cuda")
    run(p, {"idx": idx.data_ptr(), "dy": dy.data_ptr(), "grad": grad.data_ptr()}, dy.device)
    return grad


@pytest.mark.parametrize("case", FORWARD, ids=lambda c: f"{c[0]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}-pad{c[6]}")
def test_gather_matches_float64_reference(case):
    shape, vocab, dim, dtype, index_dtype, view, pad = case
    gen = torch.Generator().manual_seed(hash(case) % 2**31)
    table = rows_tensor(vocab, dim, pad, dtype, gen)
    for repeated in (False, True):
        idx = indices(shape, vocab, index_dtype, view, gen, repeated)
        out = forward(table, idx)
        ref = table.double()[idx.long()]
        assert not out.isnan().any()
        assert torch.equal(out.double(), ref), f"gather {case} repeated={repeated}: not a bit-exact copy"


@pytest.mark.parametrize("case", BACKWARD, ids=lambda c: f"{c[0]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}-pad{c[6]}")
def test_scatter_add_matches_float64_reference_and_is_deterministic(case):
    shape, vocab, dim, dtype, index_dtype, view, pad = case
    gen = torch.Generator().manual_seed(hash(case) % 2**31)
    count = 1
    for d in shape:
        count *= d
    for repeated in (False, True):
        idx = indices(shape, vocab, index_dtype, view, gen, repeated)
        dy = rows_tensor(count, dim, pad, dtype, gen)
        grad = backward(dy, idx, vocab)
        ref = torch.zeros(vocab, dim, dtype=torch.float64).index_add_(0, idx.reshape(-1).long().cpu(),
                                                                      dy.double().cpu())
        assert not grad.isnan().any(), f"{case}: rows left unwritten (NaN poison survives)"
        longest = int(torch.bincount(idx.reshape(-1).long().cpu()).max())
        bound = TOL[dtype] * max(1.0, math.sqrt(longest) / 8)   # a sequential sum's rounding grows ~ sqrt(terms)
        assert rel(grad, ref) <= bound, f"scatter-add {case} repeated={repeated}: {rel(grad, ref):.3g} > {bound:.3g}"
        untouched = torch.ones(vocab, dtype=torch.bool)
        untouched[idx.reshape(-1).long().cpu()] = False
        assert (grad.cpu()[untouched] == 0).all(), "rows no index names are not zero"
        again = backward(dy, idx, vocab)
        assert torch.equal(grad, again), f"{case}: two runs differ (not deterministic)"


def test_scatter_add_with_a_base_adds_it_to_each_rows_sum():
    """A tied embedding's gradient (``base``: the LM head's weight gradient): each row written as its sum
    in index order plus the base, bit for bit ``sums + base`` in FP32 (the IR's add after the scatter-add),
    rows no index names the base itself."""
    import dataclasses
    from nova.kernels.embedding.launch import run
    gen = torch.Generator().manual_seed(11)
    count, vocab, dim = 5000, 300, 64
    idx = torch.randint(0, vocab // 2, (count,), generator=gen).cuda()
    dy = torch.randn(count, dim, generator=gen).float().cuda()
    base = torch.randn(vocab, dim, generator=gen).float().cuda()
    p = dataclasses.replace(problem_for("backward", dy, idx, vocab), base="f32")
    grad = torch.full((vocab, dim), float("nan"), dtype=torch.float32, device="cuda")
    run(p, {"idx": idx.data_ptr(), "dy": dy.data_ptr(), "base": base.data_ptr(), "grad": grad.data_ptr()},
        dy.device)
    assert torch.equal(grad, backward(dy, idx, vocab) + base)


def test_scatter_add_sums_in_index_order():
    """One row named by every index: the FP32 sum in index order, bit for bit."""
    gen = torch.Generator().manual_seed(7)
    count, vocab, dim = 5000, 300, 64
    idx = torch.full((count,), 123, dtype=torch.int64).cuda()
    dy = (torch.randn(count, dim, generator=gen) * torch.logspace(-3, 3, count).unsqueeze(1)).float().cuda()
    grad = backward(dy, idx, vocab)
    acc = torch.zeros(dim, dtype=torch.float32)
    for row in dy.cpu():
        acc += row
    assert torch.equal(grad[123].cpu(), acc)


def test_compiled_gpt_tiny_loss_and_gradients_match_eager():
    import copy
    import nova
    from nova.models.gpt import GPT
    model = GPT("tiny", seed=0).cuda()
    twin = copy.deepcopy(model)

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    compiled = nova.compile(step, backend="executor")
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    idx = torch.randint(0, vocab, (4, 16), generator=gen).cuda()
    targets = torch.randint(0, vocab, (4, 16), generator=gen).cuda()
    loss = compiled(idx, targets)
    ref = twin(idx, targets)
    ref.backward()
    assert abs(float(loss) - float(ref)) <= 1e-4 * abs(float(ref))
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert rel(p.grad, q.grad) <= 1e-3, f"{name}: {rel(p.grad, q.grad):.3g}"
    program = compiled._last.engine.program
    assert any(k.embedding is not None for launch in program.launches for k in launch.kernels)


# ------------------------------------------------------------------ precompiling this file's kernels (host)
def _build(target: str) -> None:
    """Every embedding kernel the kernel tests above launch, into $NOVA_CACHE_DIR (a host with MLIR, no GPU);
    the GPT-tiny step's kernels through ``nova precompile train tiny --batch 4 --seq 16``."""
    import subprocess
    import sys
    from nova.hwmodel import get_target
    from nova.kernels.embedding.compile import precompile_embedding
    from nova.kernels.embedding.problem import merge_index_axes
    gpu = get_target(target)
    problems = []
    for cases, direction in ((FORWARD, "forward"), (BACKWARD, "backward")):
        for shape, vocab, dim, dtype, index_dtype, view, pad in cases:
            count = 1
            for d in shape:
                count *= d
            strides = tuple(torch.empty(shape).stride()) if view is None else \
                tuple(torch.empty(shape[::-1]).t().stride())
            ishape, istrides = merge_index_axes(shape, strides)
            problems.append(EmbeddingProblem(direction, count, vocab, dim, dtype, index_dtype, ishape, istrides,
                                             dim + pad))
    problems.append(EmbeddingProblem("backward", 5000, 300, 64, "f32", "i64"))
    problems.append(EmbeddingProblem("backward", 5000, 300, 64, "f32", "i64", base="f32"))
    for p in dict.fromkeys(problems):
        for role, key, status in precompile_embedding(p, gpu):
            print(f"{status:>8} {key[:12]} {p.describe()} [{role}]")
    cmd = [sys.executable, "-m", "nova.cli.main", "precompile", "train", "tiny", "--batch", "4", "--seq", "16",
           "--target", target]
    print("$", " ".join(cmd))
    subprocess.run(cmd, check=True)


if __name__ == "__main__":
    from gpu_build import flag_main
    flag_main(_build, "embedding")
