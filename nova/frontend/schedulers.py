"""Learning-rate schedulers stepped inside the compiled function.

A compiled step replays tensor work only, so ``scheduler.step()`` written inside the function would
run once, at capture, and never again (the learning rate frozen, and moved one step early).  While
tracing, each scheduler's ``step`` is recorded instead of run; the compiled step then calls it on the
host at every call, where the function calls it relative to its optimizer's update:

* after the optimizer's ``step()`` (how PyTorch's documentation writes it): called after the program
  has run and written its results back;
* before it (the optimizer not yet stepped in the function): called before the program's inputs are
  read, so the update reads the new learning rate, as eager's does.

The learning rate reaches the program as an input (``nova.frontend.optim``), so neither order
recaptures.  Refused in one line: a scheduler stepped with arguments (``ReduceLROnPlateau.step(loss)``
reads a metric on the host; an ``epoch`` argument), one stepped between two updates of its
optimizer in one call (the second update would read a rate the program cannot know), and the rate
read as a Python number inside the step (``get_last_lr()``, or a parameter group's ``lr`` after the
scheduler's step: ``capture._Trace.note_group``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from nova.frontend.errors import NovaUnsupportedError


@dataclass
class SchedulerCalls:
    """The schedulers the function steps, in call order, split by where they run around the program."""
    before: list = field(default_factory=list)
    after: list = field(default_factory=list)


def _scheduler_classes() -> list[type]:
    """``LRScheduler`` and every subclass loaded now that defines its own ``step``."""
    from torch.optim.lr_scheduler import LRScheduler
    classes, todo = [], [LRScheduler]
    while todo:
        cls = todo.pop()
        if "step" in cls.__dict__:
            classes.append(cls)
        todo.extend(cls.__subclasses__())
    return classes


@contextlib.contextmanager
def recorded(events: list):
    """While tracing: ``scheduler.step()`` appends ``("schedule", scheduler)`` to ``events`` (where
    the optimizers' steps append ``("step", optimizer)``) and changes nothing."""
    def record(scheduler, *args, **kwargs):
        if args or kwargs:
            given = ", ".join([type(a).__name__ for a in args] + list(kwargs))
            raise NovaUnsupportedError(
                f"{type(scheduler).__name__}.step({given}) inside a compiled step: a scheduler step with arguments "
                f"reads them on the host at every call; call it outside the compiled function")
        events.append(("schedule", scheduler))

    def last_rate(scheduler):
        raise NovaUnsupportedError(
            f"{type(scheduler).__name__}.get_last_lr() inside a compiled step: the rate is a Python number the "
            f"trace would bake in, while the scheduler steps on the host; read it outside the compiled function")

    from torch.optim.lr_scheduler import LRScheduler
    saved = [(cls, cls.__dict__["step"]) for cls in _scheduler_classes()]
    last = LRScheduler.__dict__["get_last_lr"]
    try:
        for cls, _ in saved:
            cls.step = record
        LRScheduler.get_last_lr = last_rate
        yield
    finally:
        for cls, original in saved:
            cls.step = original
        LRScheduler.get_last_lr = last


def ordered(events: list) -> SchedulerCalls:
    """Split the recorded scheduler steps by their optimizer's update: after it when the function
    stepped the optimizer before, else before it; one line when the optimizer steps on both sides."""
    calls = SchedulerCalls()
    for i, (kind, scheduler) in enumerate(events):
        if kind != "schedule":
            continue
        optimizer = getattr(scheduler, "optimizer", None)
        stepped_before = any(k == "step" and o is optimizer for k, o in events[:i])
        stepped_after = any(k == "step" and o is optimizer for k, o in events[i + 1:])
        if stepped_before and stepped_after:
            raise NovaUnsupportedError(
                f"{type(scheduler).__name__}.step() runs between two steps of its {type(optimizer).__name__} in one "
                f"compiled call: the second update would read a learning rate the program cannot know; step the "
                f"scheduler once, before or after the updates")
        (calls.after if stepped_before else calls.before).append(scheduler)
    return calls
