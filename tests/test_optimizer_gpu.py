"""The multi-tensor optimizer kernels on the GPU: AdamW/Adam and SGD over many parameters of odd sizes
in one launch, against torch.optim's own step and a float64 reference of the same update
(``ref_adamw``/``ref_sgd`` on float64 copies; the updates are in place, so outputs are not
NaN-poisoned: every element is compared); the hyper-parameters and step counts read at run time
(one bound kernel, one CUDA graph, a learning-rate schedule); and compiled GPT-tiny steps whose
optimizer groups run on them, against eager.

Kernels come from a cache built on a host with MLIR (this file's ``__main__`` builds them all):

    NOVA_CACHE_DIR=.nova-cache python tests/test_optimizer_gpu.py --target h200                  # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_optimizer_gpu.py  # GPU
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from nova.ir.ops import ref_adamw, ref_sgd  # noqa: E402
from nova.kernels.optimizer.problem import UpdateRule  # noqa: E402
from pointwise_support import GPT_BATCH, GPT_SEQ, TORCH, gpt_tiny, gpt_tiny_planned  # noqa: E402

pytestmark = pytest.mark.gpu
# sizes around the chunks' edges (1024 .. 4096 elements), a 2-D parameter, a large one
SHAPES = [(1,), (3,), (7,), (16,), (1001,), (4095,), (4097,), (33, 17), (8193,), (65537,), (5,), (300_001,), (2,)]
TOL = {"f32": 1e-6, "bf16": 1.6e-2, "f16": 3e-3}        # relative Frobenius error against float64
DELTA_TOL = 5e-5                  # f32: the update itself (new - old), relative to its size
ADAM_RULES = [UpdateRule("adamw", dtype, "f32", decoupled=decoupled, maximize=maximize)
              for dtype in ("f32", "bf16", "f16") for decoupled, maximize in ((True, False), (False, True))]
SGD_RULES = [UpdateRule("sgd", dtype, with_momentum=m, nesterov=n, first_step=f, maximize=x)
             for dtype in ("f32", "bf16")
             for m, n, f, x in ((False, False, False, False), (True, False, True, False), (True, False, False, True),
                                (True, True, False, False))]
ALL_RULES = list(dict.fromkeys(ADAM_RULES + SGD_RULES + [UpdateRule("adamw", "f32", "f32")]))


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def randn(gen, shape, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen, device="cuda") * scale).to(TORCH[dtype])


def nova_update(rule, rows, hyper):
    from nova.kernels.optimizer.launch import bind
    kernel = bind(rule, rows, hyper)
    kernel()
    torch.cuda.synchronize()
    return kernel


def in_place(rule, row) -> dict:
    """Every output the storage of its input (the executor's donated updates)."""
    return {**row, **{f"{name}_out": row[name] for name in rule.writes() if name in row}}


# --------------------------------------------------------------------------- AdamW / Adam
@pytest.mark.parametrize("rule", ADAM_RULES, ids=lambda r: r.describe())
def test_adam_matches_torch_and_float64(rule):
    gen = torch.Generator(device="cuda").manual_seed(0)
    dtype = TORCH[rule.dtype]
    # eps 1e-8 is 0 in f16, where torch's single-tensor Adam computes: a second moment that underflows to 0
    # then divides by 0 in torch's own first step (inf parameters); 1e-4 is representable
    lr, betas, eps, wd = 1e-2, (0.9, 0.99), 1e-4 if rule.dtype == "f16" else 1e-8, 0.1
    params = [randn(gen, s, rule.dtype).requires_grad_() for s in SHAPES]
    cls = torch.optim.AdamW if rule.decoupled else torch.optim.Adam
    opt = cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, maximize=rule.maximize, foreach=False)
    for p in params:                                  # a first torch step creates the state
        p.grad = randn(gen, p.shape, rule.dtype)
    opt.step()
    before = [(p.detach().clone(), opt.state[p]["exp_avg"].clone(), opt.state[p]["exp_avg_sq"].clone(),
               float(opt.state[p]["step"])) for p in params]
    grads = [randn(gen, p.shape, rule.dtype) for p in params]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()                                        # torch's second step
    hyper = torch.tensor([lr, *betas, eps, wd], dtype=torch.float64, device="cuda")
    assert all(torch.isfinite(p0).all() for p0, *_ in before), "torch's first step left non-finite parameters"
    rows = []
    for (p0, m0, v0, step), g in zip(before, grads):
        rows.append(in_place(rule, {"param": p0.clone(), "grad": g, "exp_avg": m0.clone(), "exp_avg_sq": v0.clone(),
                                    "step": torch.tensor(step + 1, dtype=torch.float32, device="cuda")}))
    nova_update(rule, rows, hyper)
    for p, (p0, m0, v0, step), g, row in zip(params, before, grads, rows):
        ref = ref_adamw(torch, p0.double(), g.double(), m0.double(), v0.double(),
                        torch.tensor(step + 1, dtype=torch.float64, device="cuda"), hyper, rule.decoupled,
                        rule.maximize)
        state = opt.state[p]
        for name, got, eager, want in zip(("param", "exp_avg", "exp_avg_sq"),
                                          (row["param"], row["exp_avg"], row["exp_avg_sq"]),
                                          (p.detach(), state["exp_avg"], state["exp_avg_sq"]), ref):
            assert got.dtype == dtype and rel(got, want) < TOL[rule.dtype], (p.shape, name, rel(got, want))
            assert rel(eager, want) < TOL[rule.dtype], (p.shape, name, "torch itself")   # the reference is torch's
        if rule.dtype == "f32":
            assert rel(row["param"] - p0, ref[0] - p0.double()) < DELTA_TOL, p.shape


# --------------------------------------------------------------------------- SGD
@pytest.mark.parametrize("rule", SGD_RULES, ids=lambda r: r.describe())
def test_sgd_matches_torch_and_float64(rule):
    gen = torch.Generator(device="cuda").manual_seed(1)
    lr, momentum, dampening, wd = 0.05, 0.9 if rule.with_momentum else 0.0, 0.0 if rule.nesterov else 0.1, 0.01
    params = [randn(gen, s, rule.dtype).requires_grad_() for s in SHAPES]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening if rule.with_momentum else 0.0,
                          weight_decay=wd, nesterov=rule.nesterov, maximize=rule.maximize, foreach=False)
    if rule.with_momentum and not rule.first_step:
        for p in params:
            p.grad = randn(gen, p.shape, rule.dtype)
        opt.step()                                    # the buffers exist
    before = [(p.detach().clone(), opt.state[p]["momentum_buffer"].clone() if not rule.first_step and
               rule.with_momentum else None) for p in params]
    grads = [randn(gen, p.shape, rule.dtype) for p in params]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    hyper = torch.tensor([lr, momentum, dampening if rule.with_momentum else 0.0, wd], dtype=torch.float64,
                         device="cuda")
    rows = []
    for (p0, b0), g in zip(before, grads):
        row = {"param": p0.clone(), "grad": g}
        if b0 is not None:
            row["momentum_buffer"] = b0.clone()
        row = in_place(rule, row)
        if rule.first_step:
            row["momentum_buffer_out"] = torch.full_like(p0, float("nan"))       # written whole: poisoned
        rows.append(row)
    nova_update(rule, rows, hyper)
    for p, (p0, b0), g, row in zip(params, before, grads, rows):
        ref = ref_sgd(torch, p0.double(), g.double(), hyper, *(() if b0 is None else (b0.double(),)),
                      with_momentum=rule.with_momentum, nesterov=rule.nesterov, maximize=rule.maximize)
        assert rel(row["param_out"], ref[0]) < TOL[rule.dtype], p.shape
        assert rel(p.detach(), ref[0]) < TOL[rule.dtype], (p.shape, "torch itself")
        if rule.with_momentum:
            assert not row["momentum_buffer_out"].isnan().any()
            assert rel(row["momentum_buffer_out"], ref[1]) < TOL[rule.dtype], p.shape
            assert rel(opt.state[p]["momentum_buffer"], ref[1]) < TOL[rule.dtype], (p.shape, "torch itself")


# --------------------------------------------------------------------------- numbers read at run time
def test_hyper_parameters_and_steps_are_read_at_run_time_in_one_cuda_graph():
    """One bound kernel captured once: changing the learning rate, weight decay and the step counts in
    their tensors changes the next replay's update (nothing recompiles or recaptures)."""
    rule = UpdateRule("adamw", "f32", "f32")
    gen = torch.Generator(device="cuda").manual_seed(2)
    rows, ref = [], []
    for s in SHAPES:
        row = {"param": randn(gen, s, "f32"), "grad": randn(gen, s, "f32"), "exp_avg": randn(gen, s, "f32", 0.1),
               "exp_avg_sq": torch.rand(s, generator=gen, device="cuda") * 0.01,
               "step": torch.zeros((), device="cuda")}
        rows.append(in_place(rule, row))
        ref.append([row[k].double() for k in ("param", "grad", "exp_avg", "exp_avg_sq")])
    hyper = torch.zeros(5, dtype=torch.float64, device="cuda")
    from nova.kernels.optimizer.launch import bind
    kernel = bind(rule, rows, hyper)
    schedule = [(1e-2, 0.1), (5e-3, 0.0), (2.5e-3, 0.2)]
    graph = None
    for k, (lr, wd) in enumerate(schedule, 1):
        hyper.copy_(torch.tensor([lr, 0.9, 0.999, 1e-8, wd], dtype=torch.float64))
        for row in rows:
            row["step"].fill_(k)
        if graph is None:                            # the first step eagerly on a side stream, then the capture
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                kernel()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                kernel()
        else:
            graph.replay()
        torch.cuda.synchronize()
        for r in ref:
            r[0], r[2], r[3] = ref_adamw(torch, r[0], r[1], r[2], r[3],
                                         torch.tensor(float(k), dtype=torch.float64, device="cuda"), hyper)
    for row, r in zip(rows, ref):
        assert rel(row["param"], r[0]) < TOL["f32"] and rel(row["exp_avg"], r[2]) < TOL["f32"]


# --------------------------------------------------------------------------- whole steps
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_compiled_gpt_tiny_steps_update_like_eager(optimizer):
    """nova.compile's program runs each optimizer group as one multi-tensor launch; a learning-rate
    schedule over the steps replays one CUDA graph; the parameters end where eager's do."""
    import nova
    model, opt, train_step = gpt_tiny("cuda", optimizer)
    twin = copy.deepcopy(model)
    from pointwise_support import make_optimizer
    opt_ref = make_optimizer(optimizer, twin.parameters())
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (s + 1)) for o in (opt, opt_ref)]
    start = [p.detach().clone() for p in twin.parameters()]
    step = nova.compile(train_step, backend="executor")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(4):
        idx = torch.randint(0, model.config.vocab_size, (GPT_BATCH, GPT_SEQ), generator=gen, device="cuda")
        step(idx, idx)
        twin(idx, idx).backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        for s in scheds:
            s.step()
    program = step._last.engine.program
    kernels = [k for launch in program.launches for k in launch.kernels if k.optimizer is not None]
    assert len(kernels) == 1 and "nova multi-tensor kernel" in kernels[0].what
    assert not [f for f in program.stats["fallbacks"] if "multi-tensor" in f]
    assert program.stats["captures"] == 1                       # the later steps: one graph, lr read at run time
    diff = sum(float((p - q).pow(2).sum()) for p, q in zip(model.parameters(), twin.parameters())) ** 0.5
    moved = sum(float((q - q0).pow(2).sum()) for q, q0 in zip(twin.parameters(), start)) ** 0.5
    assert diff < 0.05 * moved, (diff, moved)


# --------------------------------------------------------------------------- precompiling
def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile every kernel these tests launch for ``target`` into the kernel cache (``NOVA_CACHE_DIR``
    or ``cache_dir``): each update rule's kernel and every kernel of the GPT-tiny steps."""
    from nova.compiler.precompile import precompile_optimizer, precompile_planned
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), KernelCache(cache_dir)
    total = precompile_optimizer(ALL_RULES, gpu, cache, log)
    for optimizer, later in (("adamw", False), ("sgd", False), ("sgd", True)):
        counts = precompile_planned(gpt_tiny_planned(optimizer, later), gpu, cache, log)
        for k in ("compiled", "cached", "failed"):
            total[k] += counts[k]
    return total


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)
