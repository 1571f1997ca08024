"""Where a cluster kernel with an MN-major 16-bit tile goes wrong (bench/NOTES.md).

Host (MLIR + ptxas):  ``python3 bench/probes/cluster_mn_major.py build DIR``
Device:               ``python3 bench/probes/cluster_mn_major.py run DIR``

The host proves that a cluster's TMA boxes put exactly the 1x1 kernel's bytes at the 1x1 kernel's
offsets, signalling the same barriers with the stage's bytes
(tests/test_hopper_cluster.py::test_cluster_tma_writes_are_the_one_by_one_kernels), and the ring
protocol holds under any interleaving of a model with the mbarrier's phase/pending/tx rules; so this
maps the device's error instead of guessing.  ``build`` compiles each case (forced cluster shapes,
MN-major 16-bit ones included) in three variants of the kernel:

* ``base``: the cluster kernel (TMA multicast of the shared tile, remote releases);
* ``local_loads``: no multicast (each CTA loads the whole shared tile itself), remote releases kept;
* ``local_all``: no multicast and each CTA releases only its own ring slots: the 1x1 ring inside a
  cluster launch (cluster barriers, cluster tile walk).

``run`` launches each artifact directly (HopperGemm; no cache), on random data three times and on K
bands (B kept only on K rows of one wgmma k-step ((k % BK) // 16), one ring slot (K tile % stages),
one K slice), and prints the relative error (vs float64), the NaN count, and for a wrong product
the share of bad tiles by rank along the cluster and the error by 64-column (B box) and 64-row
(A box / consumer warpgroup) block of the tile.  Which variant first goes wrong, and which band,
box or rank carries the error, says where to look next.
"""
import json
import os
import sys
from pathlib import Path

# (label, M, N, K, layout, cluster): layouts as the GPU tests name them (T: the operand transposed,
# i.e. A^T stored [K, M]: MN-major A; B not transposed: stored [K, N], MN-major B)
CASES = [
    ("tn-2x1", 512, 2048, 16384, "TN", "2x1"),     # measured: error 0.86 (both MN-major; B shared, split-K workspace)
    ("nn-1x2", 3000, 5000, 700, "NN", "1x2"),      # measured: wrong (B MN-major NOT shared; A K-major prepped, shared)
    ("nn-2x1", 2048, 2048, 2048, "NN", "2x1"),     # B MN-major shared, no ragged edge, no prep
    ("tt-2x1", 512, 2048, 16384, "TT", "2x1"),     # A MN-major only (not shared), B K-major shared: never run
    ("tt-1x2", 512, 2048, 16384, "TT", "1x2"),     # A MN-major only, shared
    ("nt-2x1", 512, 2048, 16384, "NT", "2x1"),     # control: K-major, passes on the device (twice)
    ("nn-1x1", 3000, 5000, 700, "NN", "1x1"),      # control: 1x1 MN-major, passes
]
VARIANTS = (None, "local_loads", "local_all")


def build(out: Path) -> None:
    from nova.configurator import GemmProblem, configure
    from nova.kernels.gemm.emit_hopper import compile_hopper
    out.mkdir(parents=True, exist_ok=True)
    for label, M, N, K, layout, cluster in CASES:
        os.environ["NOVA_CLUSTER"] = cluster
        p = GemmProblem(M, N, K, "bf16", layout[0] == "T", layout[1] == "T")
        s = configure(p, "h200").schedule
        assert f"{s.cluster_m}x{s.cluster_n}" == cluster, (label, s.cluster_m, s.cluster_n)
        for v in (VARIANTS if cluster != "1x1" else (None,)):
            art = compile_hopper(p, s, cluster_experiment=v)
            name = f"{label}-{v or 'base'}"
            (out / f"{name}.json").write_text(json.dumps({"label": name, "layout": layout, "problem": p.to_dict(),
                                                          "schedule": s.to_dict(), "artifact": art.to_dict()}))
            print("built", name, art.resources["registers"], "registers")


def run(out: Path) -> None:
    import torch

    from nova.codegen.artifact import KernelArtifact
    from nova.kernels.gemm.schedule import Schedule
    from nova.runtime import driver
    from nova.runtime.tma import HopperGemm

    device = driver.get_device(torch.cuda.current_device())
    for f in sorted(out.glob("*.json")):
        d = json.loads(f.read_text())
        p, s = d["problem"], Schedule.from_dict(d["schedule"])
        art = KernelArtifact.from_dict(d["artifact"])
        M, N, K = p["M"], p["N"], p["K"]
        ta, tb = d["layout"][0] == "T", d["layout"][1] == "T"
        hop = HopperGemm(art, s, device, d["label"], key=f"probe:{d['label']}")
        gen = torch.Generator(device="cuda").manual_seed(1234)
        a = torch.randn((K, M) if ta else (M, K), device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn((N, K) if tb else (K, N), device="cuda", generator=gen).to(torch.bfloat16)
        a, b = (a.T if ta else a), (b.T if tb else b)
        bm, bn, bk = s.block_m, s.block_n, s.block_k

        def launch(bb):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            if art.zero_output:
                c.zero_()
            hop.run(a.data_ptr(), bb.data_ptr(), c.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            return c.double()

        def rel(x, ref):
            x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
            return float((x - ref).norm() / ref.norm().clamp_min(1e-30))

        print(f"== {d['label']}: {M}x{N}x{K} {d['layout']}, cluster {s.cluster_m}x{s.cluster_n}, block {bm}x{bn}, "
              f"split {s.split_k}, stages {s.stages}, A {s.hopper.operands.a.feed}, B {s.hopper.operands.b.feed}, "
              f"epilogue {s.hopper.epilogue}")
        ref = a.double() @ b.double()
        for n in range(3):
            c = launch(b)
            line = f"  random #{n}: rel error {rel(c, ref):.3e}, NaN {int(torch.isnan(c).sum())}"
            if rel(c, ref) > 1e-2:
                line += "\n" + error_map(torch, c, ref, s, M, N)
            print(line)
        ktiles = -(-K // bk)
        per = -(-ktiles // s.split_k)
        bands = [(f"k-step {q}", lambda k, q=q: (k % bk) // 16 == q) for q in range(bk // 16)]
        bands += [(f"slot {t}", lambda k, t=t: (k // bk) % s.stages == t) for t in range(s.stages)]
        bands += [(f"K slice {z}", lambda k, z=z: (k // bk) // per == z) for z in range(min(s.split_k, 8))]
        for name, keep in bands:
            mask = torch.tensor([keep(k) for k in range(K)], device="cuda", dtype=torch.bool)
            bb = b * mask[:, None].to(b.dtype)          # elementwise: keeps b's (transposed) strides
            assert bb.stride() == b.stride()
            rb = a.double() @ bb.double()
            c = launch(bb)
            zero = float(torch.nan_to_num(c).norm()) == 0.0
            print(f"  band {name:12s}: rel error {rel(c, rb):.3e}, NaN {int(torch.isnan(c).sum())}"
                  + (" (all zero)" if zero else ""))
        hop.release()


def error_map(torch, c, ref, s, M, N) -> str:
    bm, bn = s.block_m, s.block_n
    d = torch.nan_to_num(c, nan=1e30, posinf=1e30, neginf=-1e30) - ref
    bad, ranks = 0, {}
    ti, tj = -(-M // bm), -(-N // bn)
    for i in range(ti):
        for j in range(tj):
            blk = (slice(i * bm, (i + 1) * bm), slice(j * bn, (j + 1) * bn))
            if float(d[blk].norm() / ref[blk].norm().clamp_min(1e-30)) > 1e-2:
                bad += 1
                rank = i % s.cluster_m if s.cluster_m > 1 else j % s.cluster_n
                ranks[rank] = ranks.get(rank, 0) + 1

    def by_block(dim, tile):
        acc = {}
        for blk in range(-(-(M if dim == 0 else N) // 64)):
            sl = slice(blk * 64, (blk + 1) * 64)
            e = float((d[sl] if dim == 0 else d[:, sl]).norm() / (ref[sl] if dim == 0 else ref[:, sl]).norm())
            acc.setdefault(blk * 64 % tile // 64, []).append(e)
        return ", ".join(f"{k}: {sum(v) / len(v):.3g}" for k, v in sorted(acc.items()))
    return (f"    bad tiles {bad} of {ti * tj}, by rank along the cluster {dict(sorted(ranks.items()))}\n"
            f"    error by 64-column block of the tile (B box): {by_block(1, bn)}\n"
            f"    error by 64-row block of the tile (A box / warpgroup): {by_block(0, bm)}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("build", "run"):
        sys.exit(__doc__)
    (build if sys.argv[1] == "build" else run)(Path(sys.argv[2]))
