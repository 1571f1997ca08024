"""The skinny kernel's schedule variants on the decode GEMMs it lost to cuBLAS: each problem's derived
schedule, the pick with ``skinny.DEEP_UNROLL`` on for both lane arrangements and no margin (the unroll at its cap weighed too: fewer dependent
trips), with K unsplit, and at an odd N with one element a load (``SHIFTED_COLUMNS`` off; on by default),
each timed by CUDA-graph replay (device time) with L2 warm (the same call
back to back) and cold (a 256 MB buffer written before each call, its own time subtracted), against
cuBLAS the same two ways, every result checked against float64; the model's prediction beside each.

    python3 bench/probes/skinny_variants.py --build     # host with MLIR: .nova-skinny-variants.json (h200, h100)
    python3 bench/probes/skinny_variants.py             # GPU: reads it

With ``--tiles-rows`` (both steps) the problems are ``TILES_SHAPES`` instead: held-out rows of at most 16
rows where the configurator chose the tiles kernel and it ran 1.1-1.3x its prediction, the skinny
kernel's schedules for them timed (files ``.nova-skinny-variants-tiles.json``, ``skinny_variants_tiles.json``).

The variants are derived by the configurator's own steps, one decision changed (``derive_variants``), so
the prediction printed is the model's for exactly the schedule that ran.  With ``$OUT`` set, the rows also go
to ``$OUT/skinny_variants.json`` (schedule, prediction, warm and cold times, cuBLAS's), rewritten after
every kernel.
"""
import json
import os
import sys
from unittest import mock

# (M, N, K, dtype, trans_a, trans_b): held-out decode rows where the skinny kernel ran at 0.4-0.9x cuBLAS
SHAPES = [(8, 1984, 2304, "bf16", False, True), (12, 11557, 8406, "tf32", False, False),
          (3, 7559, 3130, "tf32", False, False), (14, 640, 6016, "bf16", False, True),
          (10, 1088, 1088, "bf16", False, False), (7, 960, 1728, "bf16", False, False),
          (2, 13760, 512, "bf16", False, False), (1, 4480, 3456, "bf16", False, True),
          (3, 4608, 8128, "bf16", False, True), (14, 3383, 3614, "tf32", False, False),
          (12, 1479, 8262, "tf32", False, False), (4, 9984, 8128, "tf32", True, False),
          (10, 4928, 10240, "tf32", False, True), (3, 3264, 320, "tf32", False, False)]
# held-out rows (H100, bench/results/h100-2026-12-07/run99-h100/fresh-cold, run100-h100/fresh) of M <= 16
# where the configurator chose the tiles kernel and it ran 1.1-1.3x its prediction, 0.70-0.88x cuBLAS
TILES_SHAPES = [(1, 5888, 10688, "tf32", True, False), (14, 3840, 9920, "bf16", False, True),
                (12, 3264, 9664, "bf16", False, True), (8, 5696, 5248, "tf32", True, False),
                (16, 5429, 3361, "bf16", False, True), (12, 12480, 1216, "bf16", False, False),
                (3, 15424, 7104, "tf32", False, False), (15, 7744, 6336, "tf32", False, False)]
TILES_ROWS = "--tiles-rows" in sys.argv
if TILES_ROWS:
    SHAPES = TILES_SHAPES
HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = os.path.join(HERE, "..", "..", ".nova-skinny-variants-tiles.json" if TILES_ROWS else
                        ".nova-skinny-variants.json")     # gitignored: PTX and cubins
FLUSH_BYTES = 256 << 20


def derive_variants(problem, target: str) -> dict:
    """{name: (schedule, predicted us)}: "derived" (the configurator's), "most_unroll" (the pick with
    ``skinny.DEEP_UNROLL`` on for both lane arrangements, no margin, where it differs: the unroll at its cap
    weighed too), "one_element"
    (odd N read shifted by default: ``skinny.SHIFTED_COLUMNS`` off) and "one_slice" (splits forced to 1 through the one-wave
    formula); each predicted by the model that derived it."""
    from nova.configurator import configure
    from nova.configurator.derivation import Derivation
    from nova.hwmodel import get_target
    from nova.kernels.gemm import skinny
    gpu = get_target(target)
    out = {}
    try:
        c = configure(problem, gpu, kernel="skinny")
    except ValueError:            # past the target's balance point: the tiles only
        return out
    s = c.schedule
    out["derived"] = (s, c.prediction.time_us)
    with mock.patch.object(skinny, "DEEP_UNROLL", ("n", "k")), mock.patch.object(skinny, "DEEP_UNROLL_MARGIN", 0.0):
        cfg = skinny.configure_skinny(problem, gpu, Derivation())
    if cfg is not None and cfg[0] != s:
        out["most_unroll"] = (cfg[0], cfg[1].time_us)
    if not problem.trans_b and s.row_shift:      # odd N read shifted (the default): one element a load instead
        with mock.patch.object(skinny, "SHIFTED_COLUMNS", False):
            cfg = skinny.configure_skinny(problem, gpu, Derivation())
        if cfg is not None:
            out["one_element"] = (cfg[0], cfg[1].time_us)
    if s.splits > 1:
        with mock.patch.object(skinny.F, "splits", lambda **kw: 1):
            cfg = skinny.configure_skinny(problem, gpu, Derivation())
        if cfg is not None:
            out["one_slice"] = (cfg[0], cfg[1].time_us)
    return out


def build(targets: list[str]) -> int:
    from nova.kernels.gemm.compile import compile_skinny
    from nova.kernels.gemm.problem import GemmProblem
    rows = []
    for target, shape in ((t, s) for t in targets for s in SHAPES):
        p = GemmProblem(*shape)
        for name, (s, us) in derive_variants(p, target).items():
            artifact = compile_skinny(p, s)
            rows.append({"shape": list(shape), "variant": name, "label": s.label(), "predicted_us": us,
                         "schedule": s.to_dict(),
                         "artifact": artifact.to_dict(), "target": target})
            print(f"{target} {p.describe()} {name}: {s.label()} predicted {us:.1f} us", flush=True)
    json.dump(rows, open(VARIANTS, "w"))
    return 0


def device_us(torch, fn, cold: bool = False) -> float:
    """Device microseconds a call of ``fn`` by CUDA-graph replay (``harness.graph_replay``), or with the L2
    flushed before each call (``harness.cold_graph_replay``, a ``FLUSH_BYTES`` write, its own time
    subtracted)."""
    from nova.bench.harness import cold_graph_replay, graph_replay
    call = lambda i: fn()       # noqa: E731
    return (cold_graph_replay(torch, call, 20, FLUSH_BYTES) if cold else graph_replay(torch, call, 20))[0]


def run() -> int:
    import torch
    from nova.codegen.artifact import KernelArtifact
    from nova.hwmodel import get_target
    from nova.kernels.gemm.problem import GemmProblem
    from nova.kernels.gemm.skinny_schedule import SkinnySchedule
    from nova.runtime import driver
    from nova.runtime.matmul import load_resolved, preset_for_device_name
    torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name()
    target = preset_for_device_name(name)
    rows = [r for r in json.load(open(VARIANTS)) if r["target"] == target]
    device = driver.get_device()
    print(f"{name} ({target}); device us by graph replay, warm L2 / cold L2 (a {FLUSH_BYTES >> 20} MB write before "
          f"each call); error against float64")
    cublas_done, measured = {}, []
    for r in rows:
        shape = tuple(r["shape"])
        p = GemmProblem(*shape)
        m, n, k, dt, ta, tb = shape
        ty = torch.float32 if dt == "tf32" else torch.bfloat16
        a = torch.randn(k, m, device="cuda", dtype=ty).t() if ta else torch.randn(m, k, device="cuda", dtype=ty)
        b = torch.randn(n, k, device="cuda", dtype=ty).t() if tb else torch.randn(k, n, device="cuda", dtype=ty)
        ref = a.double() @ b.double()
        if shape not in cublas_done:
            warm = device_us(torch, lambda: torch.matmul(a, b))
            cold = device_us(torch, lambda: torch.matmul(a, b), cold=True)
            cublas_done[shape] = (warm, cold)
            print(f"{p.describe()}: cuBLAS {warm:.1f} / {cold:.1f}")
        schedule = SkinnySchedule.from_dict(r["schedule"])
        artifact = KernelArtifact.from_dict(r["artifact"])
        resolved = load_resolved(p, get_target(target), schedule, artifact, None, "cached", device)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=ty)

        def call():
            resolved.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
        call()
        torch.cuda.synchronize()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        warm = device_us(torch, call)
        cold = device_us(torch, call, cold=True)
        print(f"  {r['variant']:12s} {r['label']:28s} predicted {r['predicted_us']:6.1f}  nova {warm:6.1f} / "
              f"{cold:6.1f}  error {err:.1e}", flush=True)
        measured.append({"shape": list(shape), "variant": r["variant"], "label": r["label"],
                         "schedule": r["schedule"], "predicted_us": r["predicted_us"], "warm_us": warm,
                         "cold_us": cold, "error": err, "cublas_warm_us": cublas_done[shape][0],
                         "cublas_cold_us": cublas_done[shape][1]})
        if os.environ.get("OUT"):              # rewritten after every kernel: a cut-short run keeps what it timed
            json.dump({"device": name, "target": target, "rows": measured},
                      open(os.path.join(os.environ["OUT"], "skinny_variants_tiles.json" if TILES_ROWS else
                                        "skinny_variants.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    if "--build" in sys.argv:
        sys.exit(build(["h200", "h100"]))
    sys.exit(run())
