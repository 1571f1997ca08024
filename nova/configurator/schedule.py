"""The ``Schedule``: every decision the code generator needs, and nothing it must re-derive.

The configurator produces it (with a prediction and a derivation); codegen consumes it; the
runtime hashes it into the kernel-cache key.  It is the single source of truth for a kernel.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class MmaInstr:
    """One tensor-core instruction: family ('mma.sync' or 'wgmma') and shape m×n×k."""
    family: str          # "mma.sync" (sm_80+) | "wgmma" (sm_90a)
    m: int
    n: int
    k: int
    a_type: str          # "tf32" | "bf16" | "f16"
    acc_type: str = "f32"

    def __str__(self) -> str:
        return f"{self.family}.m{self.m}n{self.n}k{self.k}.{self.acc_type}.{self.a_type}"


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
    split_k: int                   # K split into this many slices (grid.z); >1 accumulates atomically
    group_m: int                   # rasterization: tile rows per L2 group (1 = row-major order)
    # --- resources (estimates; ptxas verifies)
    regs_per_thread: int
    blocks_per_sm: int
    # --- Hopper room (issue 4); defaults mean "not used"
    cluster_m: int = 1
    cluster_n: int = 1
    consumer_warpgroups: int = 0
    producer_warps: int = 0
    persistent: bool = False
    swap_ab: bool = False          # the kernel computes C^T = B^T A^T: wgmma rows (warps) run along N

    # ---- derived quantities (never stored twice)
    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def threads_per_block(self) -> int:
        return 32 * self.warps + 32 * self.producer_warps

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

    def grid(self, M: int, N: int) -> tuple[int, int, int]:
        """Launch grid: (output tiles, 1, split_k).  The kernel maps blockIdx.x to a tile by group-M."""
        tiles = -(-M // self.block_m) * -(-N // self.block_n)
        return (tiles, 1, self.split_k)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mma"] = asdict(self.mma)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        d = dict(d)
        d["mma"] = MmaInstr(**d["mma"])
        return cls(**d)


@dataclass(frozen=True, eq=False)
class Step:
    """One derivation step: what was decided, the formula, its value, and why.

    ``formula`` is the formula with this problem's numbers in it, ``symbolic`` its sympy form
    (``--symbolic``).  ``text`` holds both, or a function that prints them: a step recorded from a
    ``Formula`` prints them on first use, so deciding a schedule never pays for (or imports sympy
    for) text nobody reads."""
    step: str
    value: object
    reason: str
    text: "tuple[str, str] | Callable[[], tuple[str, str]]" = field(repr=False)

    @classmethod
    def note(cls, step: str, formula: str, value, reason: str, symbolic: str = "") -> "Step":
        """A step whose texts are given."""
        return cls(step, value, reason, (formula, symbolic))

    @cached_property
    def _texts(self) -> tuple[str, str]:
        return self.text() if callable(self.text) else self.text

    @property
    def formula(self) -> str:
        return self._texts[0]

    @property
    def symbolic(self) -> str:
        return self._texts[1]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Step):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.step, self.formula, self.reason))

    def to_dict(self) -> dict:
        return {"step": self.step, "formula": self.formula, "value": _jsonable(self.value),
                "reason": self.reason, "symbolic": self.symbolic}


@dataclass(frozen=True)
class Prediction:
    time_us: float
    tflops: float
    bound: str                   # "tensor-core" | "dram" | "l2" | "smem" | "launch"
    floor_us: float              # roofline floor: max(flops/peak, min_bytes/dram_bw)
    terms_us: dict = field(default_factory=dict)   # each resource's time

    def to_dict(self) -> dict:
        return asdict(self)


def _jsonable(v):
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    try:
        f = float(v)
        return int(f) if f.is_integer() else f
    except (TypeError, ValueError):
        return str(v)
