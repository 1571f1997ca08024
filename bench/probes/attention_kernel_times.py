"""Each attention kernel's device time (forward, bwd_pre, dK/dV, dQ), from CUPTI's kernel records
through ``torch.profiler``, against the configurator's prediction per role: the data the Hopper
models' fixed terms are fitted on (device, offline cache).  CUDA events around Python calls
measure the launch path when it is slower than the kernel; kernel records do not.

    NOVA_ATTENTION_HOPPER=force python3 bench/probes/attention_kernel_times.py OUT.json   # and =off
    KT_DTYPES=tf32,bf16 ...                                  # the dtypes (default bf16)
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
    from nova.kernels.attention.problem import AttentionProblem
    rows = []
    for dtype in os.environ.get("KT_DTYPES", "bf16").split(","):
        dt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        for B, H, T, D in SHAPES:
            q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
            cfg = configure_attention(AttentionProblem(B, H, T, T, D, causal=True, dtype=dtype), "h200")
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
                   "measured_us": times, "predicted_us": {r: cfg.terms[r]["time_us"] for r in NAMES.values()},
                   "hopper": {r: cfg.schedule.kernel(r).hopper for r in NAMES.values()},
                   "tiles": {r: [cfg.schedule.kernel(r).block_rows, cfg.schedule.kernel(r).block_cols,
                                 cfg.schedule.kernel(r).stages] for r in NAMES.values()}}
            rows.append(row)
            print(row["shape"], row["mode"], {r: f"{times.get(r, float('nan')):.1f}/{row['predicted_us'][r]:.1f}"
                                              + ("h" if row["hopper"][r] else "") for r in NAMES.values()}, flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
