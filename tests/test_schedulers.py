"""LR schedulers stepped inside the compiled function (``nova/frontend/schedulers.py``): recorded at
capture instead of run, then called on the host at every call on the side of the optimizer's update
where the function calls them -- the learning rates, the scheduler's own state and the parameters
as eager leaves them, with no recapture; the orders Nova cannot replay refused in one line."""
import copy

import pytest
import torch

import nova
from nova.frontend.errors import NovaUnsupportedError


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batches(n=5):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)) for _ in range(n)]


def _pair(make_scheduler, optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)):
    models = [_model()]
    models.append(copy.deepcopy(models[0]))
    opts = [optimizer(m.parameters()) for m in models]
    return models, opts, [make_scheduler(o) for o in opts]


def _step(model, opt, sched, scheduler_first=False):
    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if scheduler_first:
            sched.step()
        opt.step()
        if not scheduler_first:
            sched.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return train_step


SCHEDULES = {
    "warmup": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 3)),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
    "one_cycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=10),  # momentum too
    "sequential": lambda o: torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=2), torch.optim.lr_scheduler.ExponentialLR(o, 0.8)],
        milestones=[2]),
}


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("scheduler_first", [False, True])
def test_a_scheduler_stepped_inside_the_step_moves_every_call_like_eager(name, scheduler_first):
    (model, twin), (opt, twin_opt), (sched, twin_sched) = _pair(SCHEDULES[name])
    step = nova.compile(_step(model, opt, sched, scheduler_first))
    eager = _step(twin, twin_opt, twin_sched, scheduler_first)
    with pytest.warns(UserWarning) if scheduler_first else _no_warning():   # eager's own order warning
        for x, y in _batches():
            torch.testing.assert_close(step(x, y), eager(x, y), rtol=1e-6, atol=1e-7)
            assert opt.param_groups[0]["lr"] == twin_opt.param_groups[0]["lr"]
    assert sched.state_dict() == twin_sched.state_dict()
    assert sched.get_last_lr() == twin_sched.get_last_lr()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    assert step.stats.captures == 2          # the first step creates the momentum buffers; the schedule never recaptures


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_capture_leaves_the_scheduler_untouched():
    """Tracing records the scheduler's step; only the call runs it (once a call)."""
    (model, _), (opt, _), (sched, _) = _pair(SCHEDULES["warmup"])
    step = nova.compile(_step(model, opt, sched))
    for calls, (x, y) in enumerate(_batches(2), 1):
        step(x, y)
        assert sched.last_epoch == calls and opt.param_groups[0]["lr"] == pytest.approx(0.1 * min(1, (calls + 1) / 3))


def test_a_scheduler_with_a_metric_is_one_line():
    (model, _), (opt, _), _ = _pair(lambda o: None)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)

    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        plateau.step(loss)
        return loss.detach()
    with pytest.raises(NovaUnsupportedError, match=r"ReduceLROnPlateau.step\(.*outside the compiled function") as e:
        nova.compile(train_step)(*_batches(1)[0])
    assert "\n" not in str(e.value)
    assert plateau.last_epoch == 0 and opt.param_groups[0]["lr"] == 0.1


def test_a_scheduler_between_two_updates_is_one_line():
    (model, _), (opt, _), (sched, _) = _pair(SCHEDULES["cosine"])

    def two_updates(x, y):
        for _ in range(2):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            sched.step()
            opt.zero_grad()
    with pytest.raises(NovaUnsupportedError, match="between two steps of its SGD") as e:
        nova.compile(two_updates)(*_batches(1)[0])
    assert "\n" not in str(e.value) and sched.last_epoch == 0


def test_returning_a_python_number_warns_once():
    """``return loss, opt.param_groups[0]["lr"]``: a Python number comes back as the capture computed
    it; the step says so once."""
    from nova.compiler.step import NovaRecaptureWarning
    (model, _), (opt, _), _ = _pair(lambda o: None)

    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach(), opt.param_groups[0]["lr"]
    step = nova.compile(train_step)
    with pytest.warns(NovaRecaptureWarning, match="returns the Python value 0.1") as record:
        for x, y in _batches(3):
            assert step(x, y)[1] == 0.1
    assert sum("returns the Python value" in str(w.message) for w in record) == 1


def test_a_rate_the_step_reads_as_a_number_is_guarded():
    """``loss / opt.param_groups[0]["lr"]``: the rate is a constant of the trace, so a schedule stepped
    between calls recaptures (and says so after three in a row) and every call matches eager."""
    from nova.compiler.step import NovaRecaptureWarning
    (model, twin), (opt, twin_opt), (sched, twin_sched) = _pair(SCHEDULES["cosine"])

    def make(m, o):
        def train_step(x, y):
            loss = torch.nn.functional.mse_loss(m(x), y) * (0.1 / o.param_groups[0]["lr"])
            loss.backward()
            o.step()
            o.zero_grad()
            return loss.detach()
        return train_step
    step, eager = nova.compile(make(model, opt)), make(twin, twin_opt)
    with pytest.warns(NovaRecaptureWarning, match=r"o.param_groups\[0\]\['lr'\] changed on each"):
        for x, y in _batches(4):
            torch.testing.assert_close(step(x, y), eager(x, y), rtol=1e-6, atol=1e-7)
            sched.step()
            twin_sched.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("change", ["scale", "assign"])
def test_a_step_setting_its_own_rate_is_one_line_and_the_rate_is_kept(change):
    (model, _), (opt, _), _ = _pair(lambda o: None)
    group = opt.param_groups[0]

    def train_step(x, y):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if change == "scale":
            opt.param_groups[0]["lr"] *= 0.5
        else:
            group["lr"] = 0.05                # through a reference the step holds
        opt.zero_grad()
    with pytest.raises(NovaUnsupportedError, match=r"sets opt.param_groups\[0\]\['lr'\] itself") as e:
        nova.compile(train_step)(*_batches(1)[0])
    assert "\n" not in str(e.value) and opt.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("read", ["get_last_lr", "param_group"])
def test_the_rate_read_after_the_steps_own_scheduler_step_is_one_line(read):
    (model, _), (opt, _), (sched, _) = _pair(SCHEDULES["cosine"])

    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        rate = sched.get_last_lr()[0] if read == "get_last_lr" else opt.param_groups[0]["lr"]
        return loss.detach() * rate
    with pytest.raises(NovaUnsupportedError, match="get_last_lr|after stepping its LR scheduler") as e:
        nova.compile(train_step)(*_batches(1)[0])
    assert "\n" not in str(e.value) and sched.last_epoch == 0
