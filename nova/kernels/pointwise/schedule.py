"""``PointwiseSchedule``: every decision the pointwise code generator reads, and the configurator's answer.

The derivation (``derive.py``) fills it; the MLIR builder (``emit.py``) reads only it and the problem;
the kernel cache hashes it into the key.  One thread handles ``vector`` consecutive elements per trip
of a grid-stride loop over ``numel / vector`` vectors; ``grid`` CTAs of ``threads`` threads.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class PointwiseSchedule:
    arch: str                   # PTX target ("sm_80", "sm_86", "sm_90", ...)
    vector: int                 # elements per access of a contiguous operand (1, 2, 4, 8, 16)
    threads: int                # per CTA
    grid: int                   # CTAs (at most one full wave; the loop strides over the rest)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PointwiseSchedule":
        return cls(**d)


@dataclass(frozen=True)
class PointwiseConfig:
    """The configurator's answer: schedule, prediction and the derivation that explains it."""
    problem: object
    target: object
    schedule: PointwiseSchedule
    prediction: object              # nova.configurator.step.Prediction
    derivation: tuple = ()
    facts: dict = field(default_factory=dict)     # derived figures shown beside the schedule

    def to_dict(self) -> dict:
        return {"op": "pointwise", "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "expression": self.problem.expression(),
                "schedule": self.schedule.to_dict(), "facts": self.facts,
                "prediction": self.prediction.to_dict(), "derivation": [s.to_dict() for s in self.derivation]}
