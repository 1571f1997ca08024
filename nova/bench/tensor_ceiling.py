"""The measured power-limited tensor ceiling, and the
large squares against it.

    # host (MLIR + ptxas): build the probe kernels into DIR
    python3 -m nova.bench.tensor_ceiling build --out DIR
    # device: the probe, then Nova, cuBLAS and XLA on the large squares, each sustained
    NOVA_OFFLINE=1 python3 -m nova.bench.tensor_ceiling run --kernels DIR --out $OUT

**What the ceiling is.**  On the H200 a GEMM that keeps the tensor cores busy reaches the 700 W
board cap and the SM clock falls (1980 MHz -> ~1.42 GHz, bench/NOTES.md v0.6d), so the datasheet
peak is not a ceiling any kernel can reach on this machine.  The ceiling measured here is the
throughput of a kernel that does *nothing but* the tensor cores' work: every SM runs ``Probe.warpgroups``
warpgroups of back-to-back ``wgmma.mma_async.m64n256k{8,16}`` reading their operands from shared
memory (a ring of ``STAGES`` slots of random data, loaded once, so consecutive wgmmas read different
operands as they do in a GEMM), with no global-memory traffic, no TMA, no epilogue.  It spends
every joule on the tensor cores, so its sustained clock is the highest any GEMM can hold at the cap
with the same data, and ``flops / time`` over its sustained window is an upper bound on a GEMM's
sustained FLOP/s on this machine.  A GEMM also moves its operands (L2, shared memory, DRAM) and
that energy lowers its clock; the gap between a GEMM and this ceiling is that energy plus the
GEMM's own losses (fills, epilogue, tails).

Each kernel (and each library's GEMM) runs back to back for ``--seconds`` while nvidia-smi samples
the SM clock and board power every 50 ms; reported are the time per call over the second half
(the power state settled), its FLOP/s, the median clock and power there, and FLOP/s over
``tensor FLOP/clk/SM x SMs x the median clock`` (the tensor pipe's use at the clock it held).
The probe's data is ``randn`` (the benchmarks' data; the tensor cores' power depends on it: the
ceiling is the fastest probe on it) and, for reference, zeros (far below the power cap: each
structure's rate per clock at the maximum clock).

Writes ``OUT/tensor_ceiling.json`` (every row with its clock trace) and ``OUT/tensor_ceiling.md``.  Exits with code 2 and one line
when a GPU, a kernel file or JAX is missing.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nova.codegen.builder import SMEM, Ir
from nova.codegen.nvgpu import (KMAJOR_LEADING_BYTE_OFFSET, SM90A, SWIZZLE_ATOM_BYTES, SWIZZLE_BYTES, WARPGROUP_THREADS,
                                aligned_dynamic_shared_memory, descriptor, descriptor_high_constant,
                                fence_proxy_async_shared, named_barrier_arrive, named_barrier_sync, wgmma_attributes,
                                wgmma_commit_group, wgmma_fence, wgmma_wait_group)


class CeilingError(RuntimeError):
    """A measurement that cannot run or went wrong; ``main`` prints it as one line and exits with 2."""

KERNEL_NAME = "nova_tensor_ceiling"
B_ROWS = 256                         # B rows per slot: the widest wgmma N, as the GEMMs' 128x256 tiles
STAGES = 4                           # ring slots, each (warpgroups x 64 rows of A, B_ROWS rows of B)
ITERATIONS = 16384                   # slots consumed per launch (~11 ms at 1.45 GHz with 2 warpgroups)
ALIGN = SWIZZLE_ATOM_BYTES           # the ring starts on the 128-byte swizzle's atom (8 rows x 128 B)
KSTEP = {"tf32": 8, "bf16": 16}      # wgmma K per instruction
ELEMENT_BYTES = {"tf32": 4, "bf16": 2}
SQUARES = ((8192, 8192, 8192, "tf32"), (8192, 8192, 8192, "bf16"),
           (4096, 4096, 4096, "tf32"), (4096, 4096, 4096, "bf16"))


@dataclass(frozen=True)
class Probe:
    """One probe kernel: ``warpgroups`` per CTA (one CTA per SM), each running ``chains`` independent
    accumulator chains of ``wgmma.m64n{B_ROWS / chains}`` (chain c reads B's rows c x n ..), so every
    variant does the same FLOP per warpgroup and slot.  The default (2, 1) is the cooperative GEMM's
    consumer structure; the others check that it is not what limits the rate per clock.  ``turns``: the
    two warpgroups take turns, slot by slot (warpgroup w bar.syncs on named barrier 1 + w before its
    wgmmas and bar.arrives on the other's after committing them), so one warpgroup's wgmmas are
    issued at a time, as with one warpgroup, while two hold accumulators."""
    dtype: str
    warpgroups: int = 2
    chains: int = 1
    turns: bool = False      # two warpgroups take turns per slot (named barriers): one issues wgmma at a time

    @property
    def n(self) -> int:
        return B_ROWS // self.chains

    @property
    def name(self) -> str:
        return f"{self.dtype}_wg{self.warpgroups}_chains{self.chains}" + ("_turns" if self.turns else "")

    @property
    def threads(self) -> int:
        return self.warpgroups * WARPGROUP_THREADS

    def slot_bytes(self) -> int:
        """One ring slot: A (warpgroups x 64 rows) and B (B_ROWS rows), 128 bytes of K per row."""
        return (self.warpgroups * 64 + B_ROWS) * SWIZZLE_BYTES

    def smem_bytes(self) -> int:
        return STAGES * self.slot_bytes() + ALIGN

    def flops_per_launch(self, ctas: int) -> int:
        """2 x 64 x B_ROWS x (128 B of K / element bytes) per warpgroup and slot."""
        return ctas * self.warpgroups * ITERATIONS * 2 * 64 * B_ROWS * (SWIZZLE_BYTES // ELEMENT_BYTES[self.dtype])


PROBES = (Probe("tf32"), Probe("bf16"), Probe("tf32", 1), Probe("bf16", 1), Probe("tf32", 3), Probe("bf16", 3),
          Probe("tf32", 2, 2), Probe("bf16", 2, 2), Probe("tf32", turns=True), Probe("bf16", turns=True))


def build_module(probe: Probe, ctas: int) -> str:
    """MLIR of the probe: fill the ring from ``src`` (one slice per CTA), then ``ITERATIONS`` slots of
    4 (TF32: k8; BF16: k16) wgmma k-steps per chain and warpgroup, one group in flight, and one FP32
    sum per thread into ``dst`` (so nothing is dead)."""
    dtype = probe.dtype
    if dtype not in KSTEP:
        raise ValueError(f"dtype {dtype!r}: the probe runs {', '.join(KSTEP)}")
    if probe.turns and probe.warpgroups != 2:
        raise ValueError(f"{probe.name}: turns are between two warpgroups")
    ir = Ir(("src", "dst", "it", "w") + tuple(f"acc{c}" for c in range(probe.chains)))
    threads = probe.threads
    words = STAGES * probe.slot_bytes() // 4
    kstep = KSTEP[dtype]
    steps = SWIZZLE_BYTES // (kstep * ELEMENT_BYTES[dtype])
    nacc = probe.n // 2
    acc_t = "!llvm.struct<(" + ", ".join(["f32"] * nacc) + ")>"
    src_t, dst_t = f"memref<{ctas * words}xi32>", f"memref<{ctas * threads}xf32>"
    ring_t = f"memref<{words}xi32, {SMEM}>"
    ir.emit(f"// Nova tensor-ceiling probe ({dtype}): {probe.warpgroups} warpgroup(s) x {probe.chains} chain(s) of "
            f"wgmma.m64n{probe.n}k{kstep} from a {STAGES}-slot shared-memory ring, {ITERATIONS} slots per launch, "
            "no global traffic in the loop")
    ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
    with ir.kernel(KERNEL_NAME, [f"%src: {src_t}", f"%dst: {dst_t}"], threads):
        tid = ir.let("tid", "gpu.thread_id x")
        bid = ir.let("bid", "gpu.block_id x")
        dsm, addr, aligned = aligned_dynamic_shared_memory(ir, ALIGN)
        ring = ir.let("ring", f"memref.view {dsm}[{ir.v(ir.sub(aligned, addr, 'ring_off'))}][] : "
                              f"memref<?xi8, {SMEM}> to {ring_t}")
        ir.comment("---- fill the ring with this CTA's slice of src (random data), once")
        base = ir.mul(bid, words, "src_base")
        with ir.region(f"scf.for %w = {ir.v(tid)} to {ir.v(words)} step {ir.v(threads)} {{"):
            x = ir.let("x", f"memref.load %src[{ir.v(ir.add(base, '%w', 'src_at'))}] : {src_t}")
            ir.emit(f"memref.store {x}, {ring}[%w] : {ring_t}")
        fence_proxy_async_shared(ir)
        ir.emit("gpu.barrier")
        ir.comment("---- every warpgroup: wgmma over the ring's slots, one group in flight")
        wg = ir.div(tid, WARPGROUP_THREADS, "wg")
        ring_enc = ir.div(aligned, 16, "ring_enc")
        a_enc = ir.add(ring_enc, ir.mul(wg, 64 * SWIZZLE_BYTES // 16, "wg_enc"), "a_enc")
        b_enc = ir.add(ring_enc, probe.warpgroups * 64 * SWIZZLE_BYTES // 16, "b_enc")
        hi = descriptor_high_constant(ir, "desc_hi", KMAJOR_LEADING_BYTE_OFFSET)     # as the GEMM kernel's
        attrs = wgmma_attributes(probe.n, kstep, dtype)

        def desc(enc):
            return descriptor(ir, enc, hi)
        zero = ir.let("zero_acc", f"llvm.mlir.zero : {acc_t}")
        chains = [f"%acc{c}" for c in range(probe.chains)]
        result = ir.fresh("acc_end")
        finals = [result] if probe.chains == 1 else [f"{result}#{c}" for c in range(probe.chains)]
        names = ", ".join(f"{c} = {zero}" for c in chains)
        types = ", ".join([acc_t] * len(chains))
        if probe.turns:
            mine = ir.let("turn_mine", f"arith.index_cast {ir.v(ir.add(wg, 1, 'turn_mine_idx'))} : index to i32")
            other = ir.let("turn_other", f"arith.index_cast {ir.v(ir.sub(2, wg, 'turn_other_idx'))} : index to i32")
            both = ir.let("turn_threads", f"arith.constant {2 * WARPGROUP_THREADS} : i32")
        with ir.region(f"{result}{'' if probe.chains == 1 else f':{probe.chains}'} = scf.for %it = {ir.v(0)} to {ir.v(ITERATIONS)} step {ir.v(1)} "
                       f"iter_args({names}) -> ({types}) {{"):
            slot_enc = ir.mul(ir.rem("%it", STAGES, "slot"), probe.slot_bytes() // 16, "slot_enc")
            accs = list(chains)
            if probe.turns:    # warpgroup 0's first slot goes first; every later one waits for its turn
                ir.guarded(ir.cmp("sgt", ir.add(wg, "%it", "turn_count"), 0, "turn_wait"),
                           lambda: named_barrier_sync(ir, mine, both))
            wgmma_fence(ir)
            for kk in range(steps):
                step_enc = kk * kstep * ELEMENT_BYTES[dtype] // 16
                da = desc(ir.add(ir.add(a_enc, slot_enc, "a_slot"), step_enc, "a_k"))
                for c in range(probe.chains):
                    b_rows = c * probe.n * SWIZZLE_BYTES // 16
                    db = desc(ir.add(ir.add(ir.add(b_enc, b_rows, "b_chain"), slot_enc, "b_slot"), step_enc, "b_k"))
                    accs[c] = ir.let("acc_k", f'"nvvm.wgmma.mma_async"({accs[c]}, {da}, {db}) <{{{attrs}}}> : '
                                              f"({acc_t}, i64, i64) -> {acc_t}")
            wgmma_commit_group(ir)
            if probe.turns:    # the other's turn, except after warpgroup 1's last slot (every arrival is waited for)
                ir.guarded(ir.cmp("slt", ir.add(wg, "%it", "turn_count"), ITERATIONS, "turn_pass"),
                           lambda: named_barrier_arrive(ir, other, both))
            wgmma_wait_group(ir, 1)
            ir.emit(f"scf.yield {', '.join(accs)} : {types}")
        wgmma_wait_group(ir, 0)
        ir.comment("---- one sum per thread, so the accumulators are live")
        s = None
        for f in finals:
            for i in range(nacc):
                a = ir.let("a", f"llvm.extractvalue {f}[{i}] : {acc_t}")
                s = a if s is None else ir.let("sum", f"arith.addf {s}, {a} : f32")
        at = ir.add(ir.mul(bid, threads, "dst_base"), tid, "dst_at")
        ir.emit(f"memref.store {s}, %dst[{ir.v(at)}] : {dst_t}")
        ir.emit("gpu.return")
    return ir.text()


def compile_probe(probe: Probe, ctas: int):
    """The probe's ``KernelArtifact`` for sm_90a (MLIR -> PTX -> cubin, on the host)."""
    from nova.codegen import lower_and_assemble
    from nova.codegen.artifact import KernelArtifact
    arch = SM90A
    ptx, cubin, resources, version = lower_and_assemble(build_module(probe, ctas), arch, KERNEL_NAME,
                                                        f"the tensor-ceiling probe ({probe.name})")
    return KernelArtifact(name=KERNEL_NAME, arch=arch, ptx=ptx, grid=(ctas, 1, 1), block=(probe.threads, 1, 1),
                          smem_bytes=probe.smem_bytes(), params=("src", "dst"), cubin=cubin, resources=resources,
                          meta={"probe": asdict(probe), "ptxas": version, "iterations": ITERATIONS, "stages": STAGES})


# ------------------------------------------------------------------------------------------------
# device side
# ------------------------------------------------------------------------------------------------
def sustained(fn, sync, seconds):
    """``fn(i)`` back to back for ``seconds`` in chunks of ~50 ms of calls, each a ``harness.wall_per_call``
    (a fixed call count between two ``sync()``: no more than one chunk is ever queued, so a chunk's wall
    time cannot hide the boost period in launches queued earlier), while a ``harness.ClockSampler``
    samples nvidia-smi every 50 ms.  Returns (us per call over the second half of the chunks, us per
    call of the first chunk, median MHz, median W over the second half, samples, the sampler's trace)."""
    from nova.bench.harness import ClockSampler, wall_per_call
    clocks = ClockSampler(interval_ms=50).start()
    time.sleep(0.3)
    wall_per_call(fn, sync, 1)                                  # warm-up
    per_chunk = max(1, int(50_000 / wall_per_call(fn, sync, 1)))
    marks, t_end = [], time.time() + seconds
    while time.time() < t_end:
        t0 = time.time()
        us = wall_per_call(fn, sync, per_chunk)
        marks.append((t0, time.time(), us))
    time.sleep(0.1)
    clocks.stop()
    half = marks[len(marks) // 2:]
    summary = clocks.summary([(half[0][0], half[-1][1])], t0=marks[0][0]) or {}
    return (statistics.mean(us for _, _, us in half), marks[0][2], summary.get("timed_sm_mhz_median"),
            summary.get("timed_power_w_median"), summary.get("timed_samples", 0), summary.get("trace"))


def run(kernels_dir: Path, out: Path, seconds: float, libraries: tuple[str, ...],
        data: tuple[str, ...] = ("randn", "zeros")) -> list[dict]:
    import torch

    from nova.hwmodel import get_target
    from nova.runtime.driver import get_device, load_kernel
    from nova.codegen.artifact import KernelArtifact
    out.mkdir(parents=True, exist_ok=True)
    device = get_device()
    model = get_target("auto")          # the live GPU's preset: its SMs and tensor FLOP/clk
    rows = []

    def record(row, us, first_us, mhz, watts, n, trace, flop, dtype):
        peak_clk = model.tc_flops_per_clk_sm("wgmma", dtype) * model.sm_count
        row.update(us=us, first_us=first_us, tflops=flop / us / 1e6, first_tflops=flop / first_us / 1e6,
                   sm_mhz=mhz, power_w=watts, samples=n, clock_trace=trace,
                   pipe_use=(flop / us / 1e6) / (peak_clk * mhz * 1e6 / 1e12) if mhz else None)
        rows.append(row)
        print(f"{row['what']:>34} {dtype}  {us:9.1f} us  {row['tflops']:6.1f} TFLOP/s (first 50 ms {row['first_tflops']:6.1f})"
              f"  {mhz} MHz  {watts} W  pipe {row['pipe_use'] or 0:.3f}", flush=True)

    paths = sorted(kernels_dir.glob("tensor_ceiling_*.json")) if kernels_dir is not None else []
    if kernels_dir is not None and not paths:
        raise CeilingError(f"no probe kernels in {kernels_dir}; build them on the host first "
                           f"(python3 -m nova.bench.tensor_ceiling build --out {kernels_dir})")
    for path in paths:
        art = KernelArtifact.from_dict(json.loads(path.read_text()))
        probe = Probe(**art.meta["probe"])
        kernel = load_kernel(art, device, f"the tensor-ceiling probe ({probe.name})")
        ctas = art.grid[0]
        words = ctas * STAGES * probe.slot_bytes() // 4
        dst = torch.full((ctas * probe.threads,), float("nan"), device="cuda")
        tdt = torch.float32 if probe.dtype == "tf32" else torch.bfloat16
        count = words * 4 // torch.tensor([], dtype=tdt).element_size()
        for fill in data:
            src = (torch.randn(count, device="cuda") if fill == "randn" else torch.zeros(count, device="cuda")).to(tdt)
            stream = torch.cuda.current_stream().cuda_stream

            def launch(i=0):
                kernel.launch([src.data_ptr(), dst.data_ptr()], stream)
            res = sustained(launch, torch.cuda.synchronize, seconds)
            torch.cuda.synchronize()
            if not torch.isfinite(dst).all():
                raise CeilingError(f"the {probe.name} probe left non-finite sums: it did not run")
            record({"what": f"probe {probe.name} ({fill})", "kind": "probe", "data": fill, "dtype": probe.dtype,
                    "probe": asdict(probe), "shape": None}, *res, probe.flops_per_launch(ctas), probe.dtype)
    if libraries:
        _squares(seconds, libraries, record)
    return rows


def _squares(seconds, libraries, record):
    """Nova, cuBLAS (torch) and XLA on ``SQUARES`` (C = A.B, both row-major), each sustained alone."""
    import torch

    import nova
    from nova.bench.harness import TOLERANCE, nan_output, reference, rel_fro
    torch.backends.cuda.matmul.allow_tf32 = True
    jax = jnp = None
    if "xla" in libraries:
        import jax
        import jax.numpy as jnp
    for M, N_, K, dtype in SQUARES:
        tdt = torch.float32 if dtype == "tf32" else torch.bfloat16
        a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N_, device="cuda").to(tdt)
        c = nan_output(torch, M, N_, "f32" if dtype == "tf32" else "bf16")
        state = {"xla_last": None}

        def sync():                        # a device sync that also waits for XLA's own stream
            torch.cuda.synchronize()
            if state["xla_last"] is not None:
                state["xla_last"].block_until_ready()
        fns = {"nova": lambda i=0: nova.matmul(a, b, out=c), "cublas": lambda i=0: torch.mm(a, b, out=c)}
        if jax is not None:
            ja = jnp.asarray(a.float().cpu().numpy()).astype(jnp.bfloat16 if dtype == "bf16" else jnp.float32)
            jb = jnp.asarray(b.float().cpu().numpy()).astype(ja.dtype)
            xla = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.DEFAULT))
            xla(ja, jb).block_until_ready()

            def xla_fn(i=0):
                state["xla_last"] = xla(ja, jb)
            fns["xla"] = xla_fn
        nova.matmul(a, b, out=c)           # correct before timed: NaN-poisoned C against float64
        error = rel_fro(c, reference(torch, a, b))
        if not error <= TOLERANCE[dtype]:
            raise CeilingError(f"Nova's {M}x{N_}x{K} {dtype} is off by {error:.3g} (relative Frobenius error vs "
                               f"float64; tolerance {TOLERANCE[dtype]:g})")
        for lib in libraries:
            res = sustained(fns[lib], sync, seconds)
            record({"what": f"{lib} {M}x{N_}x{K} NN", "kind": lib, "dtype": dtype, "shape": [M, N_, K]},
                   *res, 2 * M * N_ * K, dtype)


def ceilings(rows: list[dict]) -> dict:
    """Per dtype, the measured power-limited ceiling: the fastest probe on random data, as
    ``{dtype: {"tflops", "sm_mhz", "power_w", "probe", "pipe_use"}}`` (the figures
    ``nova/hwmodel/calibration/<preset>.wgmma.json`` stores under ``ceiling``)."""
    best = {}
    for r in rows:
        if r["kind"] == "probe" and r["data"] == "randn" and r["tflops"] > best.get(r["dtype"], {}).get("tflops", 0.0):
            best[r["dtype"]] = {"tflops": round(r["tflops"], 1), "sm_mhz": r["sm_mhz"], "power_w": r["power_w"],
                                "probe": r["what"], "pipe_use": round(r["pipe_use"], 3)}
    return best


def report(rows: list[dict]) -> str:
    """The markdown table: each row against its dtype's two ceilings, both from the probes on random
    data: the fastest probe's sustained FLOP/s (what any kernel holds at the power cap), and the
    probes' best tensor-pipe use per clock (what the tensor cores deliver per cycle) at the clock the
    row itself held."""
    ceiling = {dtype: c["tflops"] for dtype, c in ceilings(rows).items()}
    per_clock = {}
    for r in rows:
        if r["kind"] == "probe" and r["data"] == "randn":
            per_clock[r["dtype"]] = max(per_clock.get(r["dtype"], 0.0), r["pipe_use"] or 0.0)
    nan = float("nan")
    lines = ["| what | dtype | us | TFLOP/s | of the ceiling | SM MHz | W | tensor pipe at that clock "
             "| of the probes' rate at that clock |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        frac = r["tflops"] / ceiling[r["dtype"]] if r["dtype"] in ceiling else nan
        clock_frac = (r["pipe_use"] or nan) / per_clock[r["dtype"]] if per_clock.get(r["dtype"]) else nan
        lines.append(f"| {r['what']} | {r['dtype']} | {r['us']:.1f} | {r['tflops']:.1f} | {frac:.3f} | "
                     f"{r['sm_mhz']} | {r['power_w']} | {r['pipe_use'] or nan:.3f} | {clock_frac:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.tensor_ceiling", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="host: build the probe kernels (MLIR, ptxas) into --out")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--ctas", type=int, default=132, help="CTAs, one per SM (default 132, the H200's SMs)")
    r = sub.add_parser("run", help="device: the probe and the squares, sustained, with clocks and power")
    r.add_argument("--kernels", type=Path, help="the directory `build` wrote (omitted: the squares only)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seconds", type=float, default=4.0, help="back-to-back seconds per measurement (default 4)")
    r.add_argument("--data", default="randn,zeros",
                   help="comma-separated probe data, of randn (the ceiling's) and zeros (default both)")
    r.add_argument("--libraries", default="nova,cublas,xla",
                   help="comma-separated, of nova, cublas, xla; empty: the probe only")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        args.out.mkdir(parents=True, exist_ok=True)
        from nova.codegen import CodegenError
        for probe in PROBES:
            try:
                art = compile_probe(probe, args.ctas)
            except (CodegenError, ImportError) as e:
                print(f"nova.bench.tensor_ceiling: building {probe.name}: {str(e).splitlines()[0]}", file=sys.stderr)
                return 2
            (args.out / f"tensor_ceiling_{probe.name}.json").write_text(json.dumps(art.to_dict()))
            print(f"{probe.name}: {art.resources['registers']} registers, "
                  f"{art.resources['spill_store_bytes']} B spilled, {probe.smem_bytes()} B shared memory")
        return 0
    libraries = tuple(x for x in args.libraries.split(",") if x)
    bad = set(libraries) - {"nova", "cublas", "xla"}
    if bad:
        print(f"nova.bench.tensor_ceiling: unknown libraries {sorted(bad)} (nova, cublas, xla)", file=sys.stderr)
        return 2
    data = tuple(x for x in args.data.split(",") if x)
    if not data or set(data) - {"randn", "zeros"}:
        print(f"nova.bench.tensor_ceiling: --data {args.data!r}: randn and/or zeros", file=sys.stderr)
        return 2
    from nova.runtime.driver import gpu_available
    if not gpu_available():
        print("nova.bench.tensor_ceiling: no GPU visible (run it on the device)", file=sys.stderr)
        return 2
    if "xla" in libraries and importlib.util.find_spec("jax") is None:
        print("nova.bench.tensor_ceiling: --libraries has xla but JAX is not installed", file=sys.stderr)
        return 2
    try:
        rows = run(args.kernels, args.out, args.seconds, libraries, data)
    except CeilingError as e:
        print(f"nova.bench.tensor_ceiling: {e}", file=sys.stderr)
        return 2
    (args.out / "tensor_ceiling.json").write_text(json.dumps(
        {"date": datetime.datetime.now().isoformat(timespec="seconds"), "rows": rows}, indent=1))
    (args.out / "tensor_ceiling.md").write_text(report(rows))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
