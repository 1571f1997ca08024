"""Python values a compiled step reads are never frozen silently: a module attribute, a global, a
closure cell or a config dict entry changed between calls recaptures with the value named, and the
compiled trajectory stays eager's; a value changing on every call is warned about once, as is a
Python side effect of the step itself."""
import types
import warnings

import pytest
import torch

import nova
from nova.compiler.step import NovaRecaptureWarning

SCALE = 1.0                     # a module-level global the step reads
SETTINGS = {"shift": 0.0}       # a config dict entry


class Tempered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 5)
        self.temperature = 1.0

    def forward(self, x, y):
        logits = self.lin(x) / self.temperature * SCALE + SETTINGS["shift"]
        return torch.nn.functional.cross_entropy(logits, y)


def make(closure_scale=None):
    model = Tempered()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    cell = {"factor": 1.0} if closure_scale is None else closure_scale

    def step(x, y):
        loss = model(x, y) * cell["factor"]
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return model, opt, step, cell


def data(n):
    gen = torch.Generator().manual_seed(3)
    return [(torch.randn(4, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen)) for _ in range(n)]


@pytest.mark.parametrize("what", ["attribute", "global", "dict entry", "closure"])
def test_a_changed_python_value_recaptures_and_matches_eager(what):
    global SCALE
    mc, _, step_c, cell_c = make()
    me, _, step_e, cell_e = make()
    compiled = nova.compile(step_c, backend="reference")
    batches = data(4)
    try:
        for i, (x, y) in enumerate(batches):
            if i == 2:
                if what == "attribute":
                    mc.temperature = me.temperature = 0.25
                elif what == "global":
                    SCALE = 3.0
                elif what == "dict entry":
                    SETTINGS["shift"] = 2.0
                else:
                    cell_c["factor"] = cell_e["factor"] = 4.0
            got, want = compiled(x, y), step_e(x, y)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (i, got, want)
    finally:
        SCALE, SETTINGS["shift"] = 1.0, 0.0
    assert compiled.stats.captures == 2
    expected = {"attribute": "Python value model.temperature changed: 1.0 -> 0.25",
                "global": "SCALE changed: 1.0 -> 3.0",
                "dict entry": "SETTINGS['shift'] changed: 0.0 -> 2.0",
                "closure": "closure cell['factor'] changed: 1.0 -> 4.0"}[what]
    assert expected in compiled.stats.last_recapture_reason
    for a, b in zip(mc.parameters(), me.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_value_changing_every_call_is_named_once_in_a_warning():
    model, _, step, _ = make()
    compiled = nova.compile(step, backend="reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(data(6)):
            model.temperature = 1.0 + 0.1 * i
            compiled(x, y)
    mine = [w for w in caught if issubclass(w.category, NovaRecaptureWarning)]
    assert len(mine) == 1 and "model.temperature changed on each of the last 3 captures" in str(mine[0].message)
    assert "tensor" in str(mine[0].message)                  # the fix
    assert compiled.stats.captures == 6


def test_the_steps_own_python_side_effect_is_warned_about_and_not_guarded():
    model = Tempered()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class Counter:
        calls = 0
    counter = Counter()

    def step(x, y):
        counter.calls += 1
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    compiled = nova.compile(step, backend="reference")
    with pytest.warns(NovaRecaptureWarning, match="changes the Python value"):
        for x, y in data(3):
            compiled(x, y)
    assert compiled.stats.captures == 1 and counter.calls == 1


class Config:                                   # a config class read as Config.alpha
    alpha = 1.0


BIG = {**{f"unused{i}": 0 for i in range(80)}, "alpha": 1.0}    # a config dict with many entries
NESTED = {"loss": {"weights": {"alpha": 1.0}}}                  # a nested config


def _numpy_config():
    import numpy
    return {"alpha": numpy.float32(1.0)}


NUMPY = _numpy_config()
PLACES = {
    "class attribute": (lambda: Config.alpha, lambda v: setattr(Config, "alpha", v)),
    "large dict": (lambda: BIG["alpha"], lambda v: BIG.__setitem__("alpha", v)),
    "nested dict": (lambda: NESTED["loss"]["weights"]["alpha"],
                    lambda v: NESTED["loss"]["weights"].__setitem__("alpha", v)),
    "numpy scalar": (lambda: NUMPY["alpha"], lambda v: NUMPY.__setitem__("alpha", type(NUMPY["alpha"])(v))),
}


@pytest.mark.parametrize("where", PLACES)
def test_config_values_in_classes_large_or_nested_dicts_and_numpy_scalars_are_guarded(where):
    """A weight read from a config class, a dict of many entries, a dict three levels down or a NumPy
    scalar: a change recaptures and every loss is eager's (each was baked in silently before)."""
    read, write = PLACES[where]
    write(1.0)

    def make_step():
        model = Tempered()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)

        def step(x, y):
            loss = model(x, y) * read()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        return step
    steps = [make_step(), make_step()]
    compiled = nova.compile(steps[0])
    gen = torch.Generator().manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NovaRecaptureWarning)
        for value in (1.0, 3.0, 0.25):
            write(value)
            x, y = torch.randn(4, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen)
            torch.testing.assert_close(compiled(x, y), steps[1](x, y))
    write(1.0)
    assert compiled.stats.captures == 3


def test_a_number_argument_changing_every_call_is_named_once_in_a_warning():
    model, opt, _, _ = make()

    def step(x, y, scale):
        loss = model(x, y) * scale
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    compiled = nova.compile(step)
    gen = torch.Generator().manual_seed(0)
    with pytest.warns(NovaRecaptureWarning, match=r"argument 2 \(a float\) changed on each of the last 3") as record:
        for i in range(6):
            compiled(torch.randn(4, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen), 1.0 / (i + 1))
    assert sum("argument 2" in str(w.message) for w in record) == 1 and compiled.stats.captures == 6


_CFG = types.ModuleType("nova_test_cfg")      # a config module read as cfg.SCALE (import config as cfg)
_CFG.SCALE = 1.0


class Styled(torch.nn.Module):
    """Python state a forward reads besides numbers: a function held as an attribute, a dtype, a set,
    a list inside a list, a config module's attribute."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
        self.act = torch.tanh
        self.compute_dtype = torch.float32
        self.skip = set()
        self.cfg = {"mults": [[1.0, 1.0]]}

    def forward(self, x, y):
        h = self.l1(x)
        h = h if "act" in self.skip else self.act(h)
        h = h.to(self.compute_dtype).float() * self.cfg["mults"][0][1] * _CFG.SCALE
        return torch.nn.functional.cross_entropy(self.l2(h), y)


def _relu_forward(model):
    model.forward = lambda x, y: torch.nn.functional.cross_entropy(model.l2(torch.relu(model.l1(x))), y)


STYLES = {"a function attribute": lambda m: setattr(m, "act", torch.relu),
          "an instance's own forward": _relu_forward,
          "a dtype attribute": lambda m: setattr(m, "compute_dtype", torch.bfloat16),
          "a set": lambda m: m.skip.add("act"),
          "a list inside a list": lambda m: m.cfg["mults"][0].__setitem__(1, 3.0),
          "a config module's attribute": None}


@pytest.mark.parametrize("style", STYLES)
def test_functions_dtypes_sets_nested_lists_and_config_modules_are_guarded(style):
    """Each changed between calls recaptures and the step stays eager's (they were frozen silently:
    the first capture replayed with the old function, dtype or number)."""
    import copy
    model = Styled()
    twin = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]

    def make_step(m, o):
        def step(x, y):
            loss = m(x, y)
            loss.backward()
            o.step()
            o.zero_grad()
            return loss.detach()
        return step
    compiled, eager = nova.compile(make_step(model, opts[0]), backend="executor"), make_step(twin, opts[1])
    gen = torch.Generator().manual_seed(2)
    try:
        for i in range(4):
            x, y = torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)
            if i == 2:
                if STYLES[style] is None:
                    _CFG.SCALE = 3.0
                else:
                    STYLES[style](model)
                    STYLES[style](twin)
            torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-6, atol=1e-6)
    finally:
        _CFG.SCALE = 1.0
    assert compiled.stats.captures == 2
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
