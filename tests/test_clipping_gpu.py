"""Gradient clipping's kernels on the GPU (skipped without one), against float64 references on fresh random
data with every output NaN-poisoned before the launch:

* the multi-tensor sum (``nova/kernels/optimizer/sum_*``): tensors of odd sizes, one element, an empty one
  and one of more than 16M elements in one launch, every entry kind (a square, a tied weight's two
  gradients added and stored, a bf16 gradient cast and stored, a bf16 sum); two launches give the same
  bits (fixed-order partials; the completion counter is left at zero); a multi-tensor map (store-only
  entries: the parameters' casts), bit for bit torch's casts;
* the rows kernels' split rows: one or few long rows reduced by a wave of CTAs (``row_final``);
* the update with the clipping coefficient folded in (``UpdateRule.grad_scale``, ``grad_out``);
* a compiled GPT-tiny step with ``clip_grad_norm_`` against eager.

Kernels come from a cache built on a host with MLIR (this file's ``__main__`` builds them all):

    NOVA_CACHE_DIR=.nova-cache python tests/test_clipping_gpu.py --target h200                     # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_clipping_gpu.py    # GPU
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from nova.ir.ops import ref_adamw, ref_sgd  # noqa: E402
from step_parity import assert_tracks_float64, float64_twin, take_steps, tf32_matmuls, zero_gradient_masks  # noqa: E402,E501
from nova.kernels.optimizer.problem import UpdateRule  # noqa: E402
from nova.kernels.optimizer.sum_problem import SumEntry, SumRule, workspace_words  # noqa: E402
from nova.kernels.rows import Operand, Prologue, RowsProblem  # noqa: E402

pytestmark = pytest.mark.gpu
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TOL = {"f32": 2e-5, "bf16": 1e-2, "f16": 2e-3}

SQUARE = SumEntry(("f32",), Prologue((("mul", ("in0", "in0")),), ((0, "out"),)), epilogue=(("sqrt", "f32"),))
TIED = SumEntry(("f32", "f32"), Prologue((("add", ("in0", "in1")), ("mul", ("%0", "%0"))), ((1, "out"),),
                                         ((0, "st0"),)), stored="f32", epilogue=(("sqrt", "f32"),))
CAST = SumEntry(("bf16",), Prologue((("cast_f32", ("in0",)), ("mul", ("%0", "%0"))), ((1, "out"),), ((0, "st0"),)),
                stored="f32", epilogue=(("sqrt", "f32"),))
HALF = SumEntry(("bf16",), Prologue((("mul", ("in0", "in0")), ("cast_bf16", ("%0",))), ((1, "out"),)), total="bf16",
                epilogue=(("sqrt", "bf16"),))
MIXED = SumRule((SQUARE, TIED, CAST))


def cast_entry(src: str, dst: str) -> SumEntry:
    """A store-only entry (a multi-tensor map): ``st0 = cast(in0)``, autocast's parameter casts."""
    return SumEntry((src,), Prologue(((f"cast_{dst}", ("in0",)),), (), ((0, "st0"),)), stored=dst)


MAP = SumRule((cast_entry("f32", "bf16"), cast_entry("f32", "f16"), cast_entry("bf16", "f32")))
MAP_CASES = [(1, 0), (0, 1), (4097, 0), ((1 << 24) + 3, 0), (33, 1), (1001, 2), (65536, 0), (300_001, 1), (7, 2)]
SUM_CASES = [(MIXED, [(1, 0), (3, 1), (0, 0), (4097, 2), ((1 << 24) + 3, 1), (33, 0), (1001, 2), (1, 1), (65536, 0),
                      (300_001, 2)]),
             (SumRule((HALF,)), [(7, 0), (1 << 20, 0), (1, 0), (12345, 0)])]
SPLIT_CASES = [(1, (1 << 24) + 5, "f32", "sum", False), (3, 300_001, "bf16", "mean", True),
               (2, 1_000_003, "f16", "max", False), (5, 70_001, "f32", "sum", True)]
UPDATE_RULES = [UpdateRule("adamw", "f32", "f32", grad_scale=True), UpdateRule("adamw", "bf16", "f32", grad_scale=True,
                                                                               grad_out=True),
                UpdateRule("sgd", "f32", with_momentum=True, grad_scale=True, grad_out=True)]
UPDATE_SIZES = [1, 7, 4097, 65_537, 300_001, 3]


def rel(got, ref) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def rounded(t, dtype: str):
    """A float64 value rounded to ``dtype`` and back."""
    return t.to(TORCH[dtype]).double()


# --------------------------------------------------------------------------- the multi-tensor sum
def sum_reference(entry: SumEntry, ins: list) -> tuple:
    """(the stored value or None, the result) of ``entry`` over the float64 copies of its operands, every
    step rounded where the kernel rounds."""
    x = [t.double() for t in ins]
    stored = None
    if entry is SQUARE:
        value = x[0] * x[0]
    elif entry is TIED:
        stored = rounded(x[0] + x[1], "f32")
        value = stored * stored
    elif entry is CAST:
        stored = x[0]
        value = stored * stored
    else:
        value = rounded(x[0] * x[0], "bf16")
    total = rounded(value.sum(), entry.total)
    return stored, rounded(total.sqrt(), entry.out)


@pytest.mark.parametrize("rule, tensors", SUM_CASES, ids=["mixed", "bf16"])
def test_multi_tensor_sum_matches_float64(rule, tensors):
    from nova.kernels.optimizer.sum_launch import bind
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, refs = [], []
    for n, k in tensors:
        entry = rule.entries[k]
        row = {"entry": k}
        for j, dt in enumerate(entry.dtypes):
            row[f"in{j}"] = (torch.randn(n, generator=gen, device="cuda") * (0.5 + j)).to(TORCH[dt])
        if entry.stored:
            row["st0"] = torch.full((n,), float("nan"), dtype=TORCH[entry.stored], device="cuda")
        row["out"] = torch.full((), float("nan"), dtype=TORCH[entry.out], device="cuda")
        rows.append(row)
        refs.append(sum_reference(entry, [row[f"in{j}"] for j in range(len(entry.dtypes))]))
    kernel = bind(rule, rows)
    kernel()
    torch.cuda.synchronize()
    first = [row["out"].clone() for row in rows]
    for (n, k), row, (stored, want) in zip(tensors, rows, refs):
        entry = rule.entries[k]
        assert not torch.isnan(row["out"]).any(), (n, k)
        assert rel(row["out"], want) <= TOL[entry.out] if n else float(row["out"]) == 0.0, (n, k)
        if stored is not None:
            assert torch.equal(row["st0"].double().cpu(), stored.cpu()), (n, k, "stored")
    from nova.kernels.optimizer.sum_launch import resolve
    counter, _ = workspace_words(len(rows), resolve(rule)[0].grid)
    assert int(kernel.work.view(torch.int32)[counter]) == 0, "the completion counter is left at zero"
    for row in rows:
        row["out"].fill_(float("nan"))
    kernel()                                   # the counter was left at zero: a second launch finishes too
    torch.cuda.synchronize()
    assert all(torch.equal(row["out"], f) for row, f in zip(rows, first)), "two launches differ"


def test_multi_tensor_map_casts_bit_for_bit():
    """Store-only entries (autocast's parameter casts, one launch): each tensor's st0 is the rounding of its
    input torch's cast gives, bit for bit; odd sizes, an empty tensor, one of more than 16M elements;
    nothing else is written (no result, no partials)."""
    from nova.kernels.optimizer.sum_launch import bind
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    for n, k in MAP_CASES:
        entry = MAP.entries[k]
        x = (torch.randn(n, generator=gen, device="cuda") * 3).to(TORCH[entry.dtypes[0]])
        rows.append({"entry": k, "in0": x,
                     "st0": torch.full((n,), float("nan"), dtype=TORCH[entry.stored], device="cuda")})
    kernel = bind(MAP, rows)
    kernel()
    torch.cuda.synchronize()
    for (n, k), row in zip(MAP_CASES, rows):
        assert torch.equal(row["st0"], row["in0"].to(row["st0"].dtype)), (n, k)


# --------------------------------------------------------------------------- split rows
def split_problem(rows: int, n: int, dtype: str, op: str, stored: bool) -> RowsProblem:
    row = lambda name, dt=dtype: Operand(name, dt, "row", n)  # noqa: E731
    pro = Prologue((("cast_f32", ("a",)), ("mul", ("%0", "%0"))), ((1, "out"),), ((0, "st0"),) if stored else ())
    outs = (Operand("out", "f32", "per_row"),) + ((row("st0", "f32"),) if stored else ())
    return RowsProblem("row_reduce", rows, n, (row("a"),), outs, {"op": op}, pro)


def run_rows(p: RowsProblem, tensors: dict) -> None:
    from nova.kernels.rows.launch import launch_args, resolve
    r = resolve(p)
    ws = torch.full((max(1, r.workspace_bytes // 4),), float("nan"), device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for kernel, args in launch_args(r, {name: t.data_ptr() for name, t in tensors.items()}, ws.data_ptr()):
        kernel.launch(args, stream)
    torch.cuda.synchronize()


@pytest.mark.parametrize("rows, n, dtype, op, stored", SPLIT_CASES)
def test_split_rows_match_float64(rows, n, dtype, op, stored):
    from nova.kernels.rows.launch import schedule_for
    from nova.runtime.matmul import resolve_target
    p = split_problem(rows, n, dtype, op, stored)
    assert schedule_for(p, resolve_target()).row.splits > 1
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = (torch.randn(rows, n, generator=gen, device="cuda") * 2 + 0.1).to(TORCH[dtype])
    t = {"a": a, "out": torch.full((rows,), float("nan"), device="cuda")}
    if stored:
        t["st0"] = torch.full((rows, n), float("nan"), device="cuda")
    run_rows(p, t)
    x = a.double()
    want = {"sum": (x * x).sum(-1), "mean": (x * x).mean(-1), "max": (x * x).amax(-1)}[op]
    assert not torch.isnan(t["out"]).any() and rel(t["out"], want) <= TOL["f32"] * 5
    if stored:
        assert torch.equal(t["st0"], a.float())
    first = t["out"].clone()
    t["out"].fill_(float("nan"))
    run_rows(p, t)
    assert torch.equal(t["out"], first), "the parts are added in a fixed order: the same bits again"


# --------------------------------------------------------------------------- the update with the coefficient
@pytest.mark.parametrize("rule", UPDATE_RULES, ids=lambda r: r.describe())
def test_update_with_the_clipping_coefficient_matches_float64(rule):
    from nova.kernels.optimizer.launch import bind
    gen = torch.Generator(device="cuda").manual_seed(2)
    dtype = TORCH[rule.dtype]
    hyper = torch.tensor([1e-2, 0.9, 0.99, 1e-8, 0.1] if rule.op == "adamw" else [5e-2, 0.9, 0.0, 1e-2],
                         dtype=torch.float64, device="cuda")
    rows, before = [], []
    for k, n in enumerate(UPDATE_SIZES):
        row = {"param": torch.randn(n, generator=gen, device="cuda").to(dtype),
               "grad": torch.randn(n, generator=gen, device="cuda").to(dtype),
               "exp_avg": (torch.randn(n, generator=gen, device="cuda") * 0.1).to(dtype),
               "exp_avg_sq": (torch.rand(n, generator=gen, device="cuda") * 0.01).to(dtype),
               "momentum_buffer": torch.randn(n, generator=gen, device="cuda").to(dtype),
               "grad_scale": torch.tensor(0.2 + 0.05 * k, dtype=dtype, device="cuda")}
        if rule.op == "adamw":
            row["step"] = torch.tensor(float(k + 1), device="cuda")
        old = {name: row[name].double().clone() for name in rule.reads()}
        old["grad"] = (row["grad"] * row["grad_scale"]).double()     # the IR's mul: rounded to the storage type
        for name in rule.writes():
            row[f"{name}_out"] = torch.full((n,), float("nan"), dtype=dtype, device="cuda")
        rows.append(row)
        before.append(old)
    bind(rule, rows, hyper)()
    torch.cuda.synchronize()
    tol = {"f32": 1e-6, "bf16": 1.6e-2}[rule.dtype]
    for k, (row, old) in enumerate(zip(rows, before)):
        if rule.op == "adamw":
            want = ref_adamw(torch, old["param"], old["grad"], old["exp_avg"], old["exp_avg_sq"],
                             torch.tensor(float(k + 1), dtype=torch.float64, device="cuda"), hyper, rule.decoupled,
                             rule.maximize)
        else:
            want = ref_sgd(torch, old["param"], old["grad"], hyper, old["momentum_buffer"], with_momentum=True)
        want = tuple(want) + ((old["grad"],) if rule.grad_out else ())
        for name, w in zip(rule.writes(), want):
            got = row[f"{name}_out"]
            assert not torch.isnan(got.float()).any(), (UPDATE_SIZES[k], name)
            assert rel(got, w) < tol, (UPDATE_SIZES[k], name, rel(got, w))


# --------------------------------------------------------------------------- a whole step
def gpt_tiny_clipped(device):
    from nova.models import TrainRecipe, make_train_step
    from nova.models.gpt import GPT
    model = GPT("tiny", seed=0).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    return model, opt, make_train_step(model, opt, TrainRecipe(clip_grad_norm=1.0))


def test_compiled_clipped_gpt_tiny_step_matches_eager():
    import nova
    torch.backends.cuda.matmul.allow_tf32 = False
    model, opt, step = gpt_tiny_clipped("cuda")
    twin, model64 = copy.deepcopy(model), float64_twin(model)
    from nova.models import TrainRecipe, make_train_step
    compiled, (ref_step, step64) = nova.compile(step), (make_train_step(
        m, torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1),
        TrainRecipe(clip_grad_norm=1.0)) for m in (twin, model64))
    gen = torch.Generator(device="cuda").manual_seed(3)
    vocab = model.config.vocab_size
    batches = [tuple(torch.randint(0, vocab, (2, 16), device="cuda", generator=gen) for _ in range(2)) for _ in range(3)]
    masks = zero_gradient_masks(model64, lambda m: m(*batches[0]))
    take_steps(compiled, ref_step, step64, batches, 5e-3, tf32_matmuls)
    assert_tracks_float64(model, twin, model64, masks, floor=5e-3)   # Nova's fp32 attention is TF32 too
    program = compiled._last.engine.program
    kernels = [k for launch in program.launches for k in launch.kernels]
    assert any(k.multi_sum is not None for k in kernels)
    assert any(k.optimizer is not None and k.optimizer.grad_scale for k in kernels)
    assert not program.stats["fallbacks"]


# --------------------------------------------------------------------------- precompiling
def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile every kernel these tests launch for ``target`` into the kernel cache (``NOVA_CACHE_DIR`` or
    ``cache_dir``): the sum rules, the split rows problems, the update rules and the clipped GPT-tiny step's."""
    from nova.compiler.explain import plan_training_step
    from nova.compiler.precompile import precompile_optimizer, precompile_planned, precompile_sums
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import precompile_rows
    from nova.models import TrainRecipe
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), KernelCache(cache_dir)
    total = precompile_sums([rule for rule, _ in SUM_CASES] + [MAP], gpu, cache, log)
    for k, v in precompile_optimizer(UPDATE_RULES, gpu, cache, log).items():
        total[k] += v
    for case in SPLIT_CASES:
        for role, key, status in precompile_rows(split_problem(*case), gpu, cache):
            total[status] += 1
            log(f"[rows] {split_problem(*case).describe()} [{role}]: {status} (key {key[:12]})")
    planned, _ = plan_training_step("tiny", 2, 16, "adamw", target, recipe=TrainRecipe(clip_grad_norm=1.0))
    counts = precompile_planned(planned, gpu, cache, log)
    for k in ("compiled", "cached", "failed"):
        total[k] += counts[k]
    return total


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)
