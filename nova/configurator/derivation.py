"""Recording a derivation: each decision with its formula, its numbers and its reason."""
from __future__ import annotations

from functools import partial

from nova.configurator.schedule import Step
from nova.hwmodel.formula import Formula, _fmt_number


class Derivation:
    """An ordered list of ``Step``s.  ``apply`` evaluates a ``Formula`` and records it."""

    def __init__(self):
        self.steps: list[Step] = []

    def apply(self, step: str, formula: Formula, reason: str, *, post=None, **values):
        """Evaluate ``formula`` on ``values``; ``post`` (e.g. a rounding rule) maps the raw value
        to the decided one and is described in ``reason``.  The step's formula text is printed
        when it is first read (``substituted_texts``)."""
        raw = formula(**values)
        value = post(raw) if post else raw
        self.steps.append(Step(step, value, reason, partial(substituted_texts, formula, values, raw, value)))
        return value

    def note(self, step: str, value, reason: str, formula: str = ""):
        """A decision that is a rule or a choice rather than arithmetic."""
        self.steps.append(Step.note(step, formula or "-", value, reason, formula))
        return value


def substituted_texts(formula: Formula, values: dict, raw, value) -> tuple[str, str]:
    """``(formula with the numbers = raw [-> value], symbolic form)`` of one applied formula."""
    text = f"{formula.substituted(**values)} = {_fmt_number(raw)}"
    if value != raw:
        text += f" -> {_fmt_number(value)}"
    return text, formula.symbolic()


class NullDerivation(Derivation):
    """Evaluates like ``Derivation`` but records nothing (for candidates that are weighed, not shown)."""

    def apply(self, step, formula, reason, *, post=None, **values):
        raw = formula(**values)
        return post(raw) if post else raw

    def note(self, step, value, reason, formula=""):
        return value
