"""Closed-form times of the kernels a compiled step launches that are not Nova GEMMs.

Until Nova's fused kernels replace them, such groups run on ATen kernels inside the plan; the
configurator still predicts them, from the same hardware model and calibration as the GEMMs:

    memory-bound group   t = bytes / (dram_bw * eta_dram) + launches * t_launch
    attention (FP32)     t = flops / (peak_fp32 * ETA_ATTENTION_FP32) + t_launch
    cross-entropy        memory-bound: the logits read once (and dlogits written once), launches
                         per row chunk (``cross_entropy_launches``)

``eta_dram`` (0.948, measured by bench/l2_probe.py) and ``t_launch`` (1.05 us, the CUDA-graph gap)
are the target's calibrated constants (``nova/hwmodel/calibration``); without a calibration the
datasheet bandwidth and the preset's launch overhead stand.

Where the target has a calibration of ATen's kernels (``<preset>.aten.json``, fitted by
``nova.bench.calibrate_aten`` on a CUPTI profile of a training step), an ATen group is priced kind
by kind from the kernels its calls launch (``nova.compiler.aten_launches``: counted on meta):

    ATen kernels        t = sum over kinds of  kernels * t_fixed + bytes / (dram_bw * eta_kind)

``t_fixed`` is a kernel's duration when it moves (almost) nothing and ``eta_kind`` the fraction of
the DRAM bandwidth the kind reaches on its bytes (small tensors, row reductions and L2 reuse
included, as the profile measured them); this replaces the memory-bound form and the cross-entropy
closed form for such groups.  ``ETA_ATTENTION_FP32`` is fitted
on the two measurements of PyTorch's FP32 memory-efficient attention (forward + backward) in
``shared/design/graph-capture.md``: 32x8x512x64 causal 1,230 us (0.395 of the FP32 peak) and
16x12x1024x64 causal 3,128 us (0.466); their mean 0.43 predicts each within 9%.
"""
from __future__ import annotations

from dataclasses import dataclass

ETA_ATTENTION_FP32 = 0.43
BACKWARD_FLOP_RATIO = 2.5      # attention backward: 5 matmuls of the forward's 2 (FlashAttention-2, sec. 3)
# Cross-entropy kernels (nova/compiler/aten_kernels.py) walk the logits in row chunks of at most this
# many bytes, so that the chunk's intermediate (log-probabilities, or dlogits between its two
# passes) stays in L2 (50 MB on an H100/H200) while the logits stream through once.
CROSS_ENTROPY_CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class KernelTime:
    time_us: float
    bound: str                   # "dram" | "fp32" | "launch"
    formula: str                 # the formula with numbers, for explain
    terms: dict | None = None    # ATen kinds: {kind: {kernels, bytes, eta, calibrated, time_us}}


def calibration_constants(target) -> dict:
    """eta_dram and t_launch_us of the target's Hopper (else mma.sync) calibration; datasheet
    values (1.0, the preset's launch overhead) when none is stored (``calibration.memory_constants``)."""
    from nova.hwmodel import calibration
    return calibration.memory_constants(target)


def aten_calibration(target) -> dict | None:
    """The target's calibration of ATen's kernels (``{"constants": {"t_fixed_us", "eta": {kind: ...}},
    "source": ...}``), or None where none is stored."""
    from nova.hwmodel import calibration
    return calibration.load(target.name, "aten")


def aten_kinds_time(kinds: dict, target, stored: dict) -> KernelTime:
    """ATen kernels priced kind by kind with the stored calibration: ``kinds`` maps a kind to
    ``(kernels, bytes)``.  A kind the calibration lacks is priced memory-bound (eta_dram, t_launch)
    and its term says so.  ``KernelTime.terms`` holds each kind's kernels, bytes, eta and time."""
    c = stored["constants"]
    fallback = calibration_constants(target)
    terms, parts = {}, []
    t_fixed_total = t_bytes_total = 0.0
    for kind, (kernels, nbytes) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        calibrated = kind in c["eta"]
        eta = c["eta"][kind] if calibrated else fallback["eta_dram"]
        t_fixed = c["t_fixed_us"] if calibrated else fallback["t_launch_us"]
        t_bytes = nbytes / (target.dram_bw * eta) * 1e6
        t_fixed_total += kernels * t_fixed
        t_bytes_total += t_bytes
        terms[kind] = {"kernels": kernels, "bytes": nbytes, "eta": round(eta, 4), "calibrated": calibrated,
                       "time_us": round(kernels * t_fixed + t_bytes, 3)}
        parts.append(f"{kind} {kernels} x {t_fixed:.2f} us + {nbytes / 1e6:.1f} MB at {eta:.3f}"
                     + ("" if calibrated else " (uncalibrated kind)"))
    bound = "dram" if t_bytes_total >= t_fixed_total else "launch"
    return KernelTime(t_fixed_total + t_bytes_total, bound, "; ".join(parts), terms)


def memory_bound_time(bytes_moved: int, target, launches: int = 1) -> KernelTime:
    """A streaming kernel: every byte crosses DRAM once (inputs read, outputs written)."""
    c = calibration_constants(target)
    t_dram = bytes_moved / (target.dram_bw * c["eta_dram"]) * 1e6
    t_launch = launches * c["t_launch_us"]
    bound = "dram" if t_dram >= t_launch else "launch"
    return KernelTime(t_dram + t_launch, bound,
                      f"{bytes_moved / 1e6:.1f} MB / ({target.dram_bw / 1e12:.2f} TB/s x {c['eta_dram']:.3f})"
                      f" + {launches} x {c['t_launch_us']:.2f} us")


def attention_flops(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, head_dim_v: int,
                    causal: bool, backward: bool) -> float:
    """2 matmuls forward (Q K^T, P V), 2 * B H Tq Tk D FLOP each; causal halves the score matrix;
    the backward does BACKWARD_FLOP_RATIO times the forward's work."""
    forward = 2.0 * batch * heads * seq_q * seq_k * (head_dim + head_dim_v)
    if causal:
        forward /= 2
    return forward * (BACKWARD_FLOP_RATIO if backward else 1.0)


def attention_fallback_time(flops: float, target) -> KernelTime:
    """PyTorch's FP32 attention (the memory-efficient kernel: CUDA cores, no tensor cores)."""
    c = calibration_constants(target)
    rate = target.peak_fp32_flops() * ETA_ATTENTION_FP32
    t = flops / rate * 1e6 + c["t_launch_us"]
    return KernelTime(t, "fp32", f"{flops / 1e9:.2f} GFLOP / ({target.peak_fp32_flops() / 1e12:.1f} TFLOP/s x "
                                 f"{ETA_ATTENTION_FP32}) + {c['t_launch_us']:.2f} us")


def cross_entropy_chunk_rows(rows: int, row_bytes: int) -> int:
    """Rows per chunk of the cross-entropy kernels (at least one)."""
    return max(1, min(rows, CROSS_ENTROPY_CHUNK_BYTES // max(row_bytes, 1)))


def cross_entropy_launches(op: str, rows: int, row_bytes: int, reduction: str = "mean") -> int:
    """ATen launches of the executor's ``cross_entropy``/``cross_entropy_backward`` kernel: two per
    row chunk (forward: _log_softmax.out, max.dim_max; backward: sub.out, elu_backward.grad_input)
    and the per-row bookkeeping on [N] vectors (forward 8, backward 5; 'mean' adds 2 and 3)."""
    chunk = cross_entropy_chunk_rows(rows, row_bytes)
    chunks = -(-rows // chunk) if rows else 0
    mean = reduction == "mean"
    if op == "cross_entropy":
        return 2 * chunks + 8 + 2 * mean
    return 2 * chunks + 5 + 3 * mean
