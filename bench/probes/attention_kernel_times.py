"""Each attention kernel's device time (forward, bwd_pre, dK/dV, dQ), from CUPTI's kernel records
through ``torch.profiler``, against the configurator's prediction per role: the data the Hopper
models' fixed terms are fitted on (device, offline cache).  CUDA events around Python calls
measure the launch path when it is slower than the kernel; kernel records do not.

    NOVA_ATTENTION_HOPPER=force python3 bench/probes/attention_kernel_times.py OUT.json   # and =off
    KT_DTYPES=tf32,bf16 ...                                  # the dtypes (default bf16)
    NOVA_ATTENTION_PRECISION=fp32 KT_DTYPES=tf32 ...         # float32 attention at another precision
    python3 bench/probes/attention_kernel_times.py build tf32:fp32,tf32:3xtf32   # host: their kernels
"""
import json
import os
import sys

SHAPES = ((32, 8, 512, 64), (16, 12, 1024, 64), (8, 16, 2048, 128), (16, 16, 1024, 128))
NAMES = {"nova_attn_fwd": "fwd", "nova_attn_bwd_pre": "bwd_pre", "nova_attn_bwd_dkv": "bwd_dkv",
         "nova_attn_bwd_dq": "bwd_dq"}


def main(out):
    import torch
    from torch.profiler import ProfilerActivity, profile
    import nova
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.problem import AttentionProblem, score_precision_for
    rows = []
    for dtype in os.environ.get("KT_DTYPES", "bf16").split(","):
        dt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        for B, H, T, D in SHAPES:
            q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
            cfg = configure_attention(AttentionProblem(B, H, T, T, D, causal=True, dtype=dtype,
                                                       score_precision=score_precision_for(dtype)), "h200")
            for _ in range(3):
                o, lse = nova.attention(q, k, v, causal=True)
                nova.attention_backward(do, q, k, v, o, lse, causal=True)
            torch.cuda.synchronize()
            iters = 20
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iters):
                    o, lse = nova.attention(q, k, v, causal=True)
                    nova.attention_backward(do, q, k, v, o, lse, causal=True)
                torch.cuda.synchronize()
            times = {}
            for e in prof.key_averages():
                role = NAMES.get(e.key)
                if role:
                    total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                    times[role] = total / iters
            row = {"shape": f"B{B}.H{H}.T{T}.D{D}", "dtype": dtype, "mode": os.environ.get("NOVA_ATTENTION_HOPPER", "auto"),
                   "precision": score_precision_for(dtype),
                   "measured_us": times, "predicted_us": {r: cfg.terms[r]["time_us"] for r in NAMES.values()},
                   "hopper": {r: cfg.schedule.kernel(r).hopper for r in NAMES.values()},
                   "tiles": {r: [cfg.schedule.kernel(r).block_rows, cfg.schedule.kernel(r).block_cols,
                                 cfg.schedule.kernel(r).stages] for r in NAMES.values()}}
            rows.append(row)
            print(row["shape"], row["mode"], {r: f"{times.get(r, float('nan')):.1f}/{row['predicted_us'][r]:.1f}"
                                              + ("h" if row["hopper"][r] else "") for r in NAMES.values()}, flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


def build(specs: str) -> None:
    """Host (MLIR): the kernels of SHAPES for each ``dtype:precision`` of ``specs`` into $NOVA_CACHE_DIR."""
    from nova.bench.attention import _precompile_one
    from nova.kernels.attention.problem import AttentionProblem
    from nova.kernels.attention.schedule import ROLES
    for spec in specs.split(","):
        dtype, _, precision = spec.partition(":")
        for B, H, T, D in SHAPES:
            p = AttentionProblem(B, H, T, T, D, causal=True, dtype=dtype, score_precision=precision or "tf32")
            print(p.describe(), [(r, st) for r, _, st, _ in _precompile_one((p, ROLES, "h200", None))], flush=True)


if __name__ == "__main__":
    build(sys.argv[2]) if sys.argv[1] == "build" else main(sys.argv[1])
