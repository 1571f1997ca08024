"""GPU presets.  Every primary number states its source; derived figures come from ``model.py``.
Each chip's own figures (SMs, clock, L2, DRAM, ...) are in gpus.toml beside this file, one table per
GPU; the per-SM limits of its compute capability and its tensor-core rates are below.

Sources, abbreviated here and in gpus.toml:
  [CC]      CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (CUDA 12/13)
  [GA102]   NVIDIA Ampere GA102 GPU Architecture whitepaper (2021), incl. RTX 3080 TF32/FP16 tables
  [A100]    NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020) and A100 80GB datasheet
  [AD102]   NVIDIA Ada GPU Architecture whitepaper (2023), RTX 4090 tables
  [H100]    NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022) and H100 SXM datasheet
  [H200]    NVIDIA H200 datasheet (2024): H100 compute with 141 GB HBM3e at 4.8 TB/s
  [NCCL]    NCCL's tuning model (github.com/NVIDIA/nccl, src/graph/tuning.cc): the latency of a
            collective = base latency + ring steps x per-step hardware latency
  [3060]    GeForce RTX 3060 12 GB product specifications (3,584 CUDA cores, 1.78 GHz boost,
            15 Gbps x 192-bit GDDR6 = 360 GB/s)
  [MEASURED] measured on the device machine by a nova.bench job, with the results file named
  [EST]     an estimate, not a datasheet figure: stated with its reasoning, refined by the
            calibration (nova/hwmodel/calibration).  Never used to make a schedule illegal, only to rank.
Dense tensor-core rates are FLOP per clock per SM (1 FMA = 2 FLOP), computed from the
whitepapers' dense (not sparse) TFLOP/s at the boost clock they assume.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from nova.dtypes import MODES
from nova.hwmodel.model import GPUModel, Quantity as Q

KB = 1024

# The primary figures of every preset (their values and sources in gpus.toml, beside this file), in
# the order a GPUModel lists them, with their units.
UNITS = {"sm_count": "SMs", "clock_hz": "Hz", "fp32_lanes_per_sm": "lanes", "l2_bytes": "B", "dram_bw": "B/s",
         "l2_bytes_per_clk": "B/clk", "l2_tma_bytes_per_clk": "B/clk", "mem_latency_ns": "ns",
         "launch_overhead_us": "us", "max_cluster_size": "blocks", "link_bw": "B/s", "link_base_latency_us": "us",
         "link_step_latency_us": "us", "memory_bytes": "B", "host_link_bw": "B/s", "host_copy_slowdown": "fraction",
         "host_call_us": "us", "host_launch_us": "us"}
GPU_FIGURES = tomllib.loads(Path(__file__).with_name("gpus.toml").read_text(encoding="utf-8"))

LOADED_LATENCY_HBM = Q(800, "ns", "[EST] loaded DRAM latency: ~500 ns idle load-to-use on HBM parts (Jia et al., "
                       "Luo et al. microbenchmarks) plus queueing when every SM streams at once")
LOADED_LATENCY_GDDR = Q(1000, "ns", "[EST] loaded DRAM latency: ~600 ns idle load-to-use on GDDR parts (Jia et al. "
                        "microbenchmarks) plus queueing when every SM streams at once")

TMA_L2_B_PER_CLK_SM = 14.2e12 / 1.980e9 / 132      # 54.3 B/clk/SM: 14.2 TB/s at 1,980 MHz

# Instruction shapes (m, n, k) per GEMM mode; k is 32 bytes of the input type (nova/dtypes.py)
MMA_SYNC_SHAPES = {m: (16, 8, e.mma_k) for m, e in MODES.items()}
WGMMA_SHAPES = {m: (64, 256, e.mma_k) for m, e in MODES.items()}      # n in 8..256
MMA_SYNC_TF32_SHARE_SM90 = 0.36   # [FITTED] TF32 mma.sync's sustained share of the wgmma TF32 rate (``_hopper``)
LAUNCH_OVERHEAD = Q(3.0, "us", "[EST] CUDA driver launch + kernel start, typical")
HOST_CALL = Q(14.0, "us", "[EST] the host time of an eager nova.matmul call of one launch (Python, the driver's "
              "launch), as measured on the Hopper device machines (gpus.toml)")
HOST_COPY_SLOWDOWN = Q(0.03, "fraction", "[MEASURED on an H100, EST elsewhere] how much slower a step's kernels "
                       "run while a copy to or from page-locked host memory is on the link: HF Llama-42M b32, the "
                       "lean plan with 368 MiB offloaded ran 0.36-0.54 ms a step slower than the fast plan (runs 98-99, "
                       "bench/results/h100-2026-12-07/; ~0.04 ms of it priced loss chunks and recomputes) and 0.53-0.81 "
                       "ms slower than the same plan without the offload (run 99's clean repeat): 0.023-0.053 of the "
                       "2 x 368 MiB copies' 15 ms on a 50 GB/s link; a TF32 GEMM loop beside copies "
                       "(bench/results/h100-2026-12-05/run50): 0.03-0.15")
HOST_LAUNCH = Q(6.0, "us", "[EST] each further launch of an eager call (an operand prep, split-K's second "
                "launch), as measured on the Hopper device machines (gpus.toml)")


def _figures(*tables: str, **given: Q) -> dict:
    """The primary figures of a preset, in ``UNITS`` order: the ``[value, source]`` pairs of the
    gpus.toml ``tables`` (a chip's, then a product's that adds its own), the ``given`` quantities,
    the launch overhead, where the tables measure none, the host time of an eager call, and for a part
    with a host link, the kernels' slowdown beside its copies."""
    pairs = {}
    for table in tables:
        pairs.update(GPU_FIGURES[table])
    q = {name: Q(value, UNITS[name], source) for name, (value, source) in pairs.items()}
    q = {"launch_overhead_us": LAUNCH_OVERHEAD, "host_call_us": HOST_CALL, "host_launch_us": HOST_LAUNCH, **q}
    q.update(given, launch_overhead_us=LAUNCH_OVERHEAD)
    if "host_link_bw" in q:
        q = {"host_copy_slowdown": HOST_COPY_SLOWDOWN, **q}
    return {name: q[name] for name in UNITS if name in q}


def _cc8x_limits(max_threads: int, max_blocks: int, smem_sm_kb: int, smem_block_kb: int, cc: str) -> dict:
    return {
        "smem_per_sm": Q(smem_sm_kb * KB, "B", f"[CC] cc {cc}: shared memory per SM {smem_sm_kb} KB"),
        "smem_per_block": Q(smem_block_kb * KB, "B", f"[CC] cc {cc}: max shared memory per block (opt-in) {smem_block_kb} KB"),
        "smem_reserved_per_block": Q(1 * KB, "B", "[CC] 1 KB of shared memory per block is reserved for system use (cc >= 8.0)"),
        "regs_per_sm": Q(65536, "regs", f"[CC] cc {cc}: 64K 32-bit registers per SM"),
        "max_regs_per_thread": Q(255, "regs", f"[CC] cc {cc}: 255 registers per thread"),
        "reg_alloc_unit": Q(256, "regs/warp", "[CC] occupancy calculator: registers are allocated per warp in units of 256"),
        "max_threads_per_sm": Q(max_threads, "threads", f"[CC] cc {cc}: {max_threads} resident threads per SM"),
        "max_threads_per_block": Q(1024, "threads", "[CC] 1024 threads per block"),
        "max_blocks_per_sm": Q(max_blocks, "blocks", f"[CC] cc {cc}: {max_blocks} resident blocks per SM"),
        "warp_schedulers_per_sm": Q(4, "schedulers", "[GA102]/[A100]/[AD102]/[H100]: 4 SM sub-partitions, one warp scheduler each"),
        "smem_bytes_per_clk_sm": Q(128, "B/clk", "[CC] 32 banks x 4 B per clock per SM"),
    }


def _tc(family: str, dtype: str, tflops: float, sms: int, clock_hz: float, src: str) -> tuple[str, Q]:
    per_clk = round(tflops * 1e12 / (sms * clock_hz))
    return (f"tc_{family.replace('.', '_')}_{dtype}",
            Q(per_clk, "FLOP/clk/SM", f"{src}: {tflops} dense TFLOP/s / ({sms} SMs x {clock_hz / 1e9:.3f} GHz)"))


def _tc_modes(family: str, tf32: float, half: float, sms: int, clock_hz: float, src: str,
              half_src: str | None = None) -> dict:
    """``_tc`` of every GEMM mode (nova/dtypes.py): TF32 at ``tf32`` dense TFLOP/s, the 16-bit modes
    (bf16, fp16) at ``half``, with their sources."""
    return dict(_tc(family, m, tf32 if m == "tf32" else half, sms, clock_hz, src if m == "tf32" else half_src or src)
                for m in MODES)


def rtx3060() -> GPUModel:
    q = _figures("rtx3060", mem_latency_ns=LOADED_LATENCY_GDDR)
    q.update(_cc8x_limits(1536, 16, 100, 99, "8.6"))
    # GA10x (consumer) tensor cores: FP32-accumulate FP16/BF16 at half, TF32 at a quarter of the
    # FP16-accumulate rate.  RTX 3080 [GA102]: TF32 29.8, FP16/BF16 (FP32 acc) 59.5 dense TFLOP/s at
    # 1,710 MHz on 68 SMs -> 256 and 512 FLOP/clk/SM; the same SM is in GA106.
    q.update(_tc_modes("mma.sync", 29.8, 59.5, 68, 1.710e9, "[GA102] RTX 3080 (same GA10x SM)",
                       "[GA102] RTX 3080 (same GA10x SM), FP32 accumulate"))
    return GPUModel("rtx3060", "NVIDIA GeForce RTX 3060 12GB (GA106)", "sm_86", (8, 6), q,
                    ("cp.async",), {"mma.sync": MMA_SYNC_SHAPES})


def a100() -> GPUModel:
    q = _figures("a100", mem_latency_ns=LOADED_LATENCY_HBM)
    q.update(_cc8x_limits(2048, 32, 164, 163, "8.0"))
    q.update(_tc_modes("mma.sync", 156, 312, q["sm_count"].value, q["clock_hz"].value, "[A100]"))
    return GPUModel("a100", "NVIDIA A100 80GB SXM (GA100)", "sm_80", (8, 0), q,
                    ("cp.async",), {"mma.sync": MMA_SYNC_SHAPES})


def rtx4090() -> GPUModel:
    q = _figures("rtx4090", mem_latency_ns=LOADED_LATENCY_GDDR)
    q.update(_cc8x_limits(1536, 24, 100, 99, "8.9"))
    q.update(_tc_modes("mma.sync", 82.6, 165.2, q["sm_count"].value, q["clock_hz"].value, "[AD102] RTX 4090",
                       "[AD102] RTX 4090, FP32 accumulate"))
    return GPUModel("rtx4090", "NVIDIA GeForce RTX 4090 (AD102)", "sm_89", (8, 9), q,
                    ("cp.async",), {"mma.sync": MMA_SYNC_SHAPES})


def _hopper(name: str, full_name: str) -> GPUModel:
    """A GH100 part: the chip's figures with the DRAM of gpus.toml's ``name`` table."""
    chip = GPU_FIGURES["gh100"]
    sms, clk = chip["sm_count"][0], chip["clock_hz"][0]
    q = _figures("gh100", name, mem_latency_ns=LOADED_LATENCY_HBM, l2_tma_bytes_per_clk=Q(
        TMA_L2_B_PER_CLK_SM * sms, "B/clk", "[MEASURED] lower bound: the wgmma oracle's most "
        "L2-heavy TMA-fed kernels sustain 13.6-14.2 TB/s of tile fills (e.g. 1024x14336x4096 "
        "TF32 128x64 tiles, 396 us; bench/results/h200-oracle-wgmma-v0.5c-48), taken at the "
        "1,980 MHz maximum SM clock: the TMA unit's path, faster than the LSU's"))
    q.update(_cc8x_limits(2048, 32, 228, 227, "9.0"))
    q.update(_tc_modes("wgmma", 494.7, 989.4, sms, clk, "[H100] datasheet"))
    # mma.sync still runs on sm_90 but cannot feed Hopper's tensor cores at the wgmma rate.
    for key, full in _tc_modes("mma.sync", 494.7 * MMA_SYNC_TF32_SHARE_SM90, 989.4 / 2, sms, clk,
                               "[EST] half the wgmma rate").items():
        if key.endswith("tf32"):
            q[key] = Q(full.value, full.unit,
                       f"[FITTED] {MMA_SYNC_TF32_SHARE_SM90} of the wgmma TF32 rate: the nine TF32 mma.sync attention "
                       "kernels (fwd, dK/dV, dQ at 32x8x512x64, 16x12x1024x64, 8x16x2048x128 causal) measured "
                       "1.02-1.41x their predictions at half the wgmma rate (H200, CUPTI and graph replay, "
                       "bench/results/h200-2026-12-01/f/); at this share 0.91-1.11x, geomean 1.0")
            continue
        q[key] = Q(full.value, full.unit,
                   "[EST] mma.sync issues from one warp at a time and cannot keep Hopper's tensor cores busy; "
                   "taken as half the wgmma rate (Luo et al. 2024 measure mma.sync well below wgmma) until calibrated; "
                   "the 16-bit attention kernels measure 0.8-1.1x their predictions at it (H200, bench/results/h200-2026-12-01/c)")
    return GPUModel(name, full_name, "sm_90", (9, 0), q,
                    ("cp.async", "tma", "clusters", "wgmma", "setmaxnreg"),
                    {"mma.sync": MMA_SYNC_SHAPES, "wgmma": WGMMA_SHAPES})


def h100() -> GPUModel:
    return _hopper("h100", "NVIDIA H100 SXM5 80GB (GH100)")


def h200() -> GPUModel:
    return _hopper("h200", "NVIDIA H200 SXM 141GB (GH100)")


PRESETS: dict[str, GPUModel] = {m.name: m for m in (rtx3060(), a100(), rtx4090(), h100(), h200())}
