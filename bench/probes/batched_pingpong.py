"""Which tiles a batched GEMM kernel gets wrong, and whose values it wrote there: the batched ping-pong
TMA-store kernel of 17x300x200x256 bf16 NT (``tests/test_runtime_gpu.py``: relative error ~0.7 in run
124, alone and under memcheck without an error) beside variants that each change one thing -- the
batch, ragged M/N, B's layout, the epilogue (registers), the consumers (one warpgroup).

    python3 bench/probes/batched_pingpong.py build [--target h100]   # host (MLIR): the variants into $NOVA_CACHE_DIR
    python3 bench/probes/batched_pingpong.py run [i ...]             # device, NOVA_OFFLINE=1

The variants (``VARIANTS``), then forced ping-pong rings the schedule rules refuse (``RINGS``: index
len(VARIANTS) + j), built with the rules bypassed.

Per variant: NaN-poisoned output, fresh randn operands, every 64 x 64 tile of every batch element
against float64; prints the wrong tiles (batch, tile row, tile column), the unwritten (NaN) ones, and
for each wrong tile the reference tile it equals, if any (a store to the wrong place)."""
import sys

# (NOVA_PINGPONG, batch, M, N, K, trans_b): the failing pick (ping-pong 64x64, TMA store), then one
# change each; each variant's schedule is the configurator's under that NOVA_PINGPONG (label printed)
VARIANTS = [
    ("64x64", 17, 300, 200, 256, True, "bf16"),
    ("64x64", 17, 320, 256, 256, True, "bf16"),        # M, N whole tiles
    ("64x64", 2, 300, 200, 256, True, "bf16"),         # two matrices
    ("64x64", 17, 300, 200, 256, False, "bf16"),       # B not transposed (NN)
    ("64x64", 16, 300, 200, 256, True, "bf16"),        # an even batch
    ("0", 17, 300, 200, 256, True, "bf16"),            # no ping-pong
    ("128x128", 17, 300, 200, 256, True, "bf16"),      # ping-pong, two slabs a tile
    # one matrix: K tiles (64 deep) 4, 8 (= the 8 stages), 9, 32; the layouts; TF32; many units a CTA
    ("64x64", 1, 300, 200, 256, True, "bf16"),
    ("64x64", 1, 300, 200, 512, True, "bf16"),
    ("64x64", 1, 300, 200, 576, True, "bf16"),
    ("64x64", 1, 300, 200, 2048, True, "bf16"),
    ("64x64", 1, 300, 200, 256, False, "bf16"),
    ("64x64", 1, 1024, 1024, 256, True, "bf16"),
    ("64x64", 1, 300, 200, 256, True, "tf32"),
    ("64x64", 17, 300, 200, 2048, True, "bf16"),
]
# Forced ping-pong rings (the schedule rules bypassed: an experiment), the ones measured wrong or
# faulting as descriptor sums (run 128; ``nova/codegen/sass.py`` found ptxas had left their wgmma
# descriptors' high word unwritten), now built as the compile builds them (masked fields where the
# SASS shows it), and one measured right: (batch, M, N, K, trans_b, dtype, tile N, epilogue, stages)
RINGS = [
    (17, 300, 200, 256, True, "bf16", 64, "tma_store", 8),
    (1, 300, 200, 256, True, "bf16", 64, "tma_store", 8),
    (1, 1024, 1024, 256, True, "bf16", 64, "tma_store", 8),
    (1, 4000, 4004, 64, True, "bf16", 192, "registers", 2),
    (1, 1023, 1025, 40, False, "bf16", 64, "registers", 2),
    (1, 4000, 4004, 64, True, "bf16", 192, "registers", 7),
]
TILE = 64


class _RulesBypassed:
    """Within it, ping-pong rings the schedule rules refuse can be scheduled and built."""
    def __enter__(self):
        from nova.kernels.gemm import emit_hopper, hopper
        self.saved = emit_hopper.check_supported, hopper.pingpong_blocker
        emit_hopper.check_supported, hopper.pingpong_blocker = (lambda *a: None), (lambda *a, **k: None)

    def __exit__(self, *exc):
        from nova.kernels.gemm import emit_hopper, hopper
        emit_hopper.check_supported, hopper.pingpong_blocker = self.saved


def case(i: int, target):
    """Variant ``i`` (VARIANTS, then RINGS): (its shape (batch, M, N, K, trans_b, dtype), its schedule)."""
    if i < len(VARIANTS):
        pingpong, *shape = VARIANTS[i]
        return shape, schedule_of(pingpong, problem_of(*shape), target)
    *shape, n, epilogue, stages = RINGS[i - len(VARIANTS)]
    from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
    p = problem_of(*shape)
    with _RulesBypassed():
        return shape, wgmma_schedule(p, target, operand_plan(p), 2, n, 1, stages, 8, epilogue=epilogue, pingpong=1)


def problem_of(batch, M, N, K, trans_b, dtype):
    from nova.kernels.gemm.problem import GemmProblem
    return GemmProblem(M=M, N=N, K=K, dtype=dtype, trans_b=trans_b, batch=batch)


def schedule_of(pingpong, p, target):
    from nova import options
    from nova.configurator import configure
    opts = options.parse({"NOVA_PINGPONG": pingpong})
    return configure(p, target, options=opts, kernel="tiles").schedule


def build(target: str) -> None:
    from nova.hwmodel import get_target
    from nova.kernels.gemm.family import get_or_compile
    from nova.kernels.gemm.space import label
    gpu = get_target(target)
    for i in range(len(VARIANTS) + len(RINGS)):
        shape, s = case(i, gpu)
        p = problem_of(*shape)
        with _RulesBypassed():
            _, key, status = get_or_compile(p, s, gpu, None, offline=False)
        print(f"{status:8s} {key[:10]} {p.describe()} [{label(s)}{' tma-store' if s.hopper.tma_store else ''}]",
              flush=True)


def run(which: list[int]) -> None:
    """The variants ``which`` (indices into VARIANTS), in this process."""
    import torch
    from nova.bench.tune import load_schedule
    from nova.hwmodel import get_target
    from nova.runtime import driver
    target = get_target("h200" if "H200" in torch.cuda.get_device_name() else "h100")
    from nova.kernels.gemm.space import label as label_of
    for i in which:
        shape, s = case(i, target)
        batch, M, N, K, trans_b, dtype = shape
        p = problem_of(*shape)
        label = label_of(s) + (" tma-store" if s.hopper.tma_store else "")
        resolved = load_schedule(p, s, target, None, driver.get_device())
        gen = torch.Generator(device="cuda").manual_seed(11)
        dt = torch.bfloat16 if dtype == "bf16" else torch.float32
        a = torch.randn(batch, M, K, device="cuda", generator=gen).to(dt)
        b = (torch.randn(batch, N, K, device="cuda", generator=gen).to(dt) if trans_b
             else torch.randn(batch, K, N, device="cuda", generator=gen).to(dt))
        out = torch.full((batch, M, N), float("nan"), device="cuda", dtype=dt)
        resolved.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        ref = a.double() @ (b.double().transpose(1, 2) if trans_b else b.double())
        got = out.double()
        err = float(((got - ref).norm() / ref.norm()).item()) if not torch.isnan(got).any() else float("nan")
        wrong, unwritten, moved = [], [], []
        tiles = [(z, i, j) for z in range(batch) for i in range(0, M, TILE) for j in range(0, N, TILE)]
        refs = {t: ref[t[0], t[1]:t[1] + TILE, t[2]:t[2] + TILE] for t in tiles}
        for t in tiles:
            g, r = got[t[0], t[1]:t[1] + TILE, t[2]:t[2] + TILE], refs[t]
            if torch.isnan(g).any():
                unwritten.append(t)
                continue
            if float((g - r).norm() / r.norm()) > 2e-2:
                wrong.append(t)
                for u, ru in refs.items():
                    if ru.shape == g.shape and float((g - ru).norm() / ru.norm()) < 2e-2:
                        moved.append((t, u))
                        break
        print(f"{p.describe()} [{label}]: error {err:.2e}; {len(wrong)} wrong and {len(unwritten)} unwritten of "
              f"{len(tiles)} tiles (batch, row, col)", flush=True)
        print(f"  wrong {wrong[:10]}\n  unwritten {unwritten[:10]}\n  equal to another tile (got, its reference): "
              f"{moved[:10]}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        build(sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else "h200")
    else:           # run [i ...]: those variants (default all), each best in its own process: a fault ends it
        run([int(i) for i in sys.argv[2:]] or list(range(len(VARIANTS) + len(RINGS))))
