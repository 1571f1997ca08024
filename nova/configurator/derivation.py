"""Recording a derivation: each decision with its formula, its numbers and its reason."""
from __future__ import annotations

from nova.configurator.schedule import Step
from nova.hwmodel.formula import Formula, fmt_number


class Derivation:
    """An ordered list of ``Step``s.  ``apply`` evaluates a ``Formula`` and records it."""

    def __init__(self):
        self.steps: list[Step] = []

    def apply(self, step: str, formula: Formula, reason: str, *, post=None, **values):
        """Evaluate ``formula`` on ``values``; ``post`` (e.g. a rounding rule) maps the raw value
        to the decided one and is described in ``reason``."""
        raw = formula(**values)
        value = post(raw) if post else raw
        text = f"{formula.substituted(**values)} = {fmt_number(raw)}"
        if post and value != raw:
            text += f" -> {fmt_number(value)}"
        self.steps.append(Step(step, text, value, reason, formula.symbolic()))
        return value

    def note(self, step: str, value, reason: str, formula: str = ""):
        """A decision that is a rule or a choice rather than arithmetic."""
        self.steps.append(Step(step, formula or "-", value, reason, formula))
        return value


class NullDerivation(Derivation):
    """Evaluates like ``Derivation`` but records nothing (for candidates that are weighed, not shown)."""

    def apply(self, step, formula, reason, *, post=None, **values):
        raw = formula(**values)
        return post(raw) if post else raw

    def note(self, step, value, reason, formula=""):
        return value
