"""The per-K-tile time of the Hopper tiles kernel when a tile has few K-tile peers: register-fed X
(32-bit MN-major, TF32: the fragments loaded from shared memory by each consumer thread) against the
same tiles fed from shared memory (K-major, the wgmma descriptors), over tile shapes (1 or 2
consumer warpgroups x wgmma N 64 / 128 / 256), one K slice, fewer tiles than SMs, so each SM runs at
most one tile and its time is the K loop's chain.  Two depths of K per shape: the slope
``(t(K2) - t(K1)) / (ktiles(K2) - ktiles(K1))`` is one K tile's time without launch, fill and epilogue.

    python3 bench/probes/register_fed_chain.py --build     # host with MLIR: .nova-register-fed-chain.json
    python3 bench/probes/register_fed_chain.py             # GPU: reads it; $OUT/register_fed_chain.json

Each variant is the configurator's own schedule with step 8's candidates filtered to one tile
(``hopper.tile_candidates``), ping-pong, stream-K and clusters off, so the model's prediction printed
is the one for exactly the kernel that ran.  Results are checked against float64 (NaN-poisoned C).
"""
import json
import os
import sys
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = os.path.join(HERE, "..", "..", ".nova-register-fed-chain.json")     # gitignored: PTX and cubins
# (M, N, K, trans_a, trans_b): TN is register-fed X (A stored [K, M], 32-bit MN-major); NT is both
# operands K-major from shared memory.  M rows on the wgmma N (swapped: the kernel computes C^T), N
# rows on the warpgroups' slabs: N = 4096 is 64 slabs of 64, at most 128 tiles (M = 128 at wgmma N 64),
# under the SM count: every SM runs at most one tile.
PROBLEMS = [(m, 4096, k, ta, tb) for m in (8, 128) for k in (4096, 16384)
            for ta, tb in ((True, False), (False, True))]
TILES = [(1, 64), (2, 64), (1, 128), (2, 128), (1, 256)]     # (consumer warpgroups, wgmma N)
TARGETS = ("h200", "h100")


def forced_tile(problem, target: str, slabs: int, n: int):
    """The configurator's Hopper schedule for ``problem`` with step 8 restricted to ``slabs`` x ``n``,
    split 1, the register epilogue; None where that tile is not a candidate."""
    from nova.configurator import configure
    from nova.kernels.gemm import hopper
    from nova.options import current
    real = hopper.tile_candidates

    def only(p, gpu, operands, wgs, nn, opts):
        return [c for c in real(p, gpu, operands, wgs, nn, opts)
                if -c[2] == slabs and -c[3] == n and c[4] == 1 and c[5] == "atomic" and c[7] == "registers"]
    opts = current().replace(pingpong=False, stream_k=False, cluster=(1, 1))
    with mock.patch.object(hopper, "tile_candidates", only):
        try:
            cfg = configure(problem, target, kernel="tiles", options=opts)
        except Exception as e:            # noqa: BLE001  (no such candidate: the tile is skipped)
            print(f"  {slabs}x{n}: {type(e).__name__}: {e}", file=sys.stderr)
            return None
    s = cfg.schedule
    if s.hopper is None or s.mma.n != n or s.consumer_warpgroups != slabs:
        return None
    return s, cfg.prediction.time_us


def build() -> int:
    from nova.kernels.gemm.compile import compile_gemm, describe_schedule
    from nova.kernels.gemm.problem import GemmProblem
    rows = []
    for target in TARGETS:
        for m, n, k, ta, tb in PROBLEMS:
            p = GemmProblem(m, n, k, "tf32", trans_a=ta, trans_b=tb)
            for slabs, wn in TILES:
                got = forced_tile(p, target, slabs, wn)
                if got is None:
                    continue
                s, us = got
                artifact = compile_gemm(p, s)
                rows.append({"target": target, "problem": [m, n, k, ta, tb], "slabs": slabs, "wgmma_n": wn,
                             "label": describe_schedule(s), "predicted_us": us, "schedule": s.to_dict(),
                             "artifact": artifact.to_dict(),
                             "registers": artifact.resources.get("registers")})
                print(f"{target} {p.describe()} {slabs}x{wn}: {describe_schedule(s)} predicted {us:.1f} us "
                      f"registers {artifact.resources.get('registers')} spilled "
                      f"{artifact.resources.get('spill_store_bytes')} B", flush=True)
    json.dump(rows, open(VARIANTS, "w"))
    return 0


def run() -> int:
    import torch
    from nova.bench.harness import graph_replay
    from nova.codegen.artifact import KernelArtifact
    from nova.hwmodel import get_target
    from nova.kernels.gemm.problem import GemmProblem
    from nova.kernels.gemm.schedule import Schedule
    from nova.runtime import driver
    from nova.runtime.matmul import load_resolved, preset_for_device_name
    name = torch.cuda.get_device_name()
    target = preset_for_device_name(name)
    rows = [r for r in json.load(open(VARIANTS)) if r["target"] == target]
    device = driver.get_device()
    print(f"{name} ({target}); device us by CUDA-graph replay (warm L2), error against float64")
    measured = []
    for r in rows:
        m, n, k, ta, tb = r["problem"]
        p = GemmProblem(m, n, k, "tf32", trans_a=ta, trans_b=tb)
        a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
        b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
        ref = a.double() @ b.double()
        s = Schedule.from_dict(r["schedule"])
        resolved = load_resolved(p, get_target(target), s, KernelArtifact.from_dict(r["artifact"]), None, "cached",
                                 device)
        out = torch.full((m, n), float("nan"), device="cuda")

        def call():
            resolved.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
        call()
        torch.cuda.synchronize()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        us = graph_replay(torch, lambda i: call(), 20)[0]
        ktiles = -(-k // 32)
        print(f"{p.describe():34s} {r['slabs']}x{r['wgmma_n']:<3d} {r['label']:30s} predicted {r['predicted_us']:7.1f}"
              f"  measured {us:7.1f}  ({us / ktiles * 1e3:6.1f} ns a K tile)  error {err:.1e}", flush=True)
        measured.append({**{k2: r[k2] for k2 in ("problem", "slabs", "wgmma_n", "label", "predicted_us", "registers")}, "measured_us": us, "error": err})
    # the slope between the two depths: one K tile's time, launch / fill / epilogue cancelled
    by = {}
    for x in measured:
        m, n, k, ta, tb = x["problem"]
        by.setdefault((m, n, ta, tb, x["slabs"], x["wgmma_n"]), {})[k] = x["measured_us"]
    print("per K tile (slope between the depths), ns:")
    for (m, n, ta, tb, slabs, wn), t in sorted(by.items()):
        if len(t) == 2:
            (k1, t1), (k2, t2) = sorted(t.items())
            slope = (t2 - t1) / ((k2 - k1) / 32) * 1e3
            print(f"  M={m:<4d} {'TN register-fed' if ta else 'NT smem-fed':16s} {slabs}x{wn:<3d} {slope:6.1f} ns", flush=True)
    if os.environ.get("OUT"):
        json.dump({"device": name, "target": target, "rows": measured},
                  open(os.path.join(os.environ["OUT"], "register_fed_chain.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(build() if "--build" in sys.argv else run())
