"""Every GEMM of the GPT-42M and GPT-144M training steps: Nova vs cuBLAS vs XLA, shape by shape.

    python3 -m nova.bench.train_gemms --write-suite bench/suites/train_gemms.json   # host, no GPU
    python3 -m nova.bench.train_gemms --list [--suite FILE]                         # the entries
    python3 -m nova.bench.train_gemms --device --out DIR [--dtypes tf32,bf16] [--models gpt42m]

The suite (``bench/suites/train_gemms.json``, written by ``--write-suite``) holds the distinct GEMM
problems that ``nova.compile`` launches for one training step of each model of ``SUITE_STEPS``
(captured and planned on the meta device, ``step_gemms``), each with how many times a step
launches it and its role, read from the layout flags (``ROLES``):

* forward ``Y = X·Wᵀ``: A row-major, B stored [N, K] (``trans_b``), NT;
* dX ``dX = dY·W``: both row-major, NN;
* dW ``dW = dYᵀ·X``: A stored [K, M] (``trans_a``), TN;
* anything else (TT) is "other".

The TF32 step defines the shapes; the device run times each entry in every ``--dtypes`` mode with
the same shape, layout and epilogue (output in the input storage: f32 for tf32, bf16 for bf16).

Method (one process, the same for the three libraries), per entry and dtype: fresh ``randn``
operands in the stored layouts (``harness.random_operands``), Nova's output NaN-poisoned and
checked against a float64 reference (``harness.TOLERANCE``; cuBLAS's and XLA's errors recorded
too); then ``--settle-s`` seconds of all three back to back (the H200's clock under sustained load,
bench/NOTES.md v0.6); then ``--rounds`` rounds, the libraries interleaved within a round, each
timing ``reps`` back-to-back calls (``reps`` so that a timing holds >= ``--min-time-s`` of work) by
the host's wall clock between two device synchronisations (``harness.wall_per_call``: XLA queues
on its own stream, which CUDA events on torch's stream would not see).  The median per call gives
TFLOP/s, and ``ratio`` = Nova's speed / the faster of cuBLAS and XLA.  A shape whose Nova result is
wrong or missing (a cache miss offline) is *failed*, in one line, and the run goes on; the result
files are rewritten after every case, and cases after ``--budget-s`` seconds are skipped.

* Nova: ``nova.matmul(a, b, out=, bias=, activation=, residual=, preactivation=)`` (epilogue fused,
  as the step runs it: an entry's ``residual`` R is fresh ``randn`` in C's type, its
  ``preactivation`` P a second NaN-poisoned output checked against float64 too).
* cuBLAS: ``torch.matmul(a, b, out=)``, ``torch.addmm(bias, a, b, out=)`` where the entry has a
  bias (cuBLASLt's bias epilogue), TF32 allowed (``harness.require_torch``); an activation and the
  residual add are ATen kernels after it (the GEMM then writes P, the activation C).
* XLA: ``jax.jit`` of ``lax.dot_general`` on jax arrays holding the same data in the same storage
  (the stored [K, M] / [N, K] arrays, the transposition expressed by ``dimension_numbers``, so XLA
  sees the real layout), + bias (+ activation) in the same jit (XLA fuses the bias into the GEMM);
  ``precision=Precision.DEFAULT`` with jax's default matmul precision, which on NVIDIA GPUs is TF32
  for f32 inputs (the row's ``xla_error`` shows it: ~1e-4 for TF32, ~1e-6 for full FP32; a
  warning says when XLA ran FP32); bf16 inputs give a bf16 output (``preferred_element_type``
  left at None: cuBLAS accumulates in f32).  jax is imported with XLA_PYTHON_CLIENT_PREALLOCATE=false
  so torch and XLA share the GPU.  Without jax (or with a CPU-only jax) the XLA columns are n/a.

Targets of the issue (reported, never adjusted): geomean ratio >= 1.05 in TF32 and >= 1.0 in BF16,
no shape below 0.9.  Results: ``train_gemms.json`` (rows, summary, environment), ``.csv``, ``.md``.

Batched suites (``bench/suites/batched_gemms.json``, hand-written, ``--suite``): an entry may also
carry ``B`` (the GEMM's batch, default 1; ``batch`` is the training step's batch of sequences) and
``batch_strides`` ``[A, B, C]`` ("packed"/null, or 0: that operand is one 2-D matrix for the whole
batch), the fields ``nova precompile gemm --suite`` reads.  Each library then runs the whole batch
in one call: Nova one batched launch (``nova.matmul`` on [B, ...] operands), cuBLAS
``torch.bmm``/``torch.baddbmm`` (strided-batched GEMM; ``torch.matmul`` where an operand is
broadcast), XLA ``lax.dot_general`` with the batch as a batch dimension (``xla_gemm``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

SUITE = "bench/suites/train_gemms.json"
SUITE_STEPS = (("gpt42m", 32, 512), ("gpt144m", 16, 1024))     # (model, batch, seq) of the suite
ROLES = {(False, True): "forward", (False, False): "dX", (True, False): "dW"}   # (trans_a, trans_b) -> role
ENTRY_KEYS = ("model", "batch", "seq", "M", "N", "K", "trans_a", "trans_b", "role", "count", "bias", "activation")
OPTIONAL_KEYS = {"B": 1, "batch_strides": None,     # a batched entry (module docstring): its defaults
                 "residual": False, "preactivation": False,   # the epilogue's matrices (GemmProblem's)
                 "activation_grad": False}                     # C = (A @ B) * act'(R): the activation's backward
TARGETS = {"tf32": 1.05, "bf16": 1.0}     # geomean of Nova / max(cuBLAS, XLA) per dtype
FLOOR = 0.9                               # no shape below
LIBS = ("nova", "cublas", "xla")


def role(trans_a: bool, trans_b: bool) -> str:
    """forward (NT), dX (NN), dW (TN), else other: see the module's docstring."""
    return ROLES.get((bool(trans_a), bool(trans_b)), "other")


# ------------------------------------------------------------------------------ the suite (host)
def step_gemms(model: str, batch: int, seq: int | None = None, optimizer: str = "adamw",
               target="h200") -> list[dict]:
    """The distinct Nova GEMM problems of one training step of built-in ``model`` (captured and
    planned on the meta device: no GPU), in launch order, as suite entries (``ENTRY_KEYS``)."""
    from nova.compiler.explain import plan_training_step
    from nova.models import config
    planned, _ = plan_training_step(model, batch, seq, optimizer, target)
    return gemm_entries(planned, model, batch, seq or config(model).block_size)


def gemm_entries(planned, model: str, batch: int, seq: int) -> list[dict]:
    """Suite entries of the GEMMs of ``planned``, the problems of ``step_kernels(planned)[0]`` in
    that order; ``count`` is how many of the step's launches run the problem."""
    from nova.compiler.executor import gemm_problem_counts
    entries = []
    for p, count in gemm_problem_counts(planned).items():
        if p.out_dtype != p.storage:
            raise ValueError(f"{model}: {p.describe()} writes {p.out_dtype}, not its input storage; the suite "
                             f"(one output per input dtype) cannot describe it")
        entries.append({"model": model, "batch": batch, "seq": seq, "M": p.M, "N": p.N, "K": p.K,
                        "trans_a": p.trans_a, "trans_b": p.trans_b, "role": role(p.trans_a, p.trans_b),
                        "count": count, "bias": p.bias, "activation": p.activation}
                       | {k: True for k in ("residual", "preactivation", "activation_grad") if getattr(p, k)})
    return entries


def suite_entries(steps=SUITE_STEPS, **kw) -> list[dict]:
    return [e for model, batch, seq in steps for e in step_gemms(model, batch, seq, **kw)]


def suite_text(entries) -> str:
    """The suite file: a JSON list, one entry per line (deterministic, diff-friendly); the batch
    fields only where they are not the defaults."""
    def keys(e):
        return {k: e[k] for k in ENTRY_KEYS} | {k: e[k] for k, d in OPTIONAL_KEYS.items() if e.get(k, d) != d}
    return "[\n" + ",\n".join(json.dumps(keys(e)) for e in entries) + "\n]\n"


def load_suite(path=SUITE) -> list[dict]:
    """The entries of a suite file, checked (one line naming the file and the entry on a bad one)."""
    from nova.cli.common import UsageError
    from nova.cli.shapes import load_json
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read the GEMM suite {path}: {getattr(e, 'strerror', None) or e}") from None
    entries = load_json(Path(path), text, UsageError)
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"GEMM suite {path}: expected a non-empty JSON list of entries")
    for e in entries:
        missing = [k for k in ENTRY_KEYS if not isinstance(e, dict) or k not in e]
        if missing:
            raise UsageError(f"GEMM suite {path}: entry {e!r} lacks {', '.join(missing)}")
    return entries


def case_problem(entry: dict, dtype: str):
    """The ``GemmProblem`` Nova runs for ``entry`` in ``dtype`` (the key ``nova.matmul`` looks up)."""
    from nova.kernels.gemm.problem import GemmProblem
    return GemmProblem(entry["M"], entry["N"], entry["K"], dtype, entry["trans_a"], entry["trans_b"],
                       entry["bias"], entry["activation"], None, "rna", False, *batch_of(entry),
                       residual=entry.get("residual", False), preactivation=entry.get("preactivation", False),
                       activation_grad=entry.get("activation_grad", False))


def batch_of(entry: dict) -> tuple:
    """``(B, stride_a, stride_b, stride_c)`` of an entry (None: packed, 0: broadcast); the benchmark
    builds packed or broadcast operands only."""
    strides = entry.get("batch_strides") or [None] * 3
    if len(strides) != 3 or any(s not in (None, "packed", 0) for s in strides):
        raise ValueError(f"GEMM suite entry {entry!r}: batch_strides must be three of \"packed\", null or 0 "
                         "(the benchmark makes packed or broadcast operands)")
    return (entry.get("B", 1), *(None if s == "packed" else s for s in strides))


def precompile_command(path: str, dtypes, target: str = "h200", cache_dir: str = ".nova-cache") -> str:
    return (f"nova precompile gemm --suite {path} --dtype {','.join(dtypes)} --target {target} "
            f"--cache-dir {cache_dir}")


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


# ------------------------------------------------------------------------------ XLA
def load_jax(log=print):
    """jax with a GPU backend, imported with XLA_PYTHON_CLIENT_PREALLOCATE=false (torch and XLA
    share the GPU), or None with one warning line."""
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        import jax
    except ImportError:
        log("warning: jax is not installed: the XLA columns are n/a")
        return None
    try:
        jax.devices("gpu")
    except RuntimeError as e:
        log(f"warning: jax {jax.__version__} sees no GPU ({_one_line(e)}): the XLA columns are n/a")
        return None
    return jax


def xla_gemm(jax, trans_a: bool, trans_b: bool, bias: bool = False, activation: str = "none",
             batched: tuple[bool, bool] = (False, False), residual: bool = False, preactivation: bool = False,
             activation_grad: bool = False):
    """A jitted ``act(op(A) @ op(B) + bias) + R`` taking A and B as stored: A [M, K] or [K, M]
    (``trans_a``), B [K, N] or [N, K] (``trans_b``); the transposition is ``dot_general``'s
    dimension numbers, so XLA sees the layout.  Output in the inputs' dtype.  ``batched``: which
    operands carry a leading batch axis [B, ...]: both, a ``dot_general`` batch dimension; one, a
    free axis of it (the other, 2-D, broadcast), the result [B, M, N] either way.  Arguments after
    A and B: the bias, then R, those it has; with ``preactivation`` it returns ``(C, A @ B + bias)``;
    with ``activation_grad`` C is ``(A @ B + bias) * act'(R)`` (jax's derivative of the activation)."""
    lax = jax.lax
    ra, rb = (3 if x else 2 for x in batched)
    contract = ((ra - 2 if trans_a else ra - 1,), (rb - 1 if trans_b else rb - 2,))
    dims = (contract, ((0,), (0,)) if all(batched) else ((), ()))
    b_only = batched == (False, True)            # result [M, B, N]: the batch axis moves to the front
    act = {"none": None, "relu": jax.nn.relu, "silu": jax.nn.silu,
           "gelu": lambda x: jax.nn.gelu(x, approximate=True),
           "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False)}[activation]

    def f(a, b, *rest):
        c = lax.dot_general(a, b, dims, precision=lax.Precision.DEFAULT)
        if b_only:
            c = jax.numpy.transpose(c, (1, 0, 2))
        if bias:
            c = c + rest[0]
        if activation_grad:
            return c * jax.vmap(jax.grad(act))(rest[-1].reshape(-1)).reshape(c.shape)
        out = act(c) if act else c
        if residual:
            out = out + rest[-1]
        return (out, c) if preactivation else out
    return jax.jit(f)


def to_jax(jax, t):
    """A jax array (owning its memory) with the data of the contiguous torch tensor ``t``, via DLPack."""
    return jax.numpy.array(jax.dlpack.from_dlpack(t.contiguous()), copy=True)


# ------------------------------------------------------------------------------ one case (device)
def bench_case(torch, jax, entry: dict, dtype: str, *, seed: int, settle_s: float, rounds: int,
               min_time_s: float, log=print) -> dict:
    """Check and time one entry in ``dtype``: a result row (``status`` ok / failed, ``failure``)."""
    import nova
    from nova.bench.harness import (TOLERANCE, apply_activation, nan_output, random_operands, reference,
                                    rel_fro, settle, wall_per_call)
    from nova.dtypes import MODES
    M, N, K, ta, tb = entry["M"], entry["N"], entry["K"], entry["trans_a"], entry["trans_b"]
    act, storage = entry["activation"], MODES[dtype].storage
    row = entry_row(entry) | {"dtype": dtype, "status": "ok", "failure": ""}
    gen = torch.Generator(device="cuda").manual_seed(seed)
    B, stride_a, stride_b, _ = batch_of(entry)
    if B == 1:
        a, b = random_operands(torch, M, N, K, dtype, gen, ta, tb)
        outs = {name: nan_output(torch, M, N, storage) for name in ("nova", "cublas")}
    else:                     # [B, ...] operands in the stored layouts (2-D where broadcast), [B, M, N] outputs
        a = batched_operand(torch, B if stride_a != 0 else 0, M, K, ta, dtype, gen)
        b = batched_operand(torch, B if stride_b != 0 else 0, K, N, tb, dtype, gen)
        outs = {name: nan_output(torch, M, N, storage).expand(B, M, N).clone() for name in ("nova", "cublas")}
    bias = None
    if entry["bias"]:         # Nova's rule: an f32 bias for TF32 inputs, else the output's type
        bias = torch.randn(N, device="cuda", generator=gen).to(torch.float32 if dtype == "tf32" else a.dtype)
    res = torch.randn(outs["nova"].shape, device="cuda", generator=gen).to(outs["nova"].dtype) \
        if entry.get("residual") else None                # R: C's shape and type
    pres = {name: torch.full_like(o, float("nan")) for name, o in outs.items()} if entry.get("preactivation") else {}
    grad = entry.get("activation_grad", False)          # C = (A @ B + bias) * act'(R)
    ref = activation_grad_reference(torch, reference(torch, a, b, bias), res, act) if grad else \
        reference(torch, a, b, bias, act) + (res.to(torch.float64) if res is not None else 0)
    pre_ref = reference(torch, a, b, bias) if pres else None
    state = {"xla_last": None}

    def xla_results():
        last = state["xla_last"]
        return last if isinstance(last, tuple) else (last,)

    def sync():
        torch.cuda.synchronize()
        if state["xla_last"] is not None:
            for x in xla_results():
                x.block_until_ready()

    def nova_fn(i=0):
        nova.matmul(a, b, out=outs["nova"], bias=bias, activation=act, residual=res, preactivation=pres.get("nova"),
                    activation_grad=grad)

    def cublas_fn(i=0):
        product = pres.get("cublas", outs["cublas"])        # A @ B + bias, kept as P when the entry writes it
        if a.dim() == b.dim() == 3:          # strided-batched GEMM
            if bias is None:
                torch.bmm(a, b, out=product)
            else:
                torch.baddbmm(bias, a, b, out=product)
        elif bias is None:
            torch.matmul(a, b, out=product)
        elif a.dim() == b.dim() == 2:
            torch.addmm(bias, a, b, out=product)
        else:                                # a broadcast operand: torch.matmul, then the bias
            torch.matmul(a, b, out=product).add_(bias)
        if grad:                             # the activation's backward (an ATen kernel) at R
            torch.ops.aten.gelu_backward.grad_input(product, res, approximate="tanh", grad_input=outs["cublas"])
        elif res is not None:                # the activation (an ATen kernel), then the residual add
            torch.add(apply_activation(torch, product, act), res, out=outs["cublas"])
        elif act != "none":
            outs["cublas"].copy_(apply_activation(torch, product, act))

    fns = {"nova": nova_fn, "cublas": cublas_fn}
    if jax is not None:
        f = xla_gemm(jax, ta, tb, bias is not None, act, (a.dim() == 3, b.dim() == 3), res is not None, bool(pres),
                     grad)
        xargs = []

        def xla_fn(i=0):
            if not xargs:            # the first call (inside the checks below) moves the operands over
                xargs.extend([to_jax(jax, a.mT if ta else a), to_jax(jax, b.mT if tb else b)] +
                             ([to_jax(jax, bias)] if bias is not None else []) +
                             ([to_jax(jax, res)] if res is not None else []))
            state["xla_last"] = f(*xargs)
        fns["xla"] = xla_fn

    # correctness: each library's first call (loads / compiles / picks its kernel) against float64
    for name, fn in list(fns.items()):
        try:
            fn()
            sync()
        except Exception as e:          # one line per shape; the run goes on
            row[f"{name}_error"] = math.nan
            row[f"{name}_failure"] = _one_line(e)
            del fns[name]
            continue
        got = [torch.from_dlpack(x) for x in xla_results()] if name == "xla" else \
            [outs[name]] + ([pres[name]] if pres else [])
        nans = sum(int(torch.isnan(c).sum().item()) for c in got)   # C, and P where the entry writes it
        row[f"{name}_error"] = max(rel_fro(c, r) for c, r in zip(got, (ref, pre_ref))) if nans == 0 else math.nan
        row[f"{name}_failure"] = f"{nans} outputs never written (NaN)" if nans else ""
    del ref, pre_ref
    if "nova" not in fns:
        row["status"], row["failure"] = "failed", row["nova_failure"]
    elif row["nova_failure"] or not row["nova_error"] <= TOLERANCE[dtype]:
        row["status"] = "failed"
        row["failure"] = row["nova_failure"] or f"error {row['nova_error']:.2e} above the {dtype} tolerance " \
                                                f"{TOLERANCE[dtype]:g}"
    if dtype == "tf32" and "xla" in fns and row["xla_error"] < 1e-5:
        row["xla_failure"] = "note: XLA ran this f32 GEMM in full FP32 precision, not TF32"
        log(f"warning: {row['xla_failure'][6:]} ({M}x{N}x{K}: error {row['xla_error']:.1e})")

    # timing: power steady state, then interleaved rounds of back-to-back calls, wall clock
    row["t_start"] = time.time()
    row["settle_calls"] = settle(torch, list(fns.values()), settle_s, sync) if fns else 0
    reps = {}
    for name, fn in fns.items():
        once = wall_per_call(fn, sync, 2) * 1e-6
        reps[name] = max(3, min(10_000, math.ceil(min_time_s / max(once, 1e-7))))
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(wall_per_call(fn, sync, reps[name]))
    row["t_end"] = time.time()
    flops = 2 * M * N * K * B
    for name in LIBS:
        us = statistics.median(times[name]) if times.get(name) else math.nan
        row[f"{name}_us"] = us
        row[f"{name}_tflops"] = flops / us / 1e6 if us == us else math.nan
        row[f"{name}_reps"] = reps.get(name, 0)
        row[f"{name}_spread"] = (max(times[name]) / min(times[name]) - 1) if times.get(name) else math.nan
    baselines = {n: row[f"{n}_us"] for n in ("cublas", "xla") if not math.isnan(row[f"{n}_us"])}
    row["best"] = min(baselines, key=baselines.get) if baselines else ""
    row["best_us"] = baselines.get(row["best"], math.nan)
    row["ratio"] = row["best_us"] / row["nova_us"] if row["status"] == "ok" else math.nan
    row["ratio_vs_cublas"] = row["cublas_us"] / row["nova_us"] if row["status"] == "ok" else math.nan
    row["ratio_vs_xla"] = row["xla_us"] / row["nova_us"] if row["status"] == "ok" else math.nan
    state["xla_last"] = None
    return row


def activation_grad_reference(torch, product, at, activation: str):
    """``product * act'(at)`` in float64 (an entry with ``activation_grad``: the GELU's tanh form)."""
    if activation != "gelu":
        raise ValueError(f"activation_grad is the GELU's (tanh) backward, not {activation}'s")
    return torch.ops.aten.gelu_backward(product, at.to(torch.float64), approximate="tanh")


def entry_row(entry: dict) -> dict:
    """The entry's fields a result row starts with (``B``, 1 when unbatched, included)."""
    return {k: entry[k] for k in ENTRY_KEYS} | {"B": entry.get("B", 1)} | \
        {k: entry.get(k, False) for k in ("residual", "preactivation", "activation_grad")}


def batched_operand(torch, batch: int, rows: int, cols: int, trans: bool, dtype: str, gen):
    """Fresh ``randn`` [batch, rows, cols] in GEMM mode ``dtype``: the ``.mT`` view of a packed
    [batch, cols, rows] where ``trans``; ``batch`` 0: one 2-D matrix (broadcast over the batch)."""
    from nova.dtypes import torch_dtype
    lead = (batch,) if batch else ()
    x = torch.randn(lead + ((cols, rows) if trans else (rows, cols)), device="cuda", generator=gen)
    x = x.to(torch_dtype(torch, dtype))
    return x.mT if trans else x


# ------------------------------------------------------------------------------ summary
def summarize(rows: list[dict], have_xla: bool) -> dict:
    """Geomeans of ``ratio`` per (role, dtype), per dtype and per (model, dtype), the step-weighted
    ratio (sum of count x time), the worst shape and the verdicts against ``TARGETS``/``FLOOR``."""
    from nova.bench.harness import geomean
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    out = {"baseline": "max(cuBLAS, XLA)" if have_xla else "cuBLAS (XLA n/a)", "per_role": {}, "per_dtype": {},
           "per_model": {}, "verdicts": {}}
    for dt in dtypes:
        rs = [r for r in rows if r["dtype"] == dt]
        ok = [r for r in rs if r["status"] == "ok" and not math.isnan(r["ratio"])]
        for rl in dict.fromkeys(r["role"] for r in rs):
            out["per_role"][f"{rl}/{dt}"] = geomean(r["ratio"] for r in ok if r["role"] == rl)
        for m in dict.fromkeys(r["model"] for r in rs):
            mine = [r for r in ok if r["model"] == m]
            nova_t = sum(r["count"] * r["nova_us"] for r in mine)
            best_t = sum(r["count"] * r["best_us"] for r in mine)
            out["per_model"][f"{m}/{dt}"] = {"geomean": geomean(r["ratio"] for r in mine),
                                             "step_weighted": best_t / nova_t if nova_t else math.nan,
                                             "nova_ms_per_step": nova_t / 1e3, "best_ms_per_step": best_t / 1e3}
        g = geomean(r["ratio"] for r in ok)
        worst = min(ok, key=lambda r: r["ratio"]) if ok else None
        failed = len(rs) - len(ok)
        out["per_dtype"][dt] = {"geomean": g, "shapes": len(rs), "failed": failed,
                                "worst": None if worst is None else
                                {k: worst[k] for k in ("model", "role", "M", "N", "K", "ratio", "best")},
                                "below_floor": sum(r["ratio"] < FLOOR for r in ok)}
        target = TARGETS.get(dt)
        verdict = {"geomean_target": target, "geomean_met": None if target is None else bool(g >= target),
                   "floor_met": not failed and all(r["ratio"] >= FLOOR for r in ok)}
        if failed:
            verdict["note"] = f"{failed} of {len(rs)} shapes without a Nova result (failed or skipped): targets not met"
            verdict["geomean_met"] = False if target is not None else None
        out["verdicts"][dt] = verdict
    return out


def verdict_lines(summary: dict) -> list[str]:
    lines = []
    for dt, v in summary["verdicts"].items():
        d = summary["per_dtype"][dt]
        w = d["worst"]
        worst = "n/a" if w is None else f"{w['ratio']:.3f} ({w['model']} {w['role']} {w['M']}x{w['N']}x{w['K']})"
        target = "" if v["geomean_target"] is None else \
            f" (target >= {v['geomean_target']:g}: {'MET' if v['geomean_met'] else 'NOT MET'})"
        lines.append(f"{dt}: geomean Nova / {summary['baseline']} {d['geomean']:.3f}{target}; worst shape {worst}, "
                     f"{d['below_floor']} below {FLOOR:g} (floor {'MET' if v['floor_met'] else 'NOT MET'})"
                     + (f"; {v['note']}" if v.get("note") else ""))
    return lines


COLUMNS = ["model", "role", "B", "M", "N", "K", "trans_a", "trans_b", "bias", "count", "dtype", "nova_tflops",
           "cublas_tflops", "xla_tflops", "best", "ratio", "nova_us", "cublas_us", "xla_us", "nova_error",
           "cublas_error", "xla_error", "status", "failure"]


def markdown(rows, summary, env, settings) -> str:
    import pandas as pd
    df = pd.DataFrame(rows, columns=COLUMNS)
    head = (f"# Training-step GEMMs: Nova vs cuBLAS vs XLA\n\n{env.get('device')} ({env.get('sms')} SMs), torch "
            f"{env.get('torch')} (CUDA {env.get('cuda')}), jax {env.get('jax', 'n/a')}, Nova {env.get('nova')}, "
            f"{env.get('date')}.  Every GEMM of {settings.get('suite', SUITE)} (`count` launches per step, "
            f"`B` GEMMs per launch); each shape after {settings['settle_s']:g} s of the three back to back, "
            f"then {settings['rounds']} interleaved rounds of back-to-back calls (>= {settings['min_time_s'] * 1e3:g} "
            f"ms each, host wall clock between device synchronisations), median per call.  `ratio` = Nova's "
            f"TFLOP/s / the better of cuBLAS and XLA (`best`).\n\n")
    verdicts = "".join(f"- {line}\n" for line in verdict_lines(summary))
    per_role = "| role/dtype | geomean |\n|---|---|\n" + "".join(
        f"| {k} | {v:.3f} |\n" for k, v in summary["per_role"].items())
    per_model = "| model/dtype | geomean | step-weighted | Nova ms/step | best ms/step |\n|---|---|---|---|---|\n" + \
        "".join(f"| {k} | {v['geomean']:.3f} | {v['step_weighted']:.3f} | {v['nova_ms_per_step']:.2f} | "
                f"{v['best_ms_per_step']:.2f} |\n" for k, v in summary["per_model"].items())
    table = _md_table(df)
    return head + "## Verdicts\n\n" + verdicts + "\n## Geomeans\n\n" + per_role + "\n" + per_model + \
        "\n## Shapes\n\n" + table


def _md_table(df) -> str:
    def cell(v):
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else f"{v:.4g}"
        return str(v)
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ the device run
def run_device(entries, dtypes, out, *, settle_s: float = 1.0, rounds: int = 5, min_time_s: float = 0.02,
               seed: int = 0, budget_s: float = 480.0, log=print, suite: str = SUITE) -> dict:
    """Every entry x dtype (dtype-major); ``train_gemms.json/.csv/.md`` under ``out`` are rewritten
    after every case (a run stopped from outside leaves what it measured).  Once ``budget_s``
    seconds have passed, the remaining cases are recorded as skipped instead of run."""
    from nova.bench.harness import environment, require_torch
    torch = require_torch()          # NoGPUError: one line, exit 1
    env = environment()
    jax = load_jax(log)
    if jax is not None:
        env["jax"] = jax.__version__
        env["jax_device"] = str(jax.devices("gpu")[0])
        env["jax_default_matmul_precision"] = str(getattr(jax.config, "jax_default_matmul_precision", "n/a"))
    settings = {"suite": suite, "dtypes": list(dtypes), "settle_s": settle_s, "rounds": rounds, "min_time_s": min_time_s,
                "seed": seed, "budget_s": budget_s,
                "xla_precision": "lax.Precision.DEFAULT (jax's default: TF32 for f32 on NVIDIA GPUs)"}
    rows, start = [], time.perf_counter()
    cases = [(e, dt) for dt in dtypes for e in entries]
    for i, (e, dt) in enumerate(cases, 1):
        batch = f"{e['B']}x" if e.get("B", 1) > 1 else ""
        shape = f"[{i}/{len(cases)}] {e['model']} {e['role']:<7} {batch}{e['M']}x{e['N']}x{e['K']} {dt}"
        if time.perf_counter() - start > budget_s:
            rows.append(entry_row(e) | {"dtype": dt, "status": "skipped", "ratio": math.nan,
                                                         "failure": f"not run: past the {budget_s:g} s budget"})
            log(f"{shape}: skipped (past the {budget_s:g} s budget)")
            continue
        # the first shape settles 3x longer: the GPU comes out of idle at its boost clock
        try:
            r = bench_case(torch, jax, e, dt, seed=seed + i, settle_s=settle_s * (3 if i == 1 else 1),
                           rounds=rounds, min_time_s=min_time_s, log=log)
        except Exception as ex:       # one line, and the run goes on (the shape counts as failed)
            r = entry_row(e) | {"dtype": dt, "status": "failed", "ratio": math.nan,
                                                 "failure": _one_line(ex)}
            for lib in LIBS:
                r[f"{lib}_tflops"] = math.nan
        rows.append(r)
        torch.cuda.empty_cache()
        speeds = f"cuBLAS {r['cublas_tflops']:.1f}, XLA {r['xla_tflops']:.1f} TFLOP/s"
        if r["status"] != "ok":
            log(f"{shape}: FAILED: {r['failure']}; {speeds}")
        else:
            log(f"{shape}: Nova {r['nova_tflops']:.1f}, {speeds}: ratio {r['ratio']:.3f} (vs {r['best'] or 'n/a'}), "
                f"error {r['nova_error']:.1e}")
        result = write_results(out, rows, env, settings, jax is not None)
    result = write_results(out, rows, env, settings, jax is not None)
    for line in verdict_lines(result["summary"]):
        log(line)
    return result


def write_results(out, rows, env, settings, have_xla: bool) -> dict:
    import pandas as pd
    summary = summarize(rows, have_xla)
    os.makedirs(out, exist_ok=True)
    pd.DataFrame(rows).to_csv(os.path.join(out, "train_gemms.csv"), index=False)
    with open(os.path.join(out, "train_gemms.md"), "w") as f:
        f.write(markdown(rows, summary, env, settings))
    result = {"environment": env, "settings": settings, "summary": summary, "rows": rows}
    with open(os.path.join(out, "train_gemms.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


# ------------------------------------------------------------------------------ command line
def parser() -> argparse.ArgumentParser:
    from nova.cli.common import CliParser
    ap = CliParser(prog="python3 -m nova.bench.train_gemms", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-suite", metavar="FILE",
                      help="capture the training steps of SUITE_STEPS on the meta device (no GPU) and write their "
                           "GEMMs as a suite file")
    mode.add_argument("--list", action="store_true", help="print the suite's entries and the precompile command")
    mode.add_argument("--device", action="store_true", help="check and time the suite on this GPU")
    ap.add_argument("--suite", default=SUITE, help=f"the suite file the other modes read (default {SUITE})")
    ap.add_argument("--dtypes", default="tf32,bf16", help="GEMM modes to time each entry in (default tf32,bf16)")
    ap.add_argument("--models", default=None, help="only these models' entries (comma-separated)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for train_gemms.json/.csv/.md")
    ap.add_argument("--settle-s", type=float, default=1.0,
                    help="seconds of the three libraries back to back before each shape is timed (default 1)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per library and shape (median; default 5)")
    ap.add_argument("--min-time-s", type=float, default=0.02,
                    help="least work in one timed round of back-to-back calls (default 0.02 s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="start no new case after this many seconds; the rest are recorded as skipped (default 480)")
    return ap


def main(argv=None) -> int:
    from nova.cli.common import UsageError, dispatch, dtype_list
    from nova.dtypes import MODES
    from nova.runtime.driver import NovaRuntimeError
    args = parser().parse_args(argv)

    def run() -> int:
        if args.write_suite:
            entries = suite_entries()
            Path(args.write_suite).write_text(suite_text(entries), encoding="utf-8")
            print(f"wrote {len(entries)} GEMMs of {', '.join(m for m, _, _ in SUITE_STEPS)} to {args.write_suite}")
            return 0
        entries = load_suite(args.suite)
        if args.models:
            models = {m.strip() for m in args.models.split(",") if m.strip()}
            entries = [e for e in entries if e["model"] in models]
            if not entries:
                raise ValueError(f"no entry of {args.suite} belongs to {args.models}")
        dtypes = dtype_list(args.dtypes)
        unknown = [d for d in dtypes if d not in MODES]
        if unknown:
            raise UsageError(f"unknown dtype {unknown[0]!r} in --dtypes; choose from {', '.join(MODES)}")
        if args.list:
            for e in entries:
                print(f"{e['model']:8} {e['role']:7} {str(e['B']) + 'x' if e.get('B', 1) > 1 else ''}"
                      f"{e['M']}x{e['N']}x{e['K']} "
                      f"{'T' if e['trans_a'] else 'N'}{'T' if e['trans_b'] else 'N'}"
                      f"{' +bias' if e['bias'] else ''}{' +' + e['activation'] if e['activation'] != 'none' else ''}"
                      f" x{e['count']}")
            print(precompile_command(args.suite, dtypes))
            return 0
        result = run_device(entries, dtypes, args.out, settle_s=args.settle_s, rounds=args.rounds,
                            min_time_s=args.min_time_s, seed=args.seed, budget_s=args.budget_s,
                            log=lambda line: print(line, flush=True), suite=args.suite)
        return 1 if any(r["status"] != "ok" for r in result["rows"]) else 0
    return dispatch("nova.bench.train_gemms", run, (NovaRuntimeError, ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
