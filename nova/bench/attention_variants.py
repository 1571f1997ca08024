"""Per-kernel timing of attention tile variants (the measurements behind derive.py's phase-2 choices).

    python -m nova.bench.attention_variants --precompile          # host with MLIR: cache + manifest
    python -m nova.bench.attention_variants --out DIR             # GPU: time every kernel of the manifest

Each benchmark problem gets its derived schedule ("derived") plus the tiles listed in ``VARIANTS``
(one role replaced; ``configure_attention(tiles=...)``).  On the device every kernel is launched alone
``--iters`` times between CUDA events; its output is compared with the derived kernel's (a broken
variant shows as a large ``max_diff``).  Inputs of the backward kernels (O, LSE, D) come from the
derived forward and preprocessing kernels.
"""
from __future__ import annotations

import json
import os
import sys

from nova.bench.attention import BENCH_SHAPES, arguments, event_time_us
from nova.kernels.attention.problem import AttentionProblem

MANIFEST = "attention-variants.json"

# (dtype, D) -> role -> [(block_rows, block_cols, stages, blocks_per_sm)]; None = derived value
VARIANTS = {
    ("tf32", 64): {},
    ("bf16", 64): {"fwd": [(128, 64, 3, 2), (64, 64, 3, 3)], "bwd_dkv": [(64, 64, 3, 2)]},
    ("tf32", 128): {},
    ("bf16", 128): {"fwd": [(64, 64, 2, 2)], "bwd_dkv": [(64, 16, 3, 2)], "bwd_dq": [(64, 64, 2, 2)]},
}
TF32_PREP_VARIANTS = ("smem",)      # the derived TF32 tiles again, streamed tiles rounded in shared memory


def entries(dtypes=("tf32", "bf16")):
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.schedule import ROLES
    out = []
    for (b, h, t, d) in BENCH_SHAPES:
        for dt in dtypes:
            p = AttentionProblem(b, h, t, t, d, causal=True, dtype=dt)
            base = configure_attention(p, "h200").schedule
            split = [r for r in ROLES if base.kernel(r).splits > 1]
            if split:     # each kernel is timed alone on its outputs' buffers: a split one writes partials
                raise ValueError(f"{p.describe()}: {', '.join(split)} split; the variants time unsplit kernels only")
            out += [(p, base, role, "derived") for role in ROLES]
            for role, tiles in VARIANTS.get((dt, d), {}).items():
                for tl in tiles:
                    s = configure_attention(p, "h200", tiles={role: tl}).schedule
                    k = s.kernel(role)
                    tag = f"{k.block_rows}x{k.block_cols}s{k.stages}b{k.blocks_per_sm}"
                    if s.kernel(role) != base.kernel(role):
                        out.append((p, s, role, tag))
            if dt == "tf32":
                import dataclasses
                for prep in TF32_PREP_VARIANTS:
                    s = dataclasses.replace(base, tf32_prep=prep)
                    out += [(p, s, role, f"derived-{prep}") for role in ("fwd", "bwd_dkv", "bwd_dq")]
    return out


def _one(args):
    p, s, role, tag = args
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import get_or_compile
    gpu = get_target("h200")
    try:
        art, key, status = get_or_compile(p, s, role, gpu, offline=False)
    except Exception as e:                                   # a variant that does not build is reported
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    r = art.resources
    return {"key": key, "status": status, "registers": r.get("registers"),
            "spill": r.get("spill_store_bytes", 0) + r.get("spill_load_bytes", 0)}


def precompile(jobs: int, out_path: str) -> int:
    from concurrent.futures import ProcessPoolExecutor
    es = entries()
    with ProcessPoolExecutor(jobs) as ex:
        res = list(ex.map(_one, es))
    rows = []
    for (p, s, role, tag), r in zip(es, res):
        k = s.kernel(role)
        rows.append({"problem": p.to_dict(), "schedule": s.to_dict(), "role": role, "tag": tag, **r,
                     "tile": [k.block_rows, k.block_cols, k.stages, k.blocks_per_sm], "smem": k.smem_bytes})
        print(f"{p.describe()[10:60]:50s} {role:8s} {tag:14s} regs {r.get('registers')} spill {r.get('spill')} "
              f"{r.get('error', '')}", flush=True)
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=0)
    return 0


def run(manifest: str, out_dir: str, iters: int) -> int:
    import torch
    from nova.runtime import driver
    from nova.runtime.cache import KernelCache
    rows = json.load(open(manifest))
    cache = KernelCache()
    dev = driver.get_device(0)
    os.makedirs(out_dir, exist_ok=True)
    results, data = [], {}
    stream = torch.cuda.current_stream().cuda_stream
    for r in rows:
        if "key" not in r:
            continue
        p = AttentionProblem(**r["problem"])
        if p not in data:
            torch.manual_seed(0)
            dt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
            B, H, T, D = p.batch, p.heads, p.seq_q, p.head_dim
            q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
            data[p] = {"q": q, "k": k, "v": v, "dout": do, "out": torch.empty_like(q),
                       "lse": torch.empty(B, H, T, device="cuda"), "delta": torch.empty(B, H, T, device="cuda"),
                       "dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v), "ref": {}}
        t = data[p]
        art = cache.get(r["key"])
        kern = driver.load_kernel(art, dev, f"{r['role']} {r['tag']}", r["key"])
        from nova.kernels.attention.build import PARAMS
        outname = {"fwd": "out", "bwd_pre": "delta", "bwd_dkv": "dk", "bwd_dq": "dq"}[r["role"]]
        t[outname].fill_(float("nan"))
        ptrs = tuple(t[n].data_ptr() for n in PARAMS[r["role"]])
        kern.launch(ptrs, stream)
        torch.cuda.synchronize()
        res = t[outname].float()
        if r["tag"] == "derived":
            t["ref"][r["role"]] = res.clone()
            diff = 0.0
        else:
            ref = t["ref"][r["role"]]
            diff = float(((res - ref).abs().nan_to_num(float("inf"))).max() / ref.abs().max())
        us = event_time_us(lambda: kern.launch(ptrs, stream), iters)
        row = {"problem": p.describe(), "dtype": p.dtype, "D": p.head_dim, "T": p.seq_q, "role": r["role"],
               "tag": r["tag"], "tile": r["tile"], "registers": r["registers"], "us": round(us, 2),
               "max_diff": diff}
        results.append(row)
        print(f"{p.describe()[10:52]:42s} {r['role']:8s} {r['tag']:14s} regs {r['registers']} {us:8.1f} us "
              f"diff {diff:.1e}", flush=True)
    with open(os.path.join(out_dir, "attention_variants.json"), "w") as f:
        json.dump(results, f, indent=0)
    return 0


def main(argv=None) -> int:
    ap = arguments("python -m nova.bench.attention_variants", jobs=4)
    ap.add_argument("--manifest", default=None)
    a = ap.parse_args(argv)
    from nova.runtime.cache import KernelCache
    manifest = a.manifest or os.path.join(str(KernelCache().root), MANIFEST)
    if a.precompile:
        return precompile(a.jobs, manifest)
    return run(manifest, a.out, a.iters)


if __name__ == "__main__":
    sys.exit(main())
