"""``MultiTensorSchedule``: every decision the multi-tensor code generator reads, and the configurator's answer.

The derivation (``derive.py``) fills it; the MLIR builder (``emit.py``) and the argument table
(``table.py``) read it; the kernel cache hashes it into the key.  A *chunk* is ``vector x threads x
unroll`` consecutive elements of one tensor: thread ``t`` of the CTA owning it handles the ``unroll``
vectors at ``t * vector + u * threads * vector``.  ``grid`` persistent CTAs walk the chunks of all
tensors, CTA ``b`` the chunks ``b, b + grid, ...`` in the order of the argument table.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class MultiTensorSchedule:
    arch: str                   # PTX target ("sm_80", "sm_86", "sm_90", ...)
    vector: int                 # elements per 16-byte access
    threads: int                # per CTA
    unroll: int                 # vectors per thread per chunk
    grid: int                   # persistent CTAs (one full wave)
    max_regs: int = 0           # a sum kernel's register cap (nvvm.maxnreg) that keeps its wave resident; 0: none

    @property
    def chunk(self) -> int:
        """Elements of one tensor that one CTA updates at a time."""
        return self.vector * self.threads * self.unroll

    def to_dict(self) -> dict:
        d = asdict(self)
        if not self.max_regs:           # the update kernels keep the schedule (and key) they always had
            del d["max_regs"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MultiTensorSchedule":
        return cls(**d)


@dataclass(frozen=True)
class MultiTensorConfig:
    """The configurator's answer: schedule, prediction and the derivation that explains it."""
    problem: object                     # MultiTensorProblem
    target: object
    schedule: MultiTensorSchedule
    prediction: object                  # nova.configurator.step.Prediction
    derivation: tuple = ()
    facts: dict = field(default_factory=dict)     # derived figures shown beside the schedule

    def to_dict(self) -> dict:
        return {"op": self.problem.rule.op, "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "describe": self.problem.describe(),
                "schedule": {**self.schedule.to_dict(), "chunk": self.schedule.chunk}, "facts": self.facts,
                "prediction": self.prediction.to_dict(), "derivation": [s.to_dict() for s in self.derivation]}
