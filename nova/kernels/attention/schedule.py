"""``AttentionSchedule``: every decision the attention code generator needs, for all four kernels.

One ``KernelTile`` per kernel (forward, backward preprocessing, backward dK/dV, backward dQ).  The
configurator (``derive.py``) fills it; the MLIR builder (``build.py``) reads only it; the runtime
hashes it into the kernel-cache key.  The Hopper fields (warpgroups, producer warps, TMA, swizzle)
are there so a wgmma/TMA schedule fits the same dataclass; the mma.sync path leaves them at their
"not used" defaults.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nova.configurator.step import MmaInstr

ROLES = ("fwd", "bwd_pre", "bwd_dkv", "bwd_dq")
COMBINES = {"fwd": "fwd_combine", "bwd_dq": "bwd_dq_combine", "bwd_dkv": "bwd_dkv_combine"}   # a split kernel's
                                                                 # partials -> its outputs


@dataclass(frozen=True)
class KernelTile:
    """The schedule of one attention kernel.

    ``block_rows``: rows of the operand a block keeps for its whole life (the Q tile in the forward
    and dQ kernels, the K/V tile in the dK/dV kernel); ``block_cols``: rows of the operand streamed
    through the ``stages``-deep cp.async ring per step (K/V tiles, or Q/dO tiles).  Each warp owns
    ``rows_per_warp`` = 16 x m-tiles of ``block_rows``.  ``smem_pad``: elements of padding per
    shared-memory row (conflict-free ldmatrix and scalar TF32 fragment loads)."""
    role: str
    block_rows: int
    block_cols: int
    warps: int
    stages: int
    smem_pad: int
    smem_bytes: int
    regs_per_thread: int            # the derivation's estimate (ptxas verifies)
    blocks_per_sm: int
    grid: tuple[int, int, int]
    # Hopper room: defaults mean "not used"
    consumer_warpgroups: int = 0
    producer_warps: int = 0
    smem_layout: str = "pad"        # "pad" | "swizzle128" (TMA)
    producer_regs: int = 0          # Hopper: setmaxnreg targets of the producer and consumer warpgroups
    consumer_regs: int = 0
    persistent: bool = False        # Hopper forward: grid[0] CTAs (<= the SMs) each loop over query tiles
    tile_order: str = ""            # persistent: "head" (a head's query tiles side by side, rounds snaked) or
                                    # "query" (query-tile major across heads, the longest first)
    transpose_in_flight: int = 0    # TF32 Hopper kernels: tile-transpose units a producer thread has in flight
    splits: int = 1                 # grid z splits the streamed tiles (the forward's and dQ's keys: split KV;
                                    # dK/dV's query tiles of its heads: split Q); each block writes FP32
                                    # partials that the role's combine kernel (``COMBINES``) reduces

    @property
    def rows_per_warp(self) -> int:
        return self.block_rows // max(1, self.warps)

    @property
    def hopper(self) -> bool:
        """A TMA + wgmma kernel (warp-specialized: a producer warpgroup and consumer warpgroups)."""
        return self.consumer_warpgroups > 0

    @property
    def threads(self) -> int:
        return 32 * (self.warps + self.producer_warps)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"] = list(self.grid)
        if not self.hopper:              # mma.sync tiles: the dict they always had
            del d["producer_regs"], d["consumer_regs"]
        if not self.persistent:          # the dict (so the cache key) of every kernel before it
            del d["persistent"]
        if not self.tile_order:
            del d["tile_order"]
        if not self.transpose_in_flight:
            del d["transpose_in_flight"]
        if self.splits == 1:
            del d["splits"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "KernelTile":
        d = dict(d)
        d["grid"] = tuple(d["grid"])
        return cls(**d)


@dataclass(frozen=True)
class AttentionSchedule:
    arch: str                       # PTX target ("sm_80", "sm_86", "sm_90", ...)
    mma: MmaInstr                   # tensor-core instruction of every matmul
    fwd: KernelTile
    bwd_pre: KernelTile
    bwd_dkv: KernelTile
    bwd_dq: KernelTile
    dq_mode: str = "separate"       # "separate": a dQ kernel recomputes S and dP; "atomic": dK/dV adds dQ
    tf32_rounding: str = "rna"      # operands rounded to nearest TF32 (cvt.rna), like the GEMMs
    tf32_prep: str = "fragment"     # where streamed TF32 tiles are rounded: "fragment" (each use, in registers)
                                    # or "smem" (once, in place, when they land); kept tiles: always in smem
    # Hopper: the forward on TMA + wgmma (build_hopper.py); a backward kernel is on TMA + wgmma where its
    # KernelTile is (``hopper``: build_hopper_bwd.py)
    tma: bool = False
    cluster: int = 1
    # the combine kernels of split-KV roles (``COMBINES``; None: that role is not split)
    fwd_combine: KernelTile | None = None
    bwd_dq_combine: KernelTile | None = None
    bwd_dkv_combine: KernelTile | None = None

    def kernel(self, role: str) -> KernelTile:
        return getattr(self, role)

    def with_combines(self, roles) -> tuple[str, ...]:
        """``roles`` each followed by its combine kernel where the schedule splits it: the kernels a
        caller of those roles loads, launches and precompiles, in launch order."""
        return tuple(x for r in roles for x in (r, COMBINES.get(r)) if x and self.kernel(x) is not None)

    def to_dict(self) -> dict:
        return {"arch": self.arch, "mma": asdict(self.mma), "dq_mode": self.dq_mode,
                "tf32_rounding": self.tf32_rounding, "tf32_prep": self.tf32_prep, "tma": self.tma, "cluster": self.cluster,
                **{r: self.kernel(r).to_dict() for r in ROLES},
                **{r: self.kernel(r).to_dict() for r in COMBINES.values() if self.kernel(r) is not None}}

    @classmethod
    def from_dict(cls, d: dict) -> "AttentionSchedule":
        d = dict(d)
        d["mma"] = MmaInstr(**d["mma"])
        for r in (*ROLES, *COMBINES.values()):
            if r in d:
                d[r] = KernelTile.from_dict(d[r])
        return cls(**d)


@dataclass(frozen=True)
class AttentionConfig:
    """The configurator's answer: schedule, prediction and the derivation that explains it."""
    problem: object
    target: object
    schedule: AttentionSchedule
    prediction: object              # nova.configurator.step.Prediction (forward + backward)
    derivation: tuple = ()
    terms: dict = field(default_factory=dict)     # per kernel predicted us
    config_time_ms: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict:
        return {"op": "attention", "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "schedule": self.schedule.to_dict(),
                "prediction": self.prediction.to_dict(), "kernels_us": self.terms,
                "derivation": [st.to_dict() for st in self.derivation], "config_time_ms": self.config_time_ms}
