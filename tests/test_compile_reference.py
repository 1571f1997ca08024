"""nova.compile through the reference interpreter against eager PyTorch: one whole training step
(forward, backward, optimizer, zero_grad), its write-back into the user's parameters, grads and
optimizer state, the step cache and its guards.

Trajectories under AdamW run in float64: Adam divides each update by the gradient's own running
RMS, so float32 rounding noise in gradients that are mathematically zero (the attention key bias:
softmax ignores a constant added to every key) becomes an lr-sized update in *any* two correct
implementations (eager's flash kernel vs the IR's reference attention).  The float32 tests check
the first step's loss and gradients, and SGD trajectories, which do not amplify noise.
"""
import contextlib
import dataclasses
import io
import warnings

import pytest
import torch

import nova
from nova.models.gpt import GPT
from nova.models.gpt import CONFIGS as GPT_CONFIGS
from nova.models.llama import CONFIGS as LLAMA_CONFIGS
from nova.models.llama import Llama

# one-layer models for the tests of semantics (capturing costs ~1 ms per traced op on 2 cores)
GPT1 = dataclasses.replace(GPT_CONFIGS["tiny"], n_layer=1)
LLAMA1 = dataclasses.replace(LLAMA_CONFIGS["tiny"], n_layer=1)


def rel(a, b) -> float:
    """Relative Frobenius error of a against b."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def batches(vocab, n, shape=(2, 8), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab, shape, generator=g), torch.randint(0, vocab, shape, generator=g))
            for _ in range(n)]


def make_step(model, opt, zero="after"):
    """The user's train step; ``zero`` is where zero_grad goes: after/before/none/after_keep."""
    def train_step(idx, targets):
        if zero == "before":
            opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        if zero == "after":
            opt.zero_grad(set_to_none=True)
        elif zero == "after_keep":
            opt.zero_grad(set_to_none=False)
        return loss
    return train_step


def pair(make_model, make_opt):
    """Two identical (model, optimizer) pairs: one for eager, one for Nova."""
    models = [make_model(), make_model()]
    return [(m, make_opt(m)) for m in models]


def assert_same_state(model_c, opt_c, model_e, opt_e, tol):
    for (name, pc), pe in zip(model_c.named_parameters(), model_e.parameters()):
        assert rel(pc, pe) < tol, f"parameter {name}: {rel(pc, pe):.2e}"
        assert (pc.grad is None) == (pe.grad is None), f"grad policy of {name}"
        if pe.grad is not None:
            assert rel(pc.grad, pe.grad) < tol, f"grad of {name}: {rel(pc.grad, pe.grad):.2e}"
    sc, se = opt_c.state_dict(), opt_e.state_dict()
    assert sc["param_groups"] == se["param_groups"]
    assert list(sc["state"]) == list(se["state"])
    for index in se["state"]:
        assert list(sc["state"][index]) == list(se["state"][index]), f"state keys of param {index}"
        for key, ve in se["state"][index].items():
            vc = sc["state"][index][key]
            assert (vc.dtype, vc.device, vc.shape) == (ve.dtype, ve.device, ve.shape), f"state {index}.{key}"
            assert rel(vc, ve) < tol, f"state {index}.{key}: {rel(vc, ve):.2e}"


# ----------------------------------------------------------------------------- first step, float32
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_first_step_loss_and_every_gradient_match_eager(family):
    make_model = (lambda: GPT("tiny")) if family == "gpt" else (lambda: Llama("tiny"))
    (mc, oc), (me, oe) = pair(make_model, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3))
    step_c = nova.compile(make_step(mc, oc, zero="before"), backend="reference")
    step_e = make_step(me, oe, zero="before")
    idx, targets = batches(mc.config.vocab_size, 1)[0]
    loss_c, loss_e = step_c(idx, targets), step_e(idx, targets)
    assert rel(loss_c, loss_e) < 1e-5
    for (name, pc), pe in zip(mc.named_parameters(), me.parameters()):
        assert pc.grad is not None and rel(pc.grad, pe.grad) < 1e-5, name
    # the step must not be a no-op: parameters moved, like eager's
    assert all(not torch.equal(pc, p0) for pc, p0 in zip(mc.parameters(), make_model().parameters()))


# ----------------------------------------------------------------------------- trajectories
def test_gpt_adamw_five_steps_match_eager_float64():
    with default_dtype(torch.float64):
        (mc, oc), (me, oe) = pair(lambda: GPT("tiny"),
                                  lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1))
    step_c = nova.compile(make_step(mc, oc), backend="reference")
    step_e = make_step(me, oe)
    for idx, targets in batches(mc.config.vocab_size, 5):
        assert rel(step_c(idx, targets), step_e(idx, targets)) < 1e-5
    assert_same_state(mc, oc, me, oe, 1e-5)
    assert step_c.stats.captures == 1 and step_c.cache_size == 1     # lazily-created state: one graph
    assert all(p.grad is None for p in mc.parameters())               # zero_grad(set_to_none=True)
    assert oc.state_dict()["state"][0]["step"].item() == 5.0


def test_llama_sgd_momentum_five_steps_match_eager_float32():
    (mc, oc), (me, oe) = pair(lambda: Llama("tiny"),
                              lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3))
    step_c = nova.compile(make_step(mc, oc), backend="reference")
    step_e = make_step(me, oe)
    for idx, targets in batches(mc.config.vocab_size, 5):
        assert rel(step_c(idx, targets), step_e(idx, targets)) < 1e-5
    assert_same_state(mc, oc, me, oe, 1e-5)
    # the first step has no momentum buffer (it starts as the gradient): its own graph
    assert step_c.stats.captures == 2
    assert any(n.op == "sgd" and len(n.inputs) == 4 for n in step_c.graph.nodes)      # reads the buffer


@pytest.mark.parametrize("opt_factory", [
    lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1),                       # coupled decay
    lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, maximize=True),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.8, 0.95), eps=1e-6, maximize=True),
    lambda ps: torch.optim.SGD(ps, lr=0.05),
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, nesterov=False),
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True),
], ids=["adam-coupled", "adam-maximize", "adamw-betas", "sgd", "sgd-dampening", "sgd-nesterov"])
def test_optimizer_variants_match_eager(opt_factory):
    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    (mc, oc), (me, oe) = pair(make_model, lambda m: opt_factory(m.parameters()))

    def make(model, opt):
        def step(x, y):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step
    step_c, step_e = nova.compile(make(mc, oc), backend="reference"), make(me, oe)
    g = torch.Generator().manual_seed(3)
    for _ in range(4):
        x, y = torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g, dtype=torch.float64)
        assert rel(step_c(x, y), step_e(x, y)) < 1e-9
    assert_same_state(mc, oc, me, oe, 1e-9)


# ----------------------------------------------------------------------------- eager semantics
def test_parameters_and_state_are_updated_in_place():
    model = GPT(GPT1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = nova.compile(make_step(model, opt, zero="before"), backend="reference")
    params = [(p, p.data_ptr()) for p in model.parameters()]
    (idx, targets), (idx2, targets2) = batches(model.config.vocab_size, 2)
    step(idx, targets)
    state = {k: (v, v.data_ptr()) for k, v in opt.state[params[0][0]].items()}
    grads = [(p.grad, p.grad.data_ptr()) for p, _ in params]
    step(idx2, targets2)
    assert [(p, p.data_ptr()) for p in model.parameters()] == params
    assert all(opt.state[params[0][0]][k] is v and v.data_ptr() == ptr for k, (v, ptr) in state.items())
    assert all(p.grad is g and g.data_ptr() == ptr for (p, _), (g, ptr) in zip(params, grads))
    step_state = opt.state[params[0][0]]["step"]
    assert step_state.device.type == "cpu" and step_state.dtype == torch.float32 and step_state.item() == 2.0


def test_grads_accumulate_when_the_step_does_not_zero_them():
    (mc, oc), (me, oe) = pair(lambda: GPT(GPT1), lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    step_c, step_e = nova.compile(make_step(mc, oc, zero="none"), backend="reference"), make_step(me, oe, zero="none")
    for idx, targets in batches(mc.config.vocab_size, 3):
        step_c(idx, targets)
        step_e(idx, targets)
    assert_same_state(mc, oc, me, oe, 1e-5)
    # first call without .grad, later calls read and update the existing .grad: two graphs
    assert step_c.cache_size == 2
    roles = {i.role for i in step_c.graph.inputs}
    assert "grad" in roles and any(o.role == "grad" and o.updates is not None for o in step_c.graph.outputs)


def test_zero_grad_without_set_to_none_leaves_zero_grads():
    (mc, oc), (me, oe) = pair(lambda: Llama(LLAMA1), lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    step_c = nova.compile(make_step(mc, oc, zero="after_keep"), backend="reference")
    step_e = make_step(me, oe, zero="after_keep")
    for idx, targets in batches(mc.config.vocab_size, 2):
        step_c(idx, targets)
        step_e(idx, targets)
    assert all(p.grad is not None and not p.grad.any() for p in mc.parameters())
    assert_same_state(mc, oc, me, oe, 1e-5)


def test_checkpoint_resume_and_switching_back_to_eager():
    with default_dtype(torch.float64):
        (mc, oc), (me, oe) = pair(lambda: GPT(GPT1), lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2))
        resumed_model = GPT(GPT1, seed=5)
    data = batches(mc.config.vocab_size, 5)
    step_c, step_e = nova.compile(make_step(mc, oc), backend="reference"), make_step(me, oe)
    for idx, targets in data[:3]:
        step_c(idx, targets)
        step_e(idx, targets)
    # checkpoint the compiled run (saved and loaded like a file), resume it in a fresh eager model + optimizer
    buffer = io.BytesIO()
    torch.save({"model": mc.state_dict(), "opt": oc.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer)
    resumed_model.load_state_dict(checkpoint["model"])
    resumed_opt = torch.optim.AdamW(resumed_model.parameters(), lr=1e-2)
    resumed_opt.load_state_dict(checkpoint["opt"])
    step_r = make_step(resumed_model, resumed_opt)
    # switch the compiled run itself back to eager
    step_back = make_step(mc, oc)
    for idx, targets in data[3:]:
        step_e(idx, targets)
        step_r(idx, targets)
        step_back(idx, targets)
    assert_same_state(resumed_model, resumed_opt, me, oe, 1e-5)
    assert_same_state(mc, oc, me, oe, 1e-5)


# ----------------------------------------------------------------------------- the cache and guards
def test_new_batch_size_compiles_a_new_graph_and_old_one_is_reused():
    model = GPT(GPT1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = nova.compile(make_step(model, opt), backend="reference")
    v = model.config.vocab_size
    step(*batches(v, 1, (2, 8))[0])
    step(*batches(v, 1, (3, 8))[0])
    assert step.cache_size == 2 and step.stats.captures == 2
    assert step.graph.inputs[[i.name for i in step.graph.inputs].index("idx")].value.shape == (3, 8)
    assert "input shapes" in step.stats.last_recapture_reason
    step(*batches(v, 1, (2, 8))[0])
    assert step.stats.captures == 2 and step.stats.cache_hits == 1


def test_changed_learning_rate_reuses_the_program_and_matches_eager():
    """lr is a program input: changing it between steps neither recaptures nor is ignored."""
    with default_dtype(torch.float64):
        (mc, oc), (me, oe) = pair(lambda: GPT(GPT1), lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2))
    step_c, step_e = nova.compile(make_step(mc, oc), backend="reference"), make_step(me, oe)
    data = batches(mc.config.vocab_size, 3)
    for i, (idx, targets) in enumerate(data):
        if i == 2:
            for o in (oc, oe):
                o.param_groups[0]["lr"] = 5e-3
        step_c(idx, targets)
        step_e(idx, targets)
    assert step_c.stats.captures == 1
    assert all(set(n.attrs) <= {"decoupled", "maximize"} for n in step_c.graph.nodes if n.op == "adamw")
    assert_same_state(mc, oc, me, oe, 1e-5)


SCHEDULES = {
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
    "warmup-lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 3)),
    "onecycle (lr and betas)": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=2e-2, total_steps=10),
    "hand-written": None,
}


@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_learning_rate_schedules_capture_once_and_match_eager(schedule, backend):
    """Every scheduler (and a schedule assigning param_groups[i]["lr"]) over 5 steps: one capture,
    the same trajectory as eager, in two parameter groups (decay and no decay)."""
    def make_opt(m):
        decay = [p for p in m.parameters() if p.dim() == 2]
        rest = [p for p in m.parameters() if p.dim() != 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                 lr=1e-2, betas=(0.9, 0.95))
    with default_dtype(torch.float64):
        (mc, oc), (me, oe) = pair(lambda: GPT(GPT1), make_opt)
    scheds = [SCHEDULES[schedule](o) if SCHEDULES[schedule] else None for o in (oc, oe)]
    step_c, step_e = nova.compile(make_step(mc, oc), backend=backend), make_step(me, oe)
    for i, (idx, targets) in enumerate(batches(mc.config.vocab_size, 5)):
        assert rel(step_c(idx, targets), step_e(idx, targets)) < 1e-9
        for o, sched in zip((oc, oe), scheds):
            if sched is None:
                for g in o.param_groups:
                    g["lr"] = 1e-2 * (0.5 ** (i + 1))
            else:
                sched.step()
    assert oc.param_groups[0]["lr"] == oe.param_groups[0]["lr"]
    assert step_c.stats.captures == 1, step_c.stats.history
    assert_same_state(mc, oc, me, oe, 1e-9)


def test_a_changed_model_is_detected():
    global model_under_test
    model_under_test = Llama(LLAMA1)
    opt = torch.optim.SGD(model_under_test.parameters(), lr=0.1)

    def step_fn(idx, targets):
        loss = model_under_test(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    step = nova.compile(step_fn, backend="reference")
    data = batches(model_under_test.config.vocab_size, 4)
    step(*data[0])
    # a new parameter (used by nothing yet) changes the model
    model_under_test.extra = torch.nn.Parameter(torch.zeros(3))
    step(*data[1])
    assert step.stats.captures == 2 and step.stats.last_recapture_reason == "model model_under_test: parameters extra added"
    # a new parameter group in the optimizer
    opt.add_param_group({"params": [model_under_test.extra], "lr": 0.5})
    step(*data[2])
    assert step.stats.captures == 3
    assert "optimizer opt: parameter groups 1 -> 2 (add_param_group)" in step.stats.last_recapture_reason
    assert "model" not in step.stats.last_recapture_reason, step.stats.last_recapture_reason
    # another model object under the same global name: its parameters are the ones trained
    old = model_under_test
    model_under_test = Llama(LLAMA1, seed=3)
    before = [p.detach().clone() for p in model_under_test.parameters()]
    old_before = [p.detach().clone() for p in old.parameters()]
    step(*data[3])
    assert step.stats.captures == 4
    # like eager: backward reaches the new model (its grads stay: the optimizer zeroes the old
    # model's), SGD steps the old model's parameters, whose grads are None: nothing moves
    assert all(p.grad is not None for p in model_under_test.parameters())
    assert all(torch.equal(a, b) for a, b in zip(model_under_test.parameters(), before))
    assert all(torch.equal(a, b) for a, b in zip(old.parameters(), old_before))


def test_forward_only_functions_with_and_without_no_grad():
    model = GPT(GPT1)
    params_before = [p.detach().clone() for p in model.parameters()]
    fwd = nova.compile(lambda x: model(x), backend="reference")
    idx = batches(model.config.vocab_size, 1)[0][0]
    expected = model(idx).detach()
    assert rel(fwd(idx), expected) < 1e-6
    with torch.no_grad():
        assert rel(fwd(idx), expected) < 1e-6
    assert fwd.stats.captures == 2                      # grad mode is part of the guard
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), params_before))
    assert all(p.grad is None for p in model.parameters())
    assert {o.role for o in fwd.graph.outputs} == {"result"}
    assert not {"adamw", "sgd", "attention_backward"} & set(fwd.graph.op_counts())


def test_decorator_forms():
    model = torch.nn.Linear(4, 2)

    @nova.compile
    def plain(x):
        return model(x)

    @nova.compile(backend="reference")
    def configured(x):
        return {"y": model(x), "n": 3}

    x = torch.randn(3, 4)
    assert torch.allclose(plain(x), model(x))
    out = configured(x)
    assert out["n"] == 3 and torch.allclose(out["y"], model(x))
    assert isinstance(plain, nova.compiler.CompiledStep) and plain.__name__ == "plain"


def test_explicit_models_and_optimizers():
    def make():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2).double()
    holder = {"m": make()}
    opt = torch.optim.SGD(holder["m"].parameters(), lr=0.1)
    ref = make()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)

    def step(m, o, x):
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss
    compiled = nova.compile(lambda x: step(holder["m"], opt, x), models=[holder["m"]], optimizers=[opt],
                            backend="reference")
    x = torch.randn(3, 4, dtype=torch.float64)
    assert rel(compiled(x), step(ref, ref_opt, x)) < 1e-12
    assert_same_state(holder["m"], opt, ref, ref_opt, 1e-12)


def test_capture_is_recorded_and_explained():
    model = GPT(GPT1)
    opt = torch.optim.AdamW(model.parameters())
    step = nova.compile(make_step(model, opt), backend="reference")
    step(*batches(model.config.vocab_size, 1)[0])
    assert step.stats.capture_s > 0 and step.stats.history[0][0] == "first call"
    text = step.explain()
    assert "adamw" in text and "attention_backward" in text


def test_gradient_clipping_and_bfloat16_steps():
    cfg = GPT1

    def make(model, opt):
        def step(idx, targets):
            loss = model(idx, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            opt.zero_grad()
            return loss
        return step
    with default_dtype(torch.float64):
        (mc, oc), (me, oe) = pair(lambda: GPT(cfg), lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2))
    step_c, step_e = nova.compile(make(mc, oc), backend="reference"), make(me, oe)
    for idx, targets in batches(cfg.vocab_size, 2):
        assert rel(step_c(idx, targets), step_e(idx, targets)) < 1e-9
    assert_same_state(mc, oc, me, oe, 1e-9)
    assert not step_c.captured.stats.opaque            # the norms are lowered too

    (mc, oc), (me, oe) = pair(lambda: GPT(cfg).to(torch.bfloat16), lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    step_c, step_e = nova.compile(make(mc, oc), backend="reference"), make(me, oe)
    idx, targets = batches(cfg.vocab_size, 1)[0]
    loss_c, loss_e = step_c(idx, targets), step_e(idx, targets)
    assert loss_c.dtype == torch.bfloat16 and rel(loss_c, loss_e) < 1e-2
    assert all(p.dtype == torch.bfloat16 for p in mc.parameters())
    # bf16 rounding (2^-8) in differently ordered sums: zero-initialised biases differ by ~1% after one step
    assert max(rel(pc, pe) for pc, pe in zip(mc.parameters(), me.parameters())) < 5e-2


def test_a_trainer_method_with_a_learning_rate_schedule():
    """Modules and optimizers found as attributes of the bound method's object; an LR scheduler
    changes lr every 2 steps (no recapture: lr is a program input) and sees that the optimizer stepped."""
    cfg = GPT1

    class Trainer:
        def __init__(self):
            self.model = GPT(cfg).double()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)

        def step(self, idx, targets):
            self.model.zero_grad(set_to_none=False)              # Module.zero_grad this time
            loss = self.model(idx, targets)
            loss.backward()
            self.opt.step()
            return loss
    compiled, eager = Trainer(), Trainer()
    step_c = nova.compile(compiled.step, backend="reference")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # e.g. "lr_scheduler.step() before optimizer.step()"
        for idx, targets in batches(cfg.vocab_size, 5):
            assert rel(step_c(idx, targets), eager.step(idx, targets)) < 1e-10
            compiled.sched.step()
            eager.sched.step()
    assert_same_state(compiled.model, compiled.opt, eager.model, eager.opt, 1e-10)
    # lr 0.1, 0.1, 0.05, 0.05, 0.025 is a program input: the first step (no momentum buffers yet)
    # and the later ones are the two graphs
    assert step_c.stats.captures == 2
