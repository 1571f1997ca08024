"""The ``Schedule``: every decision the code generator and the runtime need, and nothing they must re-derive.

The configurator produces it (with a prediction and a derivation); codegen and the runtime only
read it; the runtime hashes it into the kernel-cache key.  It is the single source of truth for a
kernel.  The Hopper (wgmma) kernel's further decisions, which depend on the target (its register
file, its SM count), live in ``Schedule.hopper`` (``HopperPlan``); ``Schedule.from_dict`` rebuilds
every nested dataclass, so ``from_dict(to_dict())`` round-trips through JSON.  Fields added for
batched GEMMs are left out of ``to_dict`` at their defaults, so an unbatched schedule's dict (and
cache key) is the one it always was.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import ClassVar

from nova.configurator.step import MmaInstr


SPLIT_REDUCTIONS = ("atomic", "workspace")   # Schedule.split_reduction
EPILOGUES = ("registers", "tma_store")       # HopperPlan.epilogue
CONSUMER_SCHEDULES = ("cooperative", "pingpong")   # Schedule.consumers


class ScheduleError(RuntimeError):
    """The configurator produced a schedule that violates a hardware limit (a Nova bug)."""


def _without_defaults(d: dict, **defaults) -> dict:
    """``d`` without the keys whose value is the given default (fields added after the format was fixed)."""
    return {k: v for k, v in d.items() if k not in defaults or v != defaults[k]}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class StreamKPlan:
    """The stream-K walk in closed form (``Schedule.stream_k_tiles``).  ``tiles`` output tiles in the
    walk order (group-M); the first ``dp_tiles`` are walked whole (CTA c: tiles c, c + G, ...), the
    last ``sk_tiles`` are split by K tiles: their I = sk_tiles x ktiles (tile, K tile) iterations,
    iteration i = t x ktiles + k of stream-K tile t, are shared by the G = ``ctas`` CTAs, CTA c
    running [floor(c*I/G), floor((c+1)*I/G)).  The owner of iteration i is floor(((i+1)*G - 1)/I);
    tile t's segments run from the owner of its first iteration to the owner of its last, and a
    CTA's segment index within the tile is c - that first owner.  The kernel (emit_hopper's
    ``tile_loop``), the reduction kernel and the runtime's workspace all read these."""

    def __init__(self, tiles: int, sk_tiles: int, ktiles: int, ctas: int):
        if not (0 < sk_tiles <= tiles and ktiles > 0 and 0 < ctas <= sk_tiles * ktiles):
            raise ValueError(f"stream-K: {sk_tiles} of {tiles} tiles x {ktiles} K tiles on {ctas} CTAs")
        self.tiles, self.sk_tiles, self.ktiles, self.ctas = tiles, sk_tiles, ktiles, ctas
        self.dp_tiles = tiles - sk_tiles
        self.iters = sk_tiles * ktiles

    def owner(self, i: int) -> int:
        """The CTA that runs stream-K iteration ``i``: floor(((i+1)*G - 1)/I)."""
        return ((i + 1) * self.ctas - 1) // self.iters

    def cta_range(self, c: int) -> tuple[int, int]:
        """CTA ``c``'s stream-K iterations [floor(c*I/G), floor((c+1)*I/G))."""
        return c * self.iters // self.ctas, (c + 1) * self.iters // self.ctas

    def segments(self, t: int) -> tuple[int, int]:
        """(first CTA, segment count) of stream-K tile ``t`` (0-based within the stream-K tiles)."""
        first = self.owner(t * self.ktiles)
        return first, self.owner(t * self.ktiles + self.ktiles - 1) - first + 1

    @functools.cached_property
    def slots(self) -> int:
        """Workspace slots: the most segments of any stream-K tile (S_max; [slots, M, N] FP32)."""
        return max(self.segments(t)[1] for t in range(self.sk_tiles))

    @functools.cached_property
    def split_tiles(self) -> int:
        """Stream-K tiles of more than one segment (their partials go through the workspace)."""
        return sum(1 for t in range(self.sk_tiles) if self.segments(t)[1] > 1)

    @functools.cached_property
    def partial_segments(self) -> int:
        """Segments that store FP32 partials: every segment of a split tile."""
        return sum(n for n in (self.segments(t)[1] for t in range(self.sk_tiles)) if n > 1)

    @property
    def per_cta(self) -> float:
        """The balanced share of stream-K iterations, I / G."""
        return self.iters / self.ctas

    @property
    def busiest_iters(self) -> int:
        """K tiles the busiest CTA runs: ceil(dp_tiles / G) x ktiles + ceil(I / G)."""
        return _cdiv(self.dp_tiles, self.ctas) * self.ktiles + _cdiv(self.iters, self.ctas)

    @property
    def max_cta_segments(self) -> int:
        """The most stream-K segments one CTA runs: ceil((ceil(I/G) - 1) / ktiles) + 1, at most the tiles."""
        return min(self.sk_tiles, _cdiv(_cdiv(self.iters, self.ctas) - 1, self.ktiles) + 1)

    def walk(self, c: int) -> list[tuple[int, int, int, int, int]]:
        """CTA ``c``'s work as the kernel walks it: (tile in walk order, first K tile, K tiles,
        segment index, the tile's segments); data-parallel tiles are (tile, 0, ktiles, 0, 1)."""
        out = [(u, 0, self.ktiles, 0, 1) for u in range(c, self.dp_tiles, self.ctas)]
        lo, hi = self.cta_range(c)
        for t in range(lo // self.ktiles, _cdiv(hi, self.ktiles)):
            begin, end = max(lo, t * self.ktiles), min(hi, (t + 1) * self.ktiles)
            first, count = self.segments(t)
            out.append((self.dp_tiles + t, begin - t * self.ktiles, end - begin, c - first, count))
        return out


# ---- the Hopper kernel's plan (nova/kernels/gemm/hopper.py decides it, codegen and runtime read it)
@dataclass(frozen=True)
class OperandPrep:
    """A pass that writes a K-major, K-padded copy of an operand into a workspace before the GEMM
    (TMA cannot transpose and needs 16-byte aligned rows): ``dst[r, c] = src[c, r]`` if
    ``transpose`` else ``src[r, c]``, zero for c >= K; ``round``: also round FP32 to nearest TF32.
    Batched: ``batch`` matrices, the source's ``src_stride`` elements apart, the workspace's packed
    (``dst[0] * dst[1]`` apart).  ``line``: TMA could read the operand in place; the pass only puts
    its rows on the 128-byte line (hopper.py step 2b, ``line_pads``)."""
    transpose: bool
    round: bool
    src: tuple[int, int]         # the operand as stored, row-major [rows, cols]
    dst: tuple[int, int]         # [M or N, K padded to whole 128-byte lines]
    batch: int = 1               # matrices the pass writes (1: unbatched or a broadcast operand)
    src_stride: int = 0          # elements between the source's matrices (batch > 1)
    line: bool = False           # a copy step 2b chose (the operand was readable in place)

    def to_dict(self) -> dict:
        return _without_defaults(asdict(self), batch=1, src_stride=0, line=False)

    @classmethod
    def from_dict(cls, d: dict) -> "OperandPrep":
        return cls(d["transpose"], d["round"], tuple(d["src"]), tuple(d["dst"]), d.get("batch", 1),
                   d.get("src_stride", 0), d.get("line", False))


@dataclass(frozen=True)
class OperandRole:
    """Where one operand of the Hopper kernel comes from and how the wgmma reads it."""
    major: str                   # "k" | "mn": which index is contiguous in the tensor TMA reads
    rows: int                    # that tensor, row-major [rows, cols]: [M|N, K] K-major, [K, M|N] MN-major
    cols: int
    feed: str                    # "smem" (K-major descriptor) | "smem_t" (descriptor, transpose bit) | "regs"
    prep: OperandPrep | None     # the pass that writes the tensor first, if any
    # Batched GEMM: the tensor TMA reads holds ``batch`` matrices ``batch_stride`` elements apart (a
    # 3-D tensor map, batch the outer dimension); batch 1, stride 0: one 2-D map that every batch
    # element reads (unbatched, or a broadcast operand)
    batch: int = 1
    batch_stride: int = 0

    def to_dict(self) -> dict:
        d = _without_defaults(asdict(self), batch=1, batch_stride=0)
        d["prep"] = None if self.prep is None else self.prep.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "OperandRole":
        return cls(d["major"], d["rows"], d["cols"], d["feed"],
                   None if d["prep"] is None else OperandPrep.from_dict(d["prep"]), d.get("batch", 1),
                   d.get("batch_stride", 0))


@dataclass(frozen=True)
class OperandPlan:
    """The operand roles (hopper.py step 2): A and B, whether the kernel computes C^T = B^T A^T
    (``swap``: wgmma rows run along N, B is the wgmma A operand), and the tensor maps' element type."""
    a: OperandRole
    b: OperandRole
    swap: bool
    tensor_map_type: str         # "tf32" (the TMA unit rounds FP32 to nearest) | "f32" | "bf16" | "f16"

    @property
    def x(self) -> str:
        """The operand that is the wgmma A operand (its rows are the wgmma rows): "a", or "b" swapped."""
        return "b" if self.swap else "a"

    @property
    def y(self) -> str:
        """The wgmma B operand."""
        return "a" if self.swap else "b"

    def role(self, op: str) -> OperandRole:
        return self.a if op == "a" else self.b

    @classmethod
    def from_dict(cls, d: dict) -> "OperandPlan":
        return cls(OperandRole.from_dict(d["a"]), OperandRole.from_dict(d["b"]), d["swap"], d["tensor_map_type"])


@dataclass(frozen=True)
class TmaBox:
    """One operand's TMA box per ring stage: ``count`` boxes of [rows x cols] elements (cols x the
    element size = the 128-byte swizzle span), side by side along M/N."""
    cols: int
    rows: int
    count: int


@dataclass(frozen=True)
class SmemRing:
    """The Hopper kernel's dynamic shared memory: the ring starts at the first ``align``-byte
    boundary (the 128-byte swizzle atom; ``align`` bytes are reserved for it), then each stage holds
    the wgmma A operand's tile (``x_bytes``) and the wgmma B operand's (``y_bytes``); after the
    stages, ``staging`` bytes stage the TMA-store epilogue's boxes (0 with the register epilogue)."""
    align: int
    x_bytes: int
    y_bytes: int
    staging: int = 0

    @property
    def stage_bytes(self) -> int:
        return self.x_bytes + self.y_bytes

    def size(self, stages: int) -> int:
        """Dynamic shared memory of a ``stages``-deep ring: align + stages x (x_bytes + y_bytes) + staging."""
        return self.align + stages * self.stage_bytes + self.staging


@dataclass(frozen=True)
class HopperPlan:
    """The Hopper kernel's decisions beyond the tiling (hopper.py): operand roles, TMA boxes,
    setmaxnreg targets, the shared-memory ring, the grid and the epilogue."""
    operands: OperandPlan
    box_a: TmaBox
    box_b: TmaBox
    producer_regs: int           # setmaxnreg.dec target of the producer warpgroup
    consumer_regs: int           # setmaxnreg.inc target of each consumer warpgroup
    ring: SmemRing
    ctas: int                    # CTAs launched: min(work units, SMs) when persistent, else one per work unit
    # How the consumers write C (hopper.py's epilogue step): "registers" (predicated stores from the
    # wgmma accumulators) or "tma_store" (each consumer warpgroup stages its slab in shared memory,
    # one ``box_c`` step at a time, double-buffered in ``ring.staging``, and TMA-stores it, so the
    # stores drain while the next tile's K loop runs)
    epilogue: str = "registers"
    box_c: TmaBox | None = None  # tma_store: C's TMA box; ``count`` boxes side by side along N per staging step

    def box(self, op: str) -> TmaBox:
        return {"a": self.box_a, "b": self.box_b, "c": self.box_c}[op]

    @property
    def tma_store(self) -> bool:
        return self.epilogue == "tma_store"

    @classmethod
    def from_dict(cls, d: dict) -> "HopperPlan":
        return cls(OperandPlan.from_dict(d["operands"]), TmaBox(**d["box_a"]), TmaBox(**d["box_b"]),
                   d["producer_regs"], d["consumer_regs"], SmemRing(**d["ring"]), d["ctas"],
                   d.get("epilogue", "registers"), None if d.get("box_c") is None else TmaBox(**d["box_c"]))


@dataclass(frozen=True)
class Schedule:
    # --- target
    arch: str                      # PTX target, e.g. "sm_86", "sm_90" ("sm_90a" for wgmma)
    mma: MmaInstr
    # --- tiling
    block_m: int
    block_n: int
    block_k: int
    warps_m: int                   # warp grid inside a block: warps_m × warps_n warps
    warps_n: int
    # --- pipeline and shared memory
    stages: int                    # depth of the global->shared cp.async ring
    smem_layout: str               # "pad" (row padding) | "swizzle128" (Hopper)
    smem_pad_a: int                # elements of padding per row of the A tile in shared memory
    smem_pad_b: int                # elements of padding per row of the B tile
    smem_bytes: int                # dynamic shared memory per block
    # --- global memory access
    vector_a: int                  # elements per cp.async for A (16 B / elt size when aligned)
    vector_b: int
    vector_c: int                  # elements per epilogue store
    # --- grid
    split_k: int                   # K split into this many slices (grid.z / work units)
    group_m: int                   # rasterization: tile rows per L2 group (1 = row-major order)
    # --- resources (estimates; ptxas verifies)
    regs_per_thread: int
    blocks_per_sm: int
    # --- the Hopper (wgmma) kernel; defaults mean "not used"
    cluster_m: int = 1             # thread-block cluster: CTAs along M x along N (``multicast``: the tile they share)
    cluster_n: int = 1
    consumer_warpgroups: int = 0
    producer_warps: int = 0
    persistent: bool = False
    hopper: HopperPlan | None = None   # the wgmma kernel's plan (None for mma.sync)
    # How split_k > 1 slices add up: "atomic" (FP32 atomic adds into the zeroed C: f32 output, no
    # activation, order varies run to run) or "workspace" (each slice stores its FP32 partial tile
    # in a [split_k, M, N] workspace; a reduction kernel adds them in slice order, then bias,
    # activation and the output conversion: any output, deterministic; Hopper only)
    split_reduction: str = "atomic"
    # Stream-K (hopper.py step 8; split_k = 1): the last ``stream_k_tiles`` output tiles of the walk
    # order are not walked whole: their (tile, K tile) iterations, I = stream_k_tiles x K tiles, are
    # split evenly over the ``hopper.ctas`` = G persistent CTAs (CTA c runs [floor(c*I/G),
    # floor((c+1)*I/G))), after the first tiles' data-parallel walk.  A CTA's piece of a tile is a
    # segment; a tile's one segment stores C with the epilogue, several store FP32 partials into
    # workspace slot (c - the tile's first CTA) and a reduction kernel adds them in slot order, then
    # the epilogue (deterministic).  0: no stream-K.  ``hopper.stream_k_plan`` has the closed forms.
    stream_k_tiles: int = 0
    # How the consumer warpgroups share the work (hopper.py's epilogue step): "cooperative" (the
    # warpgroups split each tile, 64 wgmma rows each) or "pingpong" (each warpgroup computes whole
    # tiles, the CTA's units alternately, their K loops ordered by named barriers so that one's
    # epilogue runs under the other's K loop; block tile = one warpgroup's tile, ``tile_slabs`` x 64
    # wgmma rows x wgmma N).  Left out of ``to_dict`` when cooperative (the dict it always had).
    consumers: str = "cooperative"

    kernel: ClassVar[str] = "tiles"      # the GEMM kernel this schedule describes (SkinnySchedule: "skinny")

    # ---- derived quantities (never stored twice)
    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def threads_per_block(self) -> int:
        return 32 * self.warps + 32 * self.producer_warps

    @property
    def pingpong(self) -> bool:
        """The consumer warpgroups compute different tiles, alternately (``consumers``)."""
        return self.consumers == "pingpong"

    @property
    def tile_slabs(self) -> int:
        """64-row wgmma slabs of one work unit's tile (its wgmma rows / 64): the consumer warpgroups
        (one slab each) when cooperative, the slabs one warpgroup computes when ping-pong."""
        rows = self.block_n if self.swap_ab else self.block_m
        return rows // self.mma.m if self.pingpong else self.consumer_warpgroups

    @property
    def swap_ab(self) -> bool:
        """The kernel computes C^T = B^T A^T: wgmma rows (warps) run along N."""
        return self.hopper is not None and self.hopper.operands.swap

    @property
    def warp_tile_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_tile_n(self) -> int:
        return self.block_n // self.warps_n

    @property
    def mma_tiles_m(self) -> int:
        """MMA instructions along M in one warp tile."""
        return self.warp_tile_m // self.mma.m

    @property
    def mma_tiles_n(self) -> int:
        return self.warp_tile_n // self.mma.n

    @property
    def acc_regs_per_thread(self) -> int:
        """FP32 accumulator registers per thread: warp tile / 32 lanes."""
        return self.warp_tile_m * self.warp_tile_n // 32

    @property
    def zero_output(self) -> bool:
        """The runtime zeroes C before the launch: split-K slices add into it with atomics."""
        return self.split_k > 1 and self.split_reduction == "atomic"

    @property
    def multicast(self) -> tuple[str, int] | None:
        """(operand, extent) of a thread-block cluster's shared tile: the CTAs of a cluster along M
        compute tiles of one N range and share B's tile, along N A's (1-D clusters, hopper.py step
        12); None without a cluster."""
        if self.cluster_m * self.cluster_n == 1:
            return None
        return ("b", self.cluster_m) if self.cluster_m > 1 else ("a", self.cluster_n)

    @property
    def stream_k(self) -> bool:
        """The last ``stream_k_tiles`` tiles are split over the CTAs by K iterations (stream-K)."""
        return self.stream_k_tiles > 0

    @property
    def launch_split(self) -> int:
        """The split the calibration's launch count reads (``launches_of``: one more launch when > 1):
        ``split_k``, or 2 for stream-K (its reduction kernel is one more launch, as split-K's)."""
        return 2 if self.stream_k else self.split_k

    @property
    def launches(self) -> int:
        """Kernel launches per call: the GEMM, one more for split-K's memset or reduction kernel (stream-K's
        reduction), one per operand-prep pass (``calibration.launches_of`` without the schedule counts
        the prep passes as one)."""
        preps = 0 if self.hopper is None else sum(role.prep is not None for role in (self.hopper.operands.a,
                                                                                      self.hopper.operands.b))
        return 1 + (self.launch_split > 1) + preps

    @property
    def split_workspace(self) -> bool:
        """Split-K slices write FP32 partials to a workspace that a reduction kernel adds up."""
        return self.split_k > 1 and self.split_reduction == "workspace"

    def stream_k_plan(self, M: int, N: int, K: int) -> StreamKPlan:
        """The stream-K walk (``stream_k``) of this schedule for an M x N x K GEMM: its tiles, K tiles
        and grid (``hopper.ctas``)."""
        tiles = _cdiv(M, self.block_m) * _cdiv(N, self.block_n)
        return StreamKPlan(tiles, self.stream_k_tiles, _cdiv(K, self.block_k), self.hopper.ctas)

    def grid(self, M: int, N: int, batch: int = 1) -> tuple[int, int, int]:
        """(output tiles x batch, 1, split_k): the mma.sync kernel's launch grid (it maps blockIdx.x to
        a batch element, blockIdx.x / tiles, and a tile of it by group-M); the Hopper kernel's CTAs
        (``hopper.ctas``) walk these work units."""
        tiles = -(-M // self.block_m) * -(-N // self.block_n)
        return (tiles * batch, 1, self.split_k)

    def to_dict(self) -> dict:
        d = _without_defaults(asdict(self), stream_k_tiles=0,      # no stream-K, cooperative: the dict (and
                              consumers="cooperative")              # key) it always had
        if self.hopper is not None:          # batched fields only where they are not the defaults
            ops = d["hopper"]["operands"]
            ops["a"], ops["b"] = self.hopper.operands.a.to_dict(), self.hopper.operands.b.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        d = dict(d)
        d["mma"] = MmaInstr(**d["mma"])
        if d.get("hopper") is not None:
            d["hopper"] = HopperPlan.from_dict(d["hopper"])
        return cls(**d)
