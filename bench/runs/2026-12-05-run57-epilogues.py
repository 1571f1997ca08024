"""Device run 57: where the GELU GEMMs' time goes.  16384x2048x512 with every epilogue the training
steps use (and relu / no-activation controls), each timed alone by CUDA-graph replay, next to the
configurator's prediction.  Run once per kernel cache (the variants differ only in the emitted code
or in NOVA_PINGPONG, which the cache key holds):

    NOVA_OFFLINE=1 NOVA_TARGET=h100 NOVA_CACHE_DIR=... python3 bench/runs/2026-12-05-run57-epilogues.py TAG OUT
"""
import json
import sys

import torch

import nova
from nova.bench.harness import graph_replay

SUITE = "bench/runs/2026-12-05-run57-suite.json"


def main(tag, out):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(57)
    for dtype in ("bf16", "tf32"):
        for e in json.load(open(SUITE)):
            M, N, K = e["M"], e["N"], e["K"]
            t = torch.bfloat16 if dtype == "bf16" else torch.float32
            a = torch.randn(*((K, M) if e.get("trans_a") else (M, K)), device="cuda", dtype=t, generator=gen)
            b = torch.randn(*((N, K) if e.get("trans_b") else (K, N)), device="cuda", dtype=t, generator=gen)
            a = a.T if e.get("trans_a") else a
            b = b.T if e.get("trans_b") else b
            out_t = torch.full((M, N), float("nan"), device="cuda", dtype=t)
            kw = dict(activation=e.get("activation", "none"), activation_grad=e.get("activation_grad", False))
            if e.get("bias"):
                kw["bias"] = torch.randn(N, device="cuda", dtype=t, generator=gen)
            if e.get("residual"):
                kw["residual"] = torch.randn(M, N, device="cuda", dtype=t, generator=gen)
            if e.get("preactivation"):
                kw["preactivation"] = torch.full((M, N), float("nan"), device="cuda", dtype=t)
            label = f"{dtype} {'T' if e.get('trans_a') else 'N'}{'T' if e.get('trans_b') else 'N'} " + \
                "+".join(k for k in ("bias", "activation", "preactivation", "residual", "activation_grad")
                         if e.get(k) and e.get(k) != "none" and k != "activation") + f" act={kw['activation']}"
            try:
                fn = lambda i: nova.matmul(a, b, out=out_t, **kw)
                fn(0)
                torch.cuda.synchronize()
                ok = bool(torch.isfinite(out_t).all())
                us, _ = graph_replay(torch, fn, reps=10, rounds=10, min_seconds=0.3, settle_s=0.3)
                rows.append({"tag": tag, "case": label, "us": round(us, 1), "finite": ok})
                print(f"{tag:10s} {label:60s} {us:8.1f} us finite={ok}", flush=True)
            except Exception as exc:  # one line, the run goes on
                print(f"{tag:10s} {label:60s} failed: {str(exc).splitlines()[0][:150]}", flush=True)
    json.dump(rows, open(f"{out}/epilogues-{tag}.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
