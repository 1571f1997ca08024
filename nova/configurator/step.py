"""The records every kernel family's derivation shares: the tensor-core instruction it picks
(``MmaInstr``), its steps (``Step``, recorded by ``nova.configurator.derivation``) and the cost
model's ``Prediction``.  The GEMM family (``nova/kernels/gemm/``) and the attention family
(``nova/kernels/attention/``) both build on them.
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
