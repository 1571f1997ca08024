"""A user's own training step, captured on the meta device and precompiled into the kernel cache
on a host without a GPU (what ``nova precompile train gpt42m`` does for the built-in models).

    nova precompile train --step my_pkg.my_module:make_step --batch 32 --seq 512 --target h200
    nova precompile train --step ./my_model.py:make_step --target h200

    nova.precompile(train_step, idx, targets, target="h200")        # from Python

The factory (``--step MODULE:FACTORY`` or ``FILE.py:FACTORY``; ``FACTORY`` may be dotted,
``Class.method``) is called under ``torch.device("meta")`` (its modules, optimizer state and
example tensors allocate nothing) with the keyword arguments given on the command line that its
signature takes (``batch=``, ``seq=``), and returns ``(step_fn, example_args)`` or ``(step_fn,
example_args, models, optimizers)``.  ``step_fn(*example_args)`` is one whole step (forward,
``loss.backward()``, ``opt.step()``); its modules and optimizers are found among its globals and
closure (``nova.compile``'s discovery) unless the factory names them.  The step is captured
(``nova.frontend.capture``), planned for the target (``nova.passes.pipeline``) and every kernel
of its CUDA program compiled into the cache (``nova.compiler.precompile.precompile_planned``).

A bad ``--step`` is one line (``StepSpecError``, exit status 2): not ``MODULE:FACTORY``, a missing
module or file, a missing attribute, not callable, a factory that fails or returns something else.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path


class StepSpecError(ValueError):
    """A ``--step`` that does not name a usable step factory (one line)."""


FACTORY_KEYWORDS = ("batch", "seq")          # command-line values a factory may take


@dataclass
class UserStep:
    """What a factory returned: the step, its example arguments, and the modules and optimizers it
    names (None: discovered from the step's globals and closure)."""
    fn: object
    args: tuple
    models: list | None = None
    optimizers: list | None = None
    name: str = "step"


# ====================================================================== --step MODULE:FACTORY
def load_factory(spec: str):
    """The callable ``spec`` names: ``package.module:factory`` (imported with the current directory
    on the path, like ``python -m``) or ``path/to/file.py:factory``."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise StepSpecError(f"--step {spec!r} must be MODULE:FACTORY (e.g. my_pkg.my_module:make_step) or "
                            f"FILE.py:FACTORY")
    module = _import_file(module_name, spec) if module_name.endswith(".py") else _import_module(module_name, spec)
    obj = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            owner = f"module {module_name!r}" if obj is module else f"{type(obj).__name__} {attribute!r}"
            raise StepSpecError(f"--step {spec!r}: {owner} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise StepSpecError(f"--step {spec!r}: {attribute} is a {type(obj).__name__}, not a callable factory "
                            f"returning (step_fn, example_args)")
    return obj


def _import_module(name: str, spec: str):
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise StepSpecError(f"--step {spec!r}: no module named {e.name!r} (run from the directory that holds "
                                f"it, or add it to PYTHONPATH)") from None
        raise StepSpecError(f"--step {spec!r}: importing {name} failed: {type(e).__name__}: {_first_line(e)}") from None
    except Exception as e:
        raise StepSpecError(f"--step {spec!r}: importing {name} failed: {type(e).__name__}: {_first_line(e)}") from None


def _import_file(path_text: str, spec: str):
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise StepSpecError(f"--step {spec!r}: no file {path_text!r}")
    name = f"nova_user_step_{path.stem}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise StepSpecError(f"--step {spec!r}: importing {path_text} failed: {type(e).__name__}: "
                            f"{_first_line(e)}") from None
    return module


def make_user_step(factory, spec: str = "", **values) -> UserStep:
    """Call ``factory`` on the meta device with the ``values`` (None ones left out) its signature
    takes; check what it returns."""
    label, call, returned = _call_on_meta(factory, spec, values)
    expected = "expected (step_fn, example_args) or (step_fn, example_args, models, optimizers)"
    if not isinstance(returned, (tuple, list)) or len(returned) not in (2, 4):
        what = f"a {type(returned).__name__} of {len(returned)}" if isinstance(returned, (tuple, list)) \
            else f"a {type(returned).__name__}"
        raise StepSpecError(f"--step {label!r}: {call} returned {what}; {expected}")
    fn, args = returned[0], returned[1]
    if not callable(fn):
        raise StepSpecError(f"--step {label!r}: {call} returned a {type(fn).__name__} as step_fn; {expected}")
    if not isinstance(args, (tuple, list)):
        raise StepSpecError(f"--step {label!r}: {call} returned a {type(args).__name__} as example_args (a tuple "
                            f"of the step's arguments); {expected}")
    models = optimizers = None
    if len(returned) == 4:
        models, optimizers = (_as_list(returned[2], "models", label), _as_list(returned[3], "optimizers", label))
    name = getattr(fn, "__name__", "step").replace("<", "").replace(">", "")
    return UserStep(fn, tuple(args), models, optimizers, name)


def _call_on_meta(factory, spec: str, values: dict):
    """(label, call text, what it returned): ``factory`` called on the meta device with the
    ``values`` (None ones left out) its signature takes."""
    import torch
    label = spec or getattr(factory, "__qualname__", "factory")
    given = {k: v for k, v in values.items() if v is not None}
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    refused = [k for k in given if k not in parameters and not takes_any]
    if refused:
        raise StepSpecError(f"--step {label!r}: the factory takes no {refused[0]!r} parameter, so --{refused[0]} "
                            f"cannot be passed to it (its parameters: {', '.join(parameters) or 'none'})")
    call = f"{getattr(factory, '__name__', 'factory')}({', '.join(f'{k}={v!r}' for k, v in given.items())})"
    try:
        with torch.device("meta"):
            returned = factory(**given)
    except StepSpecError:
        raise
    except Exception as e:
        raise StepSpecError(f"--step {label!r}: {call} raised {type(e).__name__}: {_first_line(e)}") from None
    return label, call, returned


def make_model(factory, spec: str = "", **values):
    """``(model, example_inputs)`` from a model factory (``nova precompile dynamo --step``), called on
    the meta device with the ``values`` (None ones left out) its signature takes; one line
    (``StepSpecError``) for a factory that fails or returns something else."""
    import torch
    label, call, returned = _call_on_meta(factory, spec, values)
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2 and isinstance(returned[0], torch.nn.Module)
            and isinstance(returned[1], (tuple, list))):
        what = f"a {type(returned).__name__}" + (f" of {len(returned)}" if isinstance(returned, (tuple, list)) else "")
        raise StepSpecError(f"--step {label!r}: {call} returned {what}; expected (model, example_inputs): an "
                            f"nn.Module and a tuple of its arguments")
    return returned[0], tuple(returned[1])


def _as_list(x, what: str, label: str):
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    import torch
    if isinstance(x, (torch.nn.Module, torch.optim.Optimizer)):
        return [x]
    raise StepSpecError(f"--step {label!r}: the factory's {what} is a {type(x).__name__}; give a list (or None)")


# ====================================================================== capture, plan, precompile
def plan_step(step: UserStep, target):
    """The step captured (fake tensors: nothing runs) and planned for ``target`` as ``nova.compile``
    plans it (the program's allocations listed, the default memory policy: the same kernels)."""
    from nova import options
    from nova.compiler.explain import host_offload, memory_policy
    from nova.compiler.outside_arena import account
    from nova.frontend import capture
    from nova.passes import pipeline
    captured = capture(step.fn, step.args, models=step.models, optimizers=step.optimizers, name=step.name)
    opts = options.current()
    return pipeline(captured.graph, target, outside_arena=account, memory_policy=memory_policy(opts.memory_policy, target),
                    host_offload=host_offload(opts.host_offload, target))


def precompile(step_fn, *example_args, target=None, models=None, optimizers=None, cache_dir=None,
               log=print) -> dict:
    """``nova.precompile``: every kernel of ``step_fn(*example_args)`` (one whole training step)
    compiled for ``target`` (a preset name or ``GPUModel``; None: ``NOVA_TARGET``, else h200) into
    the kernel cache (``cache_dir``, default ``$NOVA_CACHE_DIR`` or ``~/.cache/nova``), on a host
    without a GPU.  The arguments, the modules and the optimizers may live on the meta device.
    Returns the counts by status: ``{"compiled", "cached", "failed"}``."""
    from nova import options
    from nova.compiler.precompile import precompile_planned
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    if not callable(step_fn):
        raise TypeError(f"nova.precompile takes a function (the training step), got {type(step_fn).__name__} "
                        f"{step_fn!r:.40}")
    if target is None:
        target = options.current().target or "h200"
    target = get_target(target) if isinstance(target, str) else target
    name = getattr(step_fn, "__name__", "step").replace("<", "").replace(">", "")
    planned = plan_step(UserStep(step_fn, tuple(example_args), models, optimizers, name), target)
    return precompile_planned(planned, target, KernelCache(cache_dir), log=log)


def precompile_spec(spec: str, target, cache_dir=None, log=print, **values) -> dict:
    """``nova precompile train --step SPEC``: load the factory, call it on meta, precompile."""
    step = make_user_step(load_factory(spec), spec, **values)
    return precompile(step.fn, *step.args, target=target, models=step.models, optimizers=step.optimizers,
                      cache_dir=cache_dir, log=log)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
