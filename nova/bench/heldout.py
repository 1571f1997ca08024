"""Held-out problems: Nova's GEMM and attention kernels on shapes drawn fresh, never tuned on.

    python3 -m nova.bench.heldout gemm --count 100 --seed S --list                        # host: the draw
    python3 -m nova.bench.heldout gemm --count 100 --seed S --precompile --target h200    # host (MLIR): $NOVA_CACHE_DIR
    python3 -m nova.bench.heldout gemm --count 100 --seed S --out DIR                     # GPU, from the cache
    python3 -m nova.bench.heldout attention --count 100 --seed S ...                       # the same for attention

The draw (``gemm_problems``, ``attention_problems``) is a pure function of ``(seed, count)``: the
same pair gives the same problems on any machine, so the host precompiles exactly what the device
then runs.  ``--seed`` defaults to today's date as the integer YYYYMMDD (UTC, ``default_seed``):
a fresh draw every day, reproduced by passing the printed seed.

GEMMs (``HeldoutGemm``), problem ``i`` of the draw: its class cycles through ``GEMM_CLASSES``, its
layout through NN / NT (``trans_b``) / TN (``trans_a``) every ``len(GEMM_CLASSES)`` problems and its
dtype through tf32 / bf16 every ``3 * len(GEMM_CLASSES)`` (so any 24 consecutive problems hold every
combination); sizes are log-uniform in the class's ranges (``GEMM_CLASSES``):

* ``decode``: M in [1, 16] (a token batch), N and K in [256, 16384];
* ``square``: one size s in [256, 8192], M, N, K each within a factor 1.25 of s;
* ``deep-K``: M, N in [256, 2048], K in [8192, 65536];
* ``general``: M in [1, 16384], N and K in [256, 16384].

A fixed fraction ``ODD_FRACTION`` of the problems (the first ``round(count * ODD_FRACTION)`` of a
seeded permutation) is *odd*: every dimension drawn above 16 is moved off the multiples of 8 (so off
64 and 128 as well); the others round every dimension above 16 to a multiple of 64.

Attention (``HeldoutAttention``): the class cycles through ``ATTENTION_CLASSES``, the dtype through
bf16 / tf32; D is 64 or 128, causal half the time; Hkv in [1, 8], H = Hkv x the GQA ratio (1, or
2, 4, 8 for the ``GQA`` class); B in [1, 32], then B and H are reduced until B*H*Tq*Tk is within
``SCORE_BUDGET`` (the float64 reference materialises the scores).  A second stream of the same seed
(so the shapes of a seed never change with it) turns ``FP16_FRACTION`` of the bf16 problems into fp16
and gives ``MASK_FRACTION`` of all a key-padding mask: each batch element's keys past a length drawn in
[Tk/4, Tk] get the score bias ``MASKED`` (``[B, 1, 1, Tk]``; the libraries take it as ``attn_mask``,
with the causal triangle added where the problem is causal):

* ``square``: Tq = Tk in [128, 2048];  ``ragged``: Tq and Tk independent in [33, 4096];
* ``long-T``: Tq = Tk in [4096, 8192];  ``decode``: Tq in [1, 16], Tk in [512, 8192];
* ``GQA``: Tq = Tk in [128, 4096], ratio 2, 4 or 8.

Odd problems have T off the multiples of 8; the others multiples of 64 (T above 16).

The device run (``run``), per problem: correctness first, then timing; a problem whose Nova result
is wrong or missing is *failed* and excluded from the ratios.

* GEMM: ``nova.bench.train_gemms.bench_case`` (fresh ``randn`` operands in the stored layout,
  Nova's output NaN-poisoned, float64 reference, ``harness.TOLERANCE``; then the libraries settled
  and timed in interleaved rounds of back-to-back calls by the host's wall clock): Nova vs cuBLAS
  (``torch.matmul``) and XLA (``lax.dot_general``, when jax with a GPU is importable); ``ratio`` =
  best library's time / Nova's (eager: what a caller sees).  Nova and cuBLAS are also timed by
  CUDA-graph replay (``harness.graph_replay``, ``GRAPH_CALLS`` calls per graph: device time;
  ``ratio_device`` = cuBLAS's / Nova's; XLA is not captured), Nova's after ``GRAPH_SETTLE_S`` of
  untimed replays (the power-capped clock), and ``gemm_prediction`` stands next to it: the
  calibrated time (``Config.calibrated_time_us``, what ``nova-config explain`` reports), with the
  model's (``model_us``) and the calibration's clock beside it.
* Attention: q, k, v, dout fresh ``randn``; Nova's out, lse, dq, dk, dv NaN-poisoned, compared with
  float64 autograd (relative Frobenius error, the bounds of tests/test_attention_gpu.py); Nova and
  every torch SDPA backend (flash, cudnn, efficient, math; ``enable_gqa`` for GQA) timed forward +
  backward twice: eager (``nova.bench.attention.event_time_us`` over back-to-back calls, the host's
  Python path included: ``ratio`` = the fastest backend / Nova) and by CUDA-graph replay
  (``GRAPH_CALLS`` calls per graph: ``ratio_device``; a backend whose capture fails keeps only its
  eager figure, the error recorded).  The prediction (``attention_prediction``) is split in two
  kernels' worth: forward (``fwd``) vs the forward's graph time, backward (``bwd_pre + bwd_dkv +
  bwd_dq``) vs the backward's.

The SM clock is sampled through the run (nvidia-smi): each row's ``nova_graph_sm_mhz`` is its median
during Nova's timed replays.  ``python3 -m nova.bench.heldout_replay DIR`` puts a results folder's
rows through today's models (before/after a model change).

The report (``summarize``): per class, per layout (GEMM), per dtype, for the odd problems and
overall: the geomean of ``ratio`` (Nova's speed over the best library's) and of ``ratio_device``,
the first's 10th percentile (``percentile``: linear interpolation between order statistics), the
worst problem, the failures,
and the fraction of kernels whose prediction is within ``PREDICTION_BAND`` (+-15%) of the measured
device time.  Files: ``heldout_<kind>.json`` (settings, summary, rows) and ``heldout_<kind>.md``,
rewritten after every problem.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import sys
from dataclasses import asdict, dataclass, fields

ODD_FRACTION = 0.25
PREDICTION_BAND = 0.15
GRAPH_CALLS = 20              # calls captured in one CUDA graph: device time per call, the graph's own launch spread
GRAPH_SETTLE_S = 1.5          # untimed replays before Nova's timed ones: the clock falls to the power-capped one over
                              # ~1.5 s (bench/NOTES.md, v0.6), the clock the calibrated GEMM prediction assumes
SCORE_BUDGET = 2**28          # B*H*Tq*Tk: the float64 reference holds a few tensors of this many doubles
LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False)}     # name: (trans_a, trans_b)
GEMM_DTYPES = ("tf32", "bf16")
ATTENTION_DTYPES = ("bf16", "tf32")
FP16_FRACTION = 1 / 3         # attention: the share of the bf16 draws that run in fp16 instead
MASK_FRACTION = 0.25          # attention: the share of the draws with a key-padding mask (an additive score bias)
MASKED = -1e4                 # a padded key's score bias: nova.attention clamps the bias there (problem.py), so the
                              # libraries, Nova and the float64 reference all see the same scores
# class: {dimension: (low, high)} drawn log-uniform; "square" draws one size and jitters it
GEMM_CLASSES = {
    "decode": {"M": (1, 16), "N": (256, 16384), "K": (256, 16384)},
    "square": {"S": (256, 8192)},
    "deep-K": {"M": (256, 2048), "N": (256, 2048), "K": (8192, 65536)},
    "general": {"M": (1, 16384), "N": (256, 16384), "K": (256, 16384)},
}
SQUARE_JITTER = 1.25
ATTENTION_CLASSES = {
    "square": {"Tq": (128, 2048)},
    "ragged": {"Tq": (33, 4096), "Tk": (33, 4096)},
    "long-T": {"Tq": (4096, 8192)},
    "decode": {"Tq": (1, 16), "Tk": (512, 8192)},
    "GQA": {"Tq": (128, 4096)},
}
GQA_RATIOS = (2, 4, 8)
ATTENTION_TOLERANCE = {"tf32": (4e-3, 1e-2), "fp16": (4e-3, 1e-2), "bf16": (2.5e-2, 5e-2)}   # (out, grads)
KINDS = ("gemm", "attention")


@dataclass(frozen=True)
class HeldoutGemm:
    index: int
    klass: str
    layout: str
    dtype: str
    odd: bool
    M: int
    N: int
    K: int

    @property
    def trans_a(self) -> bool:
        return LAYOUTS[self.layout][0]

    @property
    def trans_b(self) -> bool:
        return LAYOUTS[self.layout][1]

    def problem(self):
        """The ``GemmProblem`` ``nova.matmul`` states for this draw (no epilogue, output in the input storage):
        a transposed operand of one row or column is row-major too, and the runtime states it so
        (``tensors.gemm_operand``), so the host precompiles what the device looks up."""
        from nova.kernels.gemm.problem import GemmProblem
        from nova.runtime.tensors import is_c_contiguous
        trans_a = self.trans_a and not is_c_contiguous((self.M, self.K), (1, self.M))
        trans_b = self.trans_b and not is_c_contiguous((self.K, self.N), (1, self.K))
        return GemmProblem(self.M, self.N, self.K, self.dtype, trans_a, trans_b)

    def describe(self) -> str:
        return f"#{self.index} {self.klass} {self.layout} {self.M}x{self.N}x{self.K} {self.dtype}{' odd' if self.odd else ''}"


@dataclass(frozen=True)
class HeldoutAttention:
    index: int
    klass: str
    dtype: str
    odd: bool
    B: int
    H: int
    Hkv: int
    Tq: int
    Tk: int
    D: int
    causal: bool
    mask: bool = False            # a key-padding mask: a contiguous [B, 1, 1, Tk] FP32 score bias

    def problem(self):
        """The ``AttentionProblem`` ``nova.attention`` states for contiguous operands of this draw."""
        from nova.kernels.attention.problem import AttentionProblem, score_precision_for
        return AttentionProblem(self.B, self.H, self.Tq, self.Tk, self.D, causal=self.causal, dtype=self.dtype,
                                kv_heads=self.Hkv, score_precision=score_precision_for(self.dtype),
                                bias=(self.Tk, 0, 0, 1) if self.mask else ())

    def describe(self) -> str:
        return (f"#{self.index} {self.klass} B{self.B} H{self.H}/{self.Hkv} T{self.Tq}x{self.Tk} D{self.D}"
                f"{' causal' if self.causal else ''}{' mask' if self.mask else ''} {self.dtype}"
                f"{' odd' if self.odd else ''}")


# ------------------------------------------------------------------------------ the draw (pure)
def default_seed(today: datetime.date | None = None) -> int:
    """Today's date (UTC) as YYYYMMDD: the seed when ``--seed`` is not given."""
    d = today or datetime.datetime.now(datetime.timezone.utc).date()
    return d.year * 10000 + d.month * 100 + d.day


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer in [low, high] whose logarithm is uniform."""
    return min(high, max(low, int(round(math.exp(rng.uniform(math.log(low), math.log(high + 0.5)))))))


def shape_size(rng: random.Random, value: int, odd: bool, low: int, high: int) -> int:
    """``value`` moved to the layout of its problem: sizes up to 16 stay; above, an odd problem's size
    off the multiples of 8 (a seeded step of 1..7, kept inside [low, high]), else the nearest multiple
    of 64 inside [low, high] (``value`` itself when no multiple of 64 lies there)."""
    if value <= 16:
        return value
    if odd:
        if value % 8 == 0:
            step = rng.randint(1, 7)
            value = value + step if value + step <= high else value - step
        return value
    lo, hi = -(-low // 64) * 64, high // 64 * 64
    return min(hi, max(lo, round(value / 64) * 64)) if lo <= hi else value


def odd_indices(rng: random.Random, count: int) -> set[int]:
    """The ``round(count * ODD_FRACTION)`` odd problems: the first of a seeded permutation."""
    order = list(range(count))
    rng.shuffle(order)
    return set(order[:round(count * ODD_FRACTION)])


def _check_draw(seed, count):
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"the seed must be a non-negative integer, got {seed!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"the count must be a positive integer, got {count!r}")


def gemm_problems(seed: int, count: int) -> list[HeldoutGemm]:
    """``count`` GEMMs drawn with ``seed`` (module docstring): the same pair, the same list."""
    _check_draw(seed, count)
    rng = random.Random(f"nova-heldout-gemm-{seed}")
    odd = odd_indices(rng, count)
    classes, layouts = list(GEMM_CLASSES), list(LAYOUTS)
    out = []
    for i in range(count):
        klass = classes[i % len(classes)]
        layout = layouts[(i // len(classes)) % len(layouts)]
        dtype = GEMM_DTYPES[(i // (len(classes) * len(layouts))) % len(GEMM_DTYPES)]
        ranges = GEMM_CLASSES[klass]
        if klass == "square":
            lo, hi = ranges["S"]
            s = log_uniform(rng, lo, hi)
            raw = {d: min(hi, max(lo, int(s * SQUARE_JITTER ** rng.uniform(-1, 1)))) for d in "MNK"}
            bounds = {d: (lo, hi) for d in "MNK"}
        else:
            raw = {d: log_uniform(rng, *ranges[d]) for d in "MNK"}
            bounds = dict(ranges)
        dims = {d: shape_size(rng, raw[d], i in odd, *bounds[d]) for d in "MNK"}
        out.append(HeldoutGemm(i, klass, layout, dtype, i in odd, dims["M"], dims["N"], dims["K"]))
    return out


def attention_problems(seed: int, count: int) -> list[HeldoutAttention]:
    """``count`` attention problems drawn with ``seed`` (module docstring)."""
    _check_draw(seed, count)
    rng = random.Random(f"nova-heldout-attention-{seed}")
    extra = random.Random(f"nova-heldout-attention-extra-{seed}")     # fp16 and masks: the shapes stay the seed's
    odd = odd_indices(rng, count)
    classes = list(ATTENTION_CLASSES)
    out = []
    for i in range(count):
        klass = classes[i % len(classes)]
        dtype = ATTENTION_DTYPES[(i // len(classes)) % len(ATTENTION_DTYPES)]
        ranges = ATTENTION_CLASSES[klass]
        tq = shape_size(rng, log_uniform(rng, *ranges["Tq"]), i in odd, *ranges["Tq"])
        tk = shape_size(rng, log_uniform(rng, *ranges["Tk"]), i in odd, *ranges["Tk"]) if "Tk" in ranges else tq
        ratio = rng.choice(GQA_RATIOS) if klass == "GQA" else 1
        hkv = log_uniform(rng, 1, 8)
        batch = log_uniform(rng, 1, 32)
        d = rng.choice((64, 128))
        causal = rng.random() < 0.5
        while batch * hkv * ratio * tq * tk > SCORE_BUDGET and (batch > 1 or hkv > 1):
            if batch > 1:
                batch //= 2
            else:
                hkv //= 2
        fp16, mask = extra.random() < FP16_FRACTION, extra.random() < MASK_FRACTION
        dtype = "fp16" if dtype == "bf16" and fp16 else dtype
        out.append(HeldoutAttention(i, klass, dtype, i in odd, batch, hkv * ratio, hkv, tq, tk, d, causal, mask))
    return out


def draw(kind: str, seed: int, count: int) -> list:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose gemm or attention")
    return gemm_problems(seed, count) if kind == "gemm" else attention_problems(seed, count)


# ------------------------------------------------------------------------------ the report (pure)
def percentile(values, q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``: linear interpolation between the order
    statistics at rank ``q/100 * (n - 1)`` (numpy's default); NaN for no values."""
    xs = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not xs:
        return math.nan
    pos = q / 100 * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def within_band(predicted_us, measured_us, band: float = PREDICTION_BAND) -> bool | None:
    """Whether ``predicted / measured - 1`` lies within +-``band``; None when either is missing."""
    if predicted_us is None or measured_us is None or not measured_us > 0 or math.isnan(predicted_us):
        return None
    return abs(predicted_us / measured_us - 1) <= band


def group_stats(rows: list[dict]) -> dict:
    """Geomean, 10th percentile and worst ``ratio`` (eager) of the ok rows, the geomean of ``ratio_device``
    (device time, CUDA-graph replay; NaN where no row has one), failures, and the fraction of the rows'
    kernels (``predictions``: [(predicted, measured)]) predicted within the band."""
    from nova.bench.harness import geomean
    ok = [r for r in rows if r.get("status") == "ok" and r.get("ratio") is not None and not math.isnan(r["ratio"])]
    worst = min(ok, key=lambda r: r["ratio"]) if ok else None
    checks = [within_band(p, m) for r in rows for p, m in r.get("predictions", ())]
    checks = [c for c in checks if c is not None]
    return {"problems": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "geomean": geomean(r["ratio"] for r in ok), "p10": percentile([r["ratio"] for r in ok], 10),
            "device_geomean": geomean(r.get("ratio_device") for r in ok),
            "worst": None if worst is None else worst["ratio"],
            "worst_problem": None if worst is None else worst["describe"],
            "kernels_predicted": len(checks),
            "prediction_within_band": (sum(checks) / len(checks)) if checks else math.nan}


def summarize(rows: list[dict]) -> dict:
    """``group_stats`` overall and per class, layout (GEMM), dtype and for the odd and the masked problems."""
    groups = {"overall": rows}
    for key in ("klass", "layout", "dtype"):
        for value in dict.fromkeys(r[key] for r in rows if key in r):
            groups[f"{key.replace('klass', 'class')}={value}"] = [r for r in rows if r.get(key) == value]
    for flag in ("odd", "mask"):
        if any(r.get(flag) for r in rows):
            groups[flag] = [r for r in rows if r.get(flag)]
    return {name: group_stats(rs) for name, rs in groups.items()}


def markdown(kind: str, summary: dict, rows: list[dict], settings: dict, env: dict) -> str:
    def f(v, spec=".3f"):
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
    head = (f"# Held-out {kind} problems: Nova vs the best library\n\n{env.get('device')}, torch {env.get('torch')}, "
            f"jax {env.get('jax', 'n/a')}, Nova {env.get('nova')}, {env.get('date')}.  Seed {settings['seed']}, "
            f"{settings['count']} problems (`python3 -m nova.bench.heldout {kind} --count {settings['count']} --seed "
            f"{settings['seed']}`).  `ratio` = best library's time / Nova's (> 1: Nova faster), eager (calls back to "
            f"back: what a caller sees, host included); `device` = the same by CUDA-graph replay (device time; "
            f"libraries that cannot be captured are left out); prediction within +-{PREDICTION_BAND:.0%} of the "
            f"measured device time (graph replay).\n\n")
    table = ["| group | problems | failed | geomean | device geomean | p10 | worst | worst problem | "
             "kernels predicted within band |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        table.append(f"| {name} | {s['problems']} | {s['failed']} | {f(s['geomean'])} | {f(s.get('device_geomean'))} "
                     f"| {f(s['p10'])} | {f(s['worst'])} | {s['worst_problem'] or 'n/a'} | "
                     f"{f(s['prediction_within_band'], '.0%')} of {s['kernels_predicted']} |")
    lines = ["| problem | status | best | ratio | device ratio | Nova us | best us | predicted / measured | SM MHz | "
             "error | eager call's kernel, predicted us a call | failure |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        preds = ", ".join(f"{p:.1f}/{m:.1f}" for p, m in r.get("predictions", ()) if p is not None and m is not None)
        eager = "n/a" if r.get("eager_schedule") is None else (
            f"{'the same' if r['eager_schedule'] == r.get('schedule') else r['eager_schedule']}, "
            f"{f(r.get('eager_predicted_us'), '.1f')}")
        lines.append(f"| {r['describe']} | {r['status']} | {r.get('best') or 'n/a'} | {f(r.get('ratio'))} | "
                     f"{f(r.get('ratio_device'))} | {f(r.get('nova_us'), '.1f')} | {f(r.get('best_us'), '.1f')} | "
                     f"{preds or 'n/a'} | {f(r.get('nova_graph_sm_mhz'), '.0f')} | {f(r.get('nova_error'), '.1e')} | "
                     f"{eager} | {r.get('failure', '')} |")
    return head + "## Summary\n\n" + "\n".join(table) + "\n\n## Problems\n\n" + "\n".join(lines) + "\n"


def write_results(out: str, kind: str, rows, settings, env) -> dict:
    summary = summarize(rows)
    os.makedirs(out, exist_ok=True)
    result = {"environment": env, "settings": settings, "summary": summary, "rows": rows}
    with open(os.path.join(out, f"heldout_{kind}.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    with open(os.path.join(out, f"heldout_{kind}.md"), "w") as fh:
        fh.write(markdown(kind, summary, rows, settings, env))
    return result


# ------------------------------------------------------------------------------ precompile (host, MLIR)
def precompile(kind: str, problems, target: str, log=print, cache=None) -> dict:
    """Configure and compile every drawn problem's Nova kernels for ``target`` into ``cache`` (default the
    kernel cache of ``$NOVA_CACHE_DIR``); returns the counts (compiled, cached, failed) and prints them."""
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), cache or KernelCache()
    if kind == "gemm":
        from nova.runtime.matmul import precompile_gemms
        counts = precompile_gemms([h.problem() for h in problems], gpu, cache, log=log)
    else:
        from nova.kernels.attention.compile import precompile_attention
        counts = {"compiled": 0, "cached": 0, "failed": 0}
        for i, h in enumerate(problems, 1):
            try:
                entries = precompile_attention(h.problem(), gpu, cache)
            except Exception as e:          # reported and counted; the batch goes on
                counts["failed"] += 1
                log(f"[{i}/{len(problems)}] {h.describe()}: FAILED: {type(e).__name__}: {e}")
                continue
            for _, _, status in entries:
                counts[status] += 1
            log(f"[{i}/{len(problems)}] {h.describe()}: " + ", ".join(f"{r} {s}" for r, _, s in entries))
    log(f"{kind}: {counts['compiled'] + counts['cached']} kernels in {cache.root if hasattr(cache, 'root') else 'the cache'} "
        f"({counts['compiled']} compiled, {counts['cached']} already cached), {counts['failed']} failed")
    return counts


# ------------------------------------------------------------------------------ the device run
def drawn(kind: str, row: dict) -> "HeldoutGemm | HeldoutAttention":
    """The ``HeldoutGemm`` / ``HeldoutAttention`` a result row was measured on."""
    cls = HeldoutGemm if kind == "gemm" else HeldoutAttention
    return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})     # rows before a field: its default


def gemm_config(h: HeldoutGemm, target, kernel: str | None = None, schedule: str | None = None):
    """The ``Config`` a drawn GEMM is priced as: ``schedule``, a label a run measured, where today's
    space still has it (``space.measured_config``), else ``configure``'s pick for ``kernel`` (None: the
    one it picks; "tiles": the tensor-core tiles)."""
    from nova.configurator import configure
    from nova.kernels.gemm.space import measured_config
    cfg = measured_config(h.problem(), target, schedule) if schedule else None
    return cfg if cfg is not None else configure(h.problem(), target, kernel=kernel)


def gemm_prediction(h: HeldoutGemm, target, kernel: str | None = None, schedule: str | None = None) -> dict:
    """The configurator's prediction for a drawn GEMM (``gemm_config``): ``predicted_us``, the calibrated
    time where the target has a calibration (``Config.calibrated_time_us``: what ``nova-config explain``
    reports), else the model's; ``model_us`` the model's; ``predicted_clock_mhz`` the calibration's SM
    clock; ``kernel`` ("tiles" or "skinny") and ``schedule`` (its label): what a captured call runs;
    ``eager_schedule`` what an eager call runs (``configure(eager=True)``) and ``eager_predicted_us``
    its predicted time a call, the host's included (``eager.eager_time_us``)."""
    from nova.configurator import configure
    from nova.kernels.gemm.eager import eager_time_us
    from nova.kernels.gemm.space import label
    cfg = gemm_config(h, target, kernel, schedule)
    calibrated = cfg.calibrated_time_us
    row = {"predicted_us": cfg.prediction.time_us if calibrated is None else calibrated,
           "model_us": cfg.prediction.time_us, "predicted_clock_mhz": cfg.calibrated_clock_mhz,
           "kernel": cfg.schedule.kernel, "schedule": label(cfg.schedule)}
    if kernel is None and schedule is None:
        eager = configure(h.problem(), target, eager=True)
        row.update(eager_schedule=label(eager.schedule),
                   eager_predicted_us=eager_time_us(eager.target, eager.time_us, eager.schedule.launches))
    return row


def attention_prediction(h: HeldoutAttention, target, options=None, splits: dict | None = None) -> dict:
    """The configurator's prediction for a drawn attention problem, two calls' worth: the forward
    (``predicted_fwd_us``) and the backward's three kernels (``predicted_bwd_us``: bwd_pre + bwd_dkv +
    bwd_dq), each with its split-KV combine where the schedule splits it, each kernel its device time
    in a CUDA graph (``nova/kernels/attention/device_time.py``); ``splits``: the forward's, dQ's and
    dK/dV's (1: unsplit).  ``options``, ``splits``: ``configure_attention``'s (None: the environment's,
    the derivation's).  The splits decide the kernels themselves, so a replay gives the ones a run
    measured (``splits_ran``)."""
    from nova.kernels.attention.derive import configure_attention
    cfg = configure_attention(h.problem(), target, options=options, splits=splits)
    terms, s = cfg.prediction.terms_us, cfg.schedule
    return {"predicted_fwd_us": sum(terms[r] for r in s.with_combines(("fwd",))),
            "predicted_bwd_us": sum(terms[r] for r in s.with_combines(("bwd_pre", "bwd_dkv", "bwd_dq"))),
            "splits": [s.fwd.splits, s.bwd_dq.splits, s.bwd_dkv.splits]}


def splits_ran(row: dict) -> dict | None:
    """The split counts a recorded attention row ran ({role: count} for ``configure_attention``), None
    for a row from before they were recorded: [forward, dQ] or [forward, dQ, dK/dV]."""
    recorded = row.get("splits")
    return None if recorded is None else dict(zip(("fwd", "bwd_dq", "bwd_dkv"), recorded))


def one_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def gemm_row(torch, jax, h: HeldoutGemm, *, seed: int, settle_s: float, rounds: int, min_time_s: float, log,
             graph_calls: int = GRAPH_CALLS, graph_settle_s: float = GRAPH_SETTLE_S, cold_l2_bytes: int = 0) -> dict:
    """One drawn GEMM: ``train_gemms.bench_case`` (correctness, then Nova / cuBLAS / XLA by the host's
    wall clock: ``ratio``, what a caller sees, Nova's eager call's kernel), then Nova and cuBLAS by
    CUDA-graph replay (device time, ``ratio_device``; Nova's ``eager=False`` kernel, checked against
    float64 first, ``nova_graph_error``, and timed after ``graph_settle_s`` of untimed replays), the
    configurator's prediction beside Nova's (``gemm_prediction``).  ``cold_l2_bytes`` > 0: the device times with the L2 flushed
    before every call (``harness.cold_graph_replay``), for both libraries."""
    import nova
    from nova.bench.harness import (TOLERANCE, cold_graph_replay, graph_replay, nan_output, random_operands,
                                    reference, rel_fro)
    from nova.bench.train_gemms import bench_case
    from nova.runtime.matmul import resolve_target

    def replay(fn, reps, settle_s=0.0):
        if cold_l2_bytes > 0:
            return cold_graph_replay(torch, fn, reps, cold_l2_bytes, settle_s=settle_s)
        return graph_replay(torch, fn, reps, settle_s=settle_s)
    entry = {"model": "heldout", "batch": 1, "seq": 0, "M": h.M, "N": h.N, "K": h.K, "trans_a": h.trans_a,
             "trans_b": h.trans_b, "role": h.layout, "count": 1, "bias": False, "activation": "none"}
    row = bench_case(torch, jax, entry, h.dtype, seed=seed, settle_s=settle_s, rounds=rounds,
                     min_time_s=min_time_s, log=log)
    row.update(asdict(h), describe=h.describe())
    row.update(gemm_prediction(h, resolve_target()))
    row["nova_graph_us"] = row["cublas_graph_us"] = row["ratio_device"] = None
    if row["status"] == "ok":
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a, b = random_operands(torch, h.M, h.N, h.K, h.dtype, gen, h.trans_a, h.trans_b)
        c = nan_output(torch, h.M, h.N, h.dtype)
        nova.matmul(a, b, out=c, eager=False)         # the captured call's kernel, checked before it is timed
        row["nova_graph_error"] = rel_fro(c, reference(torch, a, b))
        if not row["nova_graph_error"] <= TOLERANCE[h.dtype]:
            row["status"], row["failure"] = "failed", (f"the captured call's kernel: error {row['nova_graph_error']:.1e} "
                                                       f"above {TOLERANCE[h.dtype]:g}")
        row["nova_graph_us"], row["nova_graph_window"] = replay(
            lambda i: nova.matmul(a, b, out=c, eager=False), graph_calls, settle_s=graph_settle_s)
        try:
            row["cublas_graph_us"], _ = replay(lambda i: torch.matmul(a, b, out=c), graph_calls)
            row["ratio_device"] = row["cublas_graph_us"] / row["nova_graph_us"]
        except Exception as e:           # recorded; the eager ratio stands
            row["cublas_graph_error"] = one_line(e)
        del a, b, c
    row["predictions"] = [(row["predicted_us"], row["nova_graph_us"])]
    return row


def attention_reference(torch, q, k, v, do, causal, bias=None):
    """out, lse, dq, dk, dv in float64 (k and v repeated over the GQA groups; ``bias`` added to the scores)."""
    qd, kd, vd = (x.double().detach().requires_grad_() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = (qd @ kd.repeat_interleave(g, dim=1).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias.double()
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril(), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ vd.repeat_interleave(g, dim=1)
    out.backward(do.double())
    return out.detach(), lse.detach(), qd.grad, kd.grad, vd.grad


def padding_bias(torch, h: HeldoutAttention, gen):
    """A masked draw's ``[B, 1, 1, Tk]`` FP32 score bias (0, or ``MASKED`` past each batch element's
    length, drawn in [Tk/4, Tk]: key 0 always visible, so no row is masked whole), else None."""
    if not h.mask:
        return None
    lengths = torch.randint(max(1, h.Tk // 4), h.Tk + 1, (h.B, 1), device=gen.device, generator=gen)
    keys = torch.arange(h.Tk, device=gen.device)
    return torch.where(keys < lengths, 0.0, MASKED).float().reshape(h.B, 1, 1, h.Tk)


def library_mask(torch, h: HeldoutAttention, bias, dtype):
    """What SDPA takes for a masked draw: ``attn_mask`` in the operands' dtype (the causal triangle added:
    SDPA takes ``attn_mask`` or ``is_causal``, not both), else None."""
    if bias is None:
        return None
    if h.causal:
        visible = torch.ones(h.Tq, h.Tk, dtype=torch.bool, device=bias.device).tril()
        bias = bias + torch.where(visible, 0.0, MASKED).float()
    return bias.to(dtype)


def attention_row(torch, h: HeldoutAttention, *, seed: int, iters: int, graph_calls: int = GRAPH_CALLS,
                  graph_settle_s: float = GRAPH_SETTLE_S) -> dict:
    """One drawn attention problem: correctness against float64, then Nova and every torch SDPA
    backend forward + backward, each timed twice: eager, ``iters`` calls back to back between CUDA
    events (``ratio``: what a caller sees, the host's Python path included), and its device time,
    ``graph_calls`` calls captured in one CUDA graph (``ratio_device``; Nova's forward and backward
    graphs apart, after ``graph_settle_s`` of untimed replays; a backend whose capture fails keeps its
    eager figure and the error); the prediction beside Nova's forward and backward graph times."""
    import nova
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from nova.bench.attention import TORCH_DTYPE, event_time_us
    from nova.bench.harness import graph_replay, rel_fro
    from nova.runtime.matmul import resolve_target
    row = asdict(h) | {"describe": h.describe(), "status": "ok", "failure": ""}
    dt = getattr(torch, TORCH_DTYPE[h.dtype])
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(h.B, h.H, h.Tq, h.D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    k, v = (torch.randn(h.B, h.Hkv, h.Tk, h.D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    bias = padding_bias(torch, h, gen)
    mask, is_causal = library_mask(torch, h, bias, dt), h.causal and bias is None
    nan = float("nan")
    out, lse = torch.full_like(q, nan), torch.full((h.B, h.H, h.Tq), nan, device="cuda")
    dq, dk, dv = torch.full_like(q, nan), torch.full_like(k, nan), torch.full_like(v, nan)
    try:
        nova.attention(q, k, v, causal=h.causal, bias=bias, out=out, lse=lse)
        nova.attention_backward(do, q, k, v, out, lse, causal=h.causal, bias=bias, dq=dq, dk=dk, dv=dv)
        torch.cuda.synchronize()
    except Exception as e:           # one line; the run goes on
        return row | {"status": "failed", "failure": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      "ratio": math.nan, "predictions": []}
    ref = attention_reference(torch, q, k, v, do, h.causal, bias)
    floor = 0.1 * float(ref[4].norm())        # dQ/dK exactly 0 (one key): measured against |dV|/10
    errs = {}
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, dq, dk, dv), ref):
        e = rel_fro(got, want)
        if name in ("dq", "dk") and not math.isnan(e):
            e = float((got.double() - want).norm()) / max(float(want.norm()), floor)
        errs[name] = e
    del ref
    t_out, t_grad = ATTENTION_TOLERANCE[h.dtype]
    row.update({f"error_{n}": e for n, e in errs.items()})
    row["nova_error"] = max(errs.values())
    if any(math.isnan(e) for e in errs.values()):
        row["status"], row["failure"] = "failed", "NaN in an output (never written)"
    elif max(errs["out"], errs["lse"]) >= t_out or max(errs["dq"], errs["dk"], errs["dv"]) >= t_grad:
        row["status"], row["failure"] = "failed", "error above tolerance: " + ", ".join(f"{n} {e:.1e}" for n, e in errs.items())
    row.update(attention_prediction(h, resolve_target()))
    if row["status"] != "ok":
        return row | {"ratio": math.nan, "predictions": []}

    def nova_step():
        o, l_ = nova.attention(q, k, v, causal=h.causal, bias=bias)
        nova.attention_backward(do, q, k, v, o, l_, causal=h.causal, bias=bias)
    row["nova_us"] = event_time_us(nova_step, iters)          # eager: the host's Python path included
    row["nova_fwd_graph_us"], row["nova_graph_window"] = graph_replay(
        torch, lambda i: nova.attention(q, k, v, causal=h.causal, bias=bias, out=out, lse=lse), graph_calls,
        settle_s=graph_settle_s)
    row["nova_bwd_graph_us"], _ = graph_replay(torch, lambda i: nova.attention_backward(
        do, q, k, v, out, lse, causal=h.causal, bias=bias, dq=dq, dk=dk, dv=dv), graph_calls)
    row["nova_graph_us"] = row["nova_fwd_graph_us"] + row["nova_bwd_graph_us"]
    row["predictions"] = [(row["predicted_fwd_us"], row["nova_fwd_graph_us"]),
                          (row["predicted_bwd_us"], row["nova_bwd_graph_us"])]
    eager, device = {}, {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)):
        qa, ka, va = (x.detach().clone().requires_grad_() for x in (q, k, v))

        def step():
            F.scaled_dot_product_attention(qa, ka, va, attn_mask=mask, is_causal=is_causal,
                                           enable_gqa=h.H != h.Hkv).backward(do)

        def graph_step(i):
            o_ = F.scaled_dot_product_attention(qa, ka, va, attn_mask=mask, is_causal=is_causal,
                                                enable_gqa=h.H != h.Hkv)
            torch.autograd.grad(o_, (qa, ka, va), do)
        calls = max(3, iters // 4) if name == "math" else iters
        try:
            with sdpa_kernel([be]):
                eager[name] = row[f"torch_{name}_us"] = event_time_us(step, calls)
        except Exception as e:           # a backend that refuses the problem: recorded
            row[f"torch_{name}_us"] = None
            row[f"torch_{name}_error"] = one_line(e)
            continue
        try:                             # forward + backward captured in one graph: the backend's device time
            with sdpa_kernel([be]):
                us, _ = graph_replay(torch, graph_step, max(3, graph_calls // 4) if name == "math" else graph_calls)
            device[name] = row[f"torch_{name}_graph_us"] = us
        except Exception as e:           # capture refused: recorded, the eager figure stands
            row[f"torch_{name}_graph_us"] = None
            row[f"torch_{name}_graph_error"] = one_line(e)
    row["best"] = min(eager, key=eager.get) if eager else ""
    row["best_us"] = eager.get(row["best"], math.nan)
    row["ratio"] = row["best_us"] / row["nova_us"]
    row["best_device"] = min(device, key=device.get) if device else ""
    row["best_device_us"] = device.get(row["best_device"], math.nan)
    row["ratio_device"] = row["best_device_us"] / row["nova_graph_us"]
    return row


def window_clock_mhz(samples, window) -> float | None:
    """Median SM clock (MHz) of the ``ClockSampler`` samples inside ``window`` (unix times), or None."""
    import statistics
    if not window:
        return None
    inside = [s[1] for s in samples if window[0] <= s[0] <= window[1]]
    return statistics.median(inside) if inside else None


def run(kind: str, problems, out: str, *, seed: int, count: int, settle_s: float = 0.5, rounds: int = 5,
        min_time_s: float = 0.02, iters: int = 20, graph_calls: int = GRAPH_CALLS,
        graph_settle_s: float = GRAPH_SETTLE_S, cold_l2_mb: int = 0, log=print) -> dict:
    """Check and time every drawn problem on this GPU; the result files are rewritten after each
    (``cold_l2_mb``: the GEMMs' device times with the L2 flushed before every call, ``gemm_row``).  The
    SM clock is sampled throughout (``harness.ClockSampler``, nvidia-smi where present): each row's
    ``nova_graph_sm_mhz`` is its median during Nova's timed graph replays, the clock the prediction
    is checked at."""
    from nova.bench.harness import ClockSampler, environment, require_torch
    torch = require_torch()
    env = environment()
    clocks = ClockSampler(interval_ms=50).start()
    jax = None
    if kind == "gemm":
        from nova.bench.train_gemms import load_jax
        jax = load_jax(log)
        if jax is not None:
            env["jax"] = jax.__version__
    settings = {"kind": kind, "seed": seed, "count": count, "settle_s": settle_s, "rounds": rounds,
                "min_time_s": min_time_s, "iters": iters, "graph_calls": graph_calls,
                "graph_settle_s": graph_settle_s, "odd_fraction": ODD_FRACTION, "band": PREDICTION_BAND,
                "cold_l2_mb": cold_l2_mb}
    rows, result = [], None
    try:
        for i, h in enumerate(problems):
            try:
                if kind == "gemm":
                    r = gemm_row(torch, jax, h, seed=seed * 1000 + i, settle_s=settle_s * (3 if i == 0 else 1),
                                 rounds=rounds, min_time_s=min_time_s, log=log, graph_calls=graph_calls,
                                 graph_settle_s=graph_settle_s, cold_l2_bytes=cold_l2_mb << 20)
                else:
                    r = attention_row(torch, h, seed=seed * 1000 + i, iters=iters, graph_calls=graph_calls,
                                      graph_settle_s=graph_settle_s)
            except Exception as e:          # one line, and the run goes on (the problem counts as failed)
                r = asdict(h) | {"describe": h.describe(), "status": "failed", "ratio": math.nan, "predictions": [],
                                 "failure": one_line(e)}
            r["nova_graph_sm_mhz"] = window_clock_mhz(clocks.samples, r.get("nova_graph_window"))
            rows.append(r)
            torch.cuda.empty_cache()
            log(f"[{i + 1}/{len(problems)}] {h.describe()}: " + (
                f"ratio {r['ratio']:.3f} vs {r.get('best') or 'n/a'}, device {r.get('ratio_device') or math.nan:.3f}"
                if r["status"] == "ok" else f"FAILED: {r['failure']}"))
            result = write_results(out, kind, rows, settings, env)
    finally:
        clocks.stop()
    for name, s in result["summary"].items():
        log(f"{name}: geomean {s['geomean']:.3f} (device {s['device_geomean']:.3f}), p10 {s['p10']:.3f}, worst "
            f"{s['worst']}, {s['failed']} failed, {s['prediction_within_band']:.0%} of {s['kernels_predicted']} kernels "
            "predicted within band")
    return result


# ------------------------------------------------------------------------------ command line
class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line ``prog: error: ...`` on stderr, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> OneLineParser:
    ap = OneLineParser(prog="python3 -m nova.bench.heldout", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=KINDS, help="gemm or attention")
    ap.add_argument("--count", type=int, default=100, help="problems to draw (default 100)")
    ap.add_argument("--seed", type=int, default=None, help="the draw's seed (default: today's date as YYYYMMDD, UTC)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for heldout_<kind>.json/.md")
    ap.add_argument("--list", action="store_true", help="print the drawn problems and exit")
    ap.add_argument("--precompile", action="store_true", help="host: compile every drawn problem's kernels into "
                                                                "$NOVA_CACHE_DIR")
    ap.add_argument("--target", default=None, help="--precompile's target preset (e.g. h200)")
    ap.add_argument("--settle-s", type=float, default=0.5, help="GEMM: seconds of the libraries back to back first")
    ap.add_argument("--rounds", type=int, default=5, help="GEMM: timed rounds per library (median)")
    ap.add_argument("--min-time-s", type=float, default=0.02, help="GEMM: least work in one timed round")
    ap.add_argument("--iters", type=int, default=20, help="attention: timed calls per eager measurement")
    ap.add_argument("--graph-calls", type=int, default=GRAPH_CALLS, help="calls captured per CUDA graph (device time)")
    ap.add_argument("--cold-l2-mb", type=int, default=0,
                    help="GEMM: device times with the L2 flushed before every call of every library (a write of "
                         "this many MB, timed alone and subtracted; 0: calls back to back, the default)")
    ap.add_argument("--graph-settle-s", type=float, default=GRAPH_SETTLE_S,
                    help="seconds of untimed replays before Nova's timed graph replays (the power-capped clock)")
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    seed = default_seed() if args.seed is None else args.seed
    if args.count < 1:
        ap.error(f"--count must be at least 1, got {args.count}")
    if seed < 0:
        ap.error(f"--seed must be non-negative, got {seed}")
    if args.precompile and not args.target:
        ap.error("--precompile needs --target (the GPU to compile for, e.g. h200)")
    if args.target and not args.precompile:
        ap.error("--target applies to --precompile only (the device run configures for its own GPU)")
    if args.precompile and args.list:
        ap.error("--list and --precompile exclude each other")
    if args.cold_l2_mb and args.kind != "gemm":
        ap.error("--cold-l2-mb applies to gemm only")
    for name in ("settle_s", "min_time_s", "graph_settle_s", "cold_l2_mb"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be non-negative")
    if args.rounds < 1 or args.iters < 1 or args.graph_calls < 1:
        ap.error("--rounds, --iters and --graph-calls must be at least 1")
    problems = draw(args.kind, seed, args.count)
    print(f"{args.kind}: {len(problems)} problems, seed {seed}", flush=True)
    if args.list:
        for h in problems:
            print(h.describe())
        return 0
    from nova.runtime.driver import NovaRuntimeError
    try:
        if args.precompile:
            counts = precompile(args.kind, problems, args.target, log=lambda line: print(line, flush=True))
            return 1 if counts["failed"] else 0
        result = run(args.kind, problems, args.out, seed=seed, count=args.count, settle_s=args.settle_s,
                     rounds=args.rounds, min_time_s=args.min_time_s, iters=args.iters,
                     graph_calls=args.graph_calls, graph_settle_s=args.graph_settle_s, cold_l2_mb=args.cold_l2_mb,
                     log=lambda line: print(line, flush=True))
    except (NovaRuntimeError, ValueError, OSError) as e:     # no GPU, no MLIR, an unknown target: one line
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    return 1 if result["summary"]["overall"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
