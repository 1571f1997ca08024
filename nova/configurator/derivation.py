"""Recording a derivation: each decision with its formula, its numbers and its reason.

A derivation step is a function that returns its decision and the ``Step`` (or steps) that
explain it: ``formula_step`` for arithmetic (a ``Formula`` evaluated on this problem's numbers),
``note`` for a rule or a choice.  ``Derivation.record`` keeps the steps in order and hands
the decision back; ``NullDerivation`` keeps nothing (candidates that are weighed, not shown).
"""
from __future__ import annotations

from functools import partial

from nova.configurator.step import Step
from nova.hwmodel.formula import Formula, fmt_number


def formula_step(step: str, formula: Formula, reason: str, *, post=None, **values) -> tuple[object, Step]:
    """Evaluate ``formula`` on ``values``; ``post`` (e.g. a rounding rule, described in ``reason``)
    maps the raw value to the decided one.  The step's formula text is printed when first read."""
    raw = formula(**values)
    value = post(raw) if post else raw
    return value, Step(step, value, reason, partial(substituted_texts, formula, values, raw, value))


def note(step: str, value, reason: str, formula: str = "") -> Step:
    """The step of a decision that is a rule or a choice rather than arithmetic."""
    return Step.note(step, formula or "-", value, reason, formula)


def substituted_texts(formula: Formula, values: dict, raw, value) -> tuple[str, str]:
    """``(formula with the numbers = raw [-> value], symbolic form)`` of one applied formula."""
    text = f"{formula.substituted(**values)} = {fmt_number(raw)}"
    if value != raw:
        text += f" -> {fmt_number(value)}"
    return text, formula.symbolic()


class Derivation:
    """An ordered list of ``Step``s."""

    def __init__(self):
        self.steps: list[Step] = []

    def record(self, decided: tuple[object, "Step | list[Step] | None"]):
        """Keep the step(s) of a step function's ``(value, step)`` (None: nothing to show); return the value."""
        value, steps = decided
        if isinstance(steps, Step):
            self.steps.append(steps)
        elif steps:
            self.steps.extend(steps)
        return value

    def apply(self, step: str, formula: Formula, reason: str, *, post=None, **values):
        """Record ``formula_step(...)`` and return its value (derivations written inline)."""
        return self.record(formula_step(step, formula, reason, post=post, **values))

    def note(self, step: str, value, reason: str, formula: str = ""):
        """Record ``note(...)`` and return ``value``."""
        return self.record((value, note(step, value, reason, formula)))


class NullDerivation(Derivation):
    """Records nothing (for candidates that are weighed, not shown)."""

    def record(self, decided):
        return decided[0]
