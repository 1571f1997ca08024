"""L2 bandwidth probe (device run): the L2 -> SM read and SM -> L2 write ceilings the hardware
model only estimates, with a DRAM-sized footprint for comparison.

    python3 -m nova.bench.l2_probe --out $OUT     # needs cupy and a GPU; ~10 s on an H200

What is measured: cupy RawKernels stream 16-byte vectors (ld.global.cg / st.global.cg: cached in
L2 only, so L1 never serves a repeated read) over a device buffer of a given footprint.  Every
thread of a grid of k blocks per SM keeps UNROLL independent loads in flight: it reads index
t, t+T, t+2T, ... (T = threads in the grid) wrapped modulo the buffer length, so each round of the
grid reads T consecutive vectors, perfectly coalesced, cycling through the whole buffer.  Loads
are XOR-accumulated into registers and each thread writes one word at the end (the compiler cannot
drop them); stores write a value that depends on index and iteration.  Footprints of 4-32 MB stay
in L2 (warmed by untimed runs first); 1 GB measures DRAM.  Each timed launch moves ~16 GB (>= ~1 ms,
launch overhead negligible), timed with CUDA events; bandwidth = bytes moved / median time of
--reps launches after --warmup.  The SM clock and power are read with nvidia-smi while a burst of
the L2 kernels is queued, to express the ceilings in bytes per clock per SM.

Writes DIR/l2_probe.json (every measurement, device, versions, date, clocks) and prints a table.
Exits with code 2 and one line when cupy or a GPU is missing.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys

UNROLL = 4
SOURCE = r"""
#define UNROLL %(unroll)d
extern "C" __global__ void __launch_bounds__(512, 4)
l2_read(const uint4* __restrict__ buf, unsigned n, unsigned step, unsigned iters, unsigned* out)
{
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned i = t %% n;
    uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll 1
    for (unsigned k = 0; k < iters; ++k) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {          // UNROLL independent loads in flight
            v[u] = __ldcg(buf + i);
            i += step; if (i >= n) i -= n;          // i = (i + T) mod n, step = T mod n
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            acc.x ^= v[u].x; acc.y ^= v[u].y; acc.z ^= v[u].z; acc.w ^= v[u].w;
        }
    }
    out[t] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}

extern "C" __global__ void __launch_bounds__(512, 4)
l2_write(uint4* __restrict__ buf, unsigned n, unsigned step, unsigned iters)
{
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned i = t %% n;
#pragma unroll 1
    for (unsigned k = 0; k < iters; ++k) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            __stcg(buf + i, make_uint4(i, k, i ^ k, t));
            i += step; if (i >= n) i -= n;
        }
    }
}
""" % {"unroll": UNROLL}

MB = 1 << 20
READ_FOOTPRINTS = [4 * MB, 8 * MB, 16 * MB, 24 * MB, 32 * MB, 1024 * MB]
WRITE_FOOTPRINTS = [8 * MB, 16 * MB, 1024 * MB]
CONFIGS = [(4, 512), (8, 256), (8, 512)]      # (blocks per SM, threads per block)
L2_MAX = 32 * MB                              # footprints up to this count as L2-resident


def die(msg: str) -> None:
    print(f"l2_probe: {msg}", file=sys.stderr)
    sys.exit(2)


def version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_smi() -> dict:
    """SM clock (MHz) and power (W) of every GPU, or the error; never raises."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
        out = {"raw": lines}
        for key, val in zip(("sm_mhz", "power_w"), lines[0].split(",")):
            try:
                out[key] = float(val)
            except ValueError:                # "[N/A]"
                pass
        return out
    except Exception as e:                    # missing tool, no GPU line ...
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for l2_probe.json")
    ap.add_argument("--reps", type=int, default=15, help="timed launches per point (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed launches per point")
    ap.add_argument("--gb", type=float, default=16.0, help="GB moved per timed launch")
    args = ap.parse_args(argv)

    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        props = cp.cuda.runtime.getDeviceProperties(0)
    except Exception as e:
        detail = (str(e).splitlines() or [""])[0]
        die(f"needs cupy and an NVIDIA GPU ({type(e).__name__}: {detail})")

    sms = props["multiProcessorCount"]
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    kread, kwrite = mod.get_function("l2_read"), mod.get_function("l2_write")

    def measure(kind: str, footprint: int, bps: int, tpb: int) -> tuple[dict, object]:
        n = footprint // 16                    # 16-byte vectors
        blocks = sms * bps
        threads = blocks * tpb
        iters = max(1, round(args.gb * 1e9 / (threads * UNROLL * 16)))
        moved = threads * UNROLL * iters * 16
        buf = cp.arange(n * 4, dtype=cp.uint32)
        out = cp.empty(threads, dtype=cp.uint32)
        step = cp.uint32(threads % n)
        if kind == "read":
            def launch():
                kread((blocks,), (tpb,), (buf, cp.uint32(n), step, cp.uint32(iters), out))
        else:
            def launch():
                kwrite((blocks,), (tpb,), (buf, cp.uint32(n), step, cp.uint32(iters)))
        for _ in range(args.warmup):           # also warms the buffer into L2
            launch()
        times = []
        for _ in range(args.reps):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            launch()
            e1.record()
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1))
        med = statistics.median(times)
        row = {"kind": kind, "footprint_mb": footprint / MB, "blocks": blocks, "threads_per_block": tpb,
               "loads_per_thread": UNROLL * iters, "bytes": moved, "median_ms": med,
               "min_ms": min(times), "tb_s": moved / (med * 1e-3) / 1e12, "times_ms": times}
        return row, launch

    rows, clocks, best = [], {}, {}
    for kind, footprints in (("read", READ_FOOTPRINTS), ("write", WRITE_FOOTPRINTS)):
        for fp in footprints:
            for bps, tpb in CONFIGS:
                row, launch = measure(kind, fp, bps, tpb)
                rows.append(row)
                if fp <= L2_MAX and row["tb_s"] > best.get(kind, ({}, None))[0].get("tb_s", 0):
                    best[kind] = (row, launch)
            cp.get_default_memory_pool().free_all_blocks()
        if kind in best:                       # clock under load: query while a burst is queued
            row, launch = best[kind]
            for _ in range(max(1, int(300 / row["median_ms"]))):   # ~300 ms of work
                launch()
            clocks[kind] = nvidia_smi()
            cp.cuda.Device().synchronize()
            grid = f"{row['blocks']}x{row['threads_per_block']}"
            clocks[kind]["during"] = f"{row['footprint_mb']:g} MB {kind}, {grid}"

    summary = {}
    for kind, (row, _) in best.items():
        mhz = clocks.get(kind, {}).get("sm_mhz")
        summary[f"best_l2_{kind}_tb_s"] = row["tb_s"]
        summary[f"best_l2_{kind}_at"] = clocks[kind]["during"]
        summary[f"best_l2_{kind}_bytes_per_clk_per_sm"] = (
            row["tb_s"] * 1e12 / (mhz * 1e6) / sms if mhz else None)

    result = {
        "device": name, "sms": sms, "l2_bytes": props["l2CacheSize"],
        "max_sm_clock_mhz": props["clockRate"] / 1e3,
        "cupy": version("cupy") or cp.__version__, "torch": version("torch"),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "unroll": UNROLL, "reps": args.reps, "warmup": args.warmup,
        "formula": "tb_s = bytes / median_ms / 1e9", "clocks": clocks, **summary, "measurements": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "l2_probe.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)

    print(f"{name}: {sms} SMs, L2 {props['l2CacheSize'] / MB:g} MB, UNROLL {UNROLL}, median of {args.reps}")
    print(f"{'kind':5} {'MB':>6} {'grid':>10} {'ms':>8} {'TB/s':>7}")
    for r in rows:
        grid = f"{r['blocks']}x{r['threads_per_block']}"
        print(f"{r['kind']:5} {r['footprint_mb']:6g} {grid:>10} {r['median_ms']:8.3f} {r['tb_s']:7.2f}")
    for kind in best:
        c = clocks.get(kind, {})
        bpc = summary[f"best_l2_{kind}_bytes_per_clk_per_sm"]
        print(f"best L2 {kind}: {summary[f'best_l2_{kind}_tb_s']:.2f} TB/s ({summary[f'best_l2_{kind}_at']})"
              + (f", SM {c['sm_mhz']:g} MHz, {c.get('power_w', '?')} W, {bpc:.1f} B/clk/SM" if bpc else
                 f", SM clock unknown ({c.get('error', c.get('raw'))})"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
