"""The symbolic GPU model: named primary quantities with sources, and figures derived from them.

Every primary number carries its unit and its source.  Derived figures (peak FLOP/s, machine
balance per memory level) are ``Formula``s over the primary quantities, never typed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from nova.dtypes import MODES
from nova.hwmodel.formula import formulas


class TargetError(ValueError):
    """Unknown target, unsupported feature, or no GPU where one was needed."""


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str
    source: str


# Tensor-core dtypes and instruction families a model can describe.
MMA_DTYPES = tuple(MODES)           # the GEMM modes of nova/dtypes.py: tf32, bf16, fp16
MMA_FAMILIES = ("mma.sync", "wgmma")

# Derived figures, written once (``F.peak_flops`` is "peak_flops = ...").
F = formulas("""
    peak_flops = sm_count * clock_hz * tc_flops_per_clk_sm
    peak_fp32_flops = 2 * clock_hz * fp32_lanes_per_sm * sm_count
    smem_bw = sm_count * clock_hz * smem_bytes_per_clk_sm
    l2_bw = clock_hz * l2_bytes_per_clk
    balance = peak_flops / bandwidth
    # Occupancy: the blocks of ``warps`` warps of ``regs`` registers a thread that fit one SM's register
    # file (registers are allocated per warp in units of ``reg_alloc_unit``); every kernel family's.
    bps_regs = floor(regs_per_sm / (warps * ceil(regs * 32 / reg_alloc_unit) * reg_alloc_unit))
""")


@dataclass(frozen=True)
class GPUModel:
    """A GPU as named quantities.  ``q`` maps a quantity name to ``Quantity``.

    Tensor-core rates live under ``tc_<family>_<dtype>`` in dense FLOP per clock per SM
    (FMA = 2 FLOP); a missing entry means the family/dtype is not available on this GPU.
    """
    name: str
    full_name: str
    arch: str                 # PTX target, "sm_86"
    cc: tuple[int, int]
    q: dict = field(default_factory=dict)
    features: tuple[str, ...] = ()      # "cp.async", "tma", "clusters", "wgmma", "setmaxnreg"
    mma_shapes: dict = field(default_factory=dict)   # family -> {dtype: (m, n, k)}

    def __post_init__(self):
        # each quantity's value as a plain attribute (``gpu.sm_count``): the configurator reads
        # hundreds per schedule; names the class defines (methods, properties) keep their meaning
        self.__dict__.update({k: v.value for k, v in self.q.items() if not hasattr(type(self), k)})

    # -- primary quantities --------------------------------------------------------------
    def __getattr__(self, item):
        q = self.__dict__.get("q", {})
        if item in q:
            return q[item].value
        raise AttributeError(f"{type(self).__name__} {self.__dict__.get('name')!r} has no quantity {item!r}")

    def has(self, quantity: str) -> bool:
        return quantity in self.q

    def values(self) -> dict[str, float]:
        return {k: v.value for k, v in self.q.items()}

    # -- tensor cores ------------------------------------------------------------------------
    def tc_flops_per_clk_sm(self, family: str, dtype: str) -> float:
        key = f"tc_{family.replace('.', '_')}_{dtype}"
        if key not in self.q:
            raise TargetError(f"{self.name} has no {family} tensor-core path for {dtype}")
        return self.q[key].value

    def supports(self, family: str, dtype: str) -> bool:
        return f"tc_{family.replace('.', '_')}_{dtype}" in self.q

    def best_family(self, dtype: str) -> str:
        """The fastest instruction family this GPU offers for ``dtype``."""
        fams = [f for f in MMA_FAMILIES if self.supports(f, dtype)]
        if not fams:
            raise TargetError(f"{self.name} ({self.arch}) has no tensor-core path for {dtype}")
        return max(fams, key=lambda f: self.tc_flops_per_clk_sm(f, dtype))

    def peak_flops(self, dtype: str, family: str | None = None) -> float:
        """Dense tensor FLOP/s; memoised on the (frozen) model: the configurator asks hundreds of times."""
        memo = self.__dict__.setdefault("_peak_memo", {})
        hit = memo.get((dtype, family))
        if hit is None:
            fam = family or self.best_family(dtype)
            hit = memo[(dtype, family)] = F.peak_flops(sm_count=self.sm_count, clock_hz=self.clock_hz,
                                                       tc_flops_per_clk_sm=self.tc_flops_per_clk_sm(fam, dtype))
        return hit

    def peak_fp32_flops(self) -> float:
        return F.peak_fp32_flops(sm_count=self.sm_count, clock_hz=self.clock_hz,
                                 fp32_lanes_per_sm=self.fp32_lanes_per_sm)

    # -- memory levels -----------------------------------------------------------------------
    @cached_property
    def smem_bw(self) -> float:
        return F.smem_bw(sm_count=self.sm_count, clock_hz=self.clock_hz,
                         smem_bytes_per_clk_sm=self.smem_bytes_per_clk_sm)

    @cached_property
    def l2_bw(self) -> float:
        return F.l2_bw(clock_hz=self.clock_hz, l2_bytes_per_clk=self.l2_bytes_per_clk)

    @cached_property
    def l2_tma_bw(self) -> float:
        """L2 -> shared memory bandwidth of TMA tile loads (Hopper); the load/store path's where the
        target has no separate figure."""
        if not self.has("l2_tma_bytes_per_clk"):
            return self.l2_bw
        return F.l2_bw(clock_hz=self.clock_hz, l2_bytes_per_clk=self.l2_tma_bytes_per_clk)

    def bandwidth(self, level: str) -> float:
        return {"dram": self.dram_bw, "l2": self.l2_bw, "smem": self.smem_bw}[level]

    def balance(self, dtype: str, level: str, family: str | None = None) -> float:
        """Machine balance in FLOP/byte: the intensity a kernel must reach at ``level``
        to be compute-bound (Williams et al., Roofline, CACM 2009)."""
        return F.balance(peak_flops=self.peak_flops(dtype, family), bandwidth=self.bandwidth(level))

    def summary(self) -> dict:
        """Key figures for ``nova-config targets``."""
        out = {"target": self.name, "gpu": self.full_name, "arch": self.arch, "SMs": int(self.sm_count),
               "clock_GHz": round(self.clock_hz / 1e9, 3)}
        for dt in MMA_DTYPES:
            try:
                out[f"{dt}_TFLOPs"] = round(self.peak_flops(dt) / 1e12, 1)
            except TargetError:
                out[f"{dt}_TFLOPs"] = None
        out["dram_TBps"] = round(self.dram_bw / 1e12, 3)
        out["l2_MB"] = round(self.l2_bytes / 2**20, 1)
        out["smem_block_KB"] = round(self.smem_per_block / 1024, 1)
        out["tf32_balance_dram"] = round(self.balance("tf32", "dram"), 1)
        return out
