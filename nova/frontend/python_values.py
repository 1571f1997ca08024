"""Python values a step may read, snapshotted so that none is frozen silently.

A traced step bakes every Python number it reads into the graph as a constant: a temperature held
as ``self.temperature``, a global ``DROPOUT``, a closure's ``scale``, a config dict's entry.  Eager
reads them again on every call, so a capture must be reused only while they hold the values it saw.
``snapshot`` collects them, as ``(path, value)`` pairs, from the places a tracing compiler looks
(TorchDynamo guards the same sources):

- every module's own attributes (``vars(module)``) in each model found, and one level into plain
  objects they hold (``self.config.temperature``); modules and tensors are guarded elsewhere;
- the globals named by the step's code, by the helper functions it calls, and by the methods of the
  user's module classes (``forward`` and whatever it calls on ``self``), in the module that
  defines each of them;
- the closure cells of the step and of those helpers, and the attributes those functions' code reads
  of a module of the user's they name (a config module: ``cfg.SCALE``);
- entries of dicts (and items of lists/tuples) found in those places, dicts and plain objects up to
  ``_MAX_DEPTH`` levels deep; the plain class attributes of the user's classes (a config class read
  as ``Config.alpha``, a module class's ``dropout_p = 0.1``).

Only plain data is kept (None, bool, int, float, complex, str, NumPy scalars, torch dtypes and
devices, and tuples/lists/sets/dicts of them), and functions held as data by their identity
(``self.act = F.relu``, a module's own monkeypatched ``forward``, a partial): what a traced program
can have used as a constant or inlined.  A change recaptures with the path named
(``GuardKey.describe_change``); ``nova.compile`` warns once about a path that changes on every call.
"""
from __future__ import annotations

import functools
import types

import torch

from nova.frontend.discover import _code_names, modules_of

_SCALARS = (type(None), bool, int, float, complex, str)
_TORCH_CONSTANTS = (torch.dtype, torch.device, torch.layout, torch.memory_format)   # a module's compute dtype
# a function held as data (``self.act = F.relu``, an instance's own ``forward``, a partial): the program
# inlined the one it saw, so the guard keeps which one (by identity)
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
_MAX_ITEMS = 256                      # a container larger than this is not snapshotted (not a setting)
_MAX_DEPTH = 3                        # dicts (and plain objects) nested deeper than this are not (not a setting)
# nn.Module's own bookkeeping (training flag, parameter/buffer/submodule dicts, hook dicts: guarded by the
# model signature or refused at capture) and two class-level constants: never a value the step reads
_SKIPPED_ATTRS = frozenset({"dump_patches", "call_super_init"}) | frozenset(vars(torch.nn.Module()))


def _plain(value, depth: int = 0):
    """``value`` as hashable plain data, or ``_NOT_PLAIN`` (a NumPy scalar as its Python value; a
    function by its identity: what a traced program inlined)."""
    if isinstance(value, _SCALARS + _TORCH_CONSTANTS):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        item = value.item()
        return (type(value).__name__, item) if isinstance(item, _SCALARS) else _NOT_PLAIN
    if isinstance(value, _FUNCTIONS):
        return ("function", value)
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple, set, frozenset)) and len(value) <= _MAX_ITEMS:
        items = tuple(_plain(x, depth + 1) for x in value)
        if any(x is _NOT_PLAIN for x in items):
            return _NOT_PLAIN
        return ("set", frozenset(items)) if isinstance(value, (set, frozenset)) else (type(value).__name__, items)
    return _NOT_PLAIN


_NOT_PLAIN = object()


def plain_value(value):
    """``value`` as hashable plain data for a guard (a tuple of betas, a float rate); a value that is
    not plain data (a tensor learning rate, a program input already) by its type alone."""
    plain = _plain(value)
    return ("not plain", type(value).__name__) if plain is _NOT_PLAIN else plain


def _object_values(prefix: str, obj, out: list, seen: set, depth: int) -> None:
    """Plain attributes of ``obj`` (and, one level down, of plain objects and dicts it holds)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    attrs = vars(obj) if hasattr(obj, "__dict__") else {}
    for name in sorted(attrs.keys() - _SKIPPED_ATTRS):       # a module's own bookkeeping left out in one set operation
        value = attrs[name]
        plain = _plain(value)
        if plain is not _NOT_PLAIN:
            out.append((f"{prefix}.{name}", plain))
        elif depth < _MAX_DEPTH:
            _container_values(f"{prefix}.{name}", value, out, seen, depth + 1)


def _container_values(path: str, value, out: list, seen: set, depth: int) -> None:
    """A dict's plain entries, or a plain object's attributes (never a module, tensor or function)."""
    if isinstance(value, dict):
        if len(value) <= _MAX_ITEMS and id(value) not in seen:
            seen.add(id(value))
            for k, v in value.items():
                if not isinstance(k, _SCALARS):
                    continue
                plain = _plain(v)
                if plain is not _NOT_PLAIN:
                    out.append((f"{path}[{k!r}]", plain))
                elif depth < _MAX_DEPTH:
                    _container_values(f"{path}[{k!r}]", v, out, seen, depth + 1)
        return
    if isinstance(value, type) and _user_class(value) and not issubclass(value, torch.nn.Module):
        _class_values(path, value, out, seen)                   # a config class read as Config.alpha
        return
    if isinstance(value, (torch.nn.Module, torch.Tensor, type, types.ModuleType)) or callable(value):
        return
    if hasattr(value, "__dict__") and _user_class(type(value)):   # a config object (not a scheduler, not torch's)
        _object_values(path, value, out, seen, depth)


def _class_values(path: str, cls: type, out: list, seen: set) -> None:
    """A user class's own plain class attributes (``class Config: alpha = 1.0``)."""
    if ("cls values", id(cls)) in seen:
        return
    seen.add(("cls values", id(cls)))
    for name, value in vars(cls).items():
        if not name.startswith("__") and (plain := _plain(value)) is not _NOT_PLAIN:
            out.append((f"{path}.{name}", plain))


def function_places(fn, where: str = "step"):
    """``(path, value)`` of each global ``fn``'s code names and each of its closure cells (an empty
    cell, a variable assigned later, left out): where a function reads Python state.  ``fn`` is a
    function or a bound method; nothing for an object without code."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    glob = getattr(fn, "__globals__", {})
    module = glob.get("__name__", "?")
    for name in dict.fromkeys(_code_names(code)):
        if name in glob:
            yield f"global {module}.{name}", glob[name]
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        yield f"{getattr(fn, '__qualname__', where)}: closure {name}", value


def _function_values(where: str, fn, out: list, seen: set) -> None:
    """The globals a function's code names and its closure cells, as plain data."""
    fn = getattr(fn, "__func__", fn)
    if ("fn", id(fn)) in seen:
        return
    seen.add(("fn", id(fn)))
    names = None
    for path, value in function_places(fn, where):
        plain = _plain(value)
        if plain is not _NOT_PLAIN:
            out.append((path, plain))
        elif isinstance(value, types.ModuleType) and _user_module(value):
            if names is None:                                   # attribute names the code reads
                names = set(_code_names(fn.__code__))
            for name in sorted(names & vars(value).keys()):     # a config module: cfg.SCALE
                if (plain := _plain(vars(value)[name])) is not _NOT_PLAIN:
                    out.append((f"{path}.{name}", plain))
        else:
            _container_values(path, value, out, seen, 1)


def _user_module(module: types.ModuleType) -> bool:
    """A module of the user's (a config module read as ``cfg.SCALE``), not torch's, NumPy's or Nova's."""
    return (module.__name__ or "").partition(".")[0] not in ("torch", "nova", "numpy", "builtins", "math", "functools")


@functools.lru_cache(maxsize=None)
def _user_class(cls) -> bool:
    """A class whose code is the user's or a library's model code (not torch's, not Nova's)."""
    return not (cls.__module__ or "").startswith(("torch.", "torch", "nova.", "builtins")) and cls is not object


def snapshot(fn, found, helpers=(), walks=None) -> tuple:
    """``((path, value), ...)`` of every plain Python value the step may read (module docstring).
    ``walks``: ``id(model) -> modules_of(model)`` where the caller has walked the models already."""
    out: list = []
    seen: set = set()
    for name, model in found.models:
        for path, module in walks[id(model)] if walks is not None else modules_of(model):
            _object_values(f"{name}.{path}" if path else name, module, out, seen, 0)
            for cls in type(module).__mro__:
                if ("cls", id(cls)) in seen or not _user_class(cls):
                    continue
                seen.add(("cls", id(cls)))
                _class_values(f"class {cls.__qualname__}", cls, out, seen)
                for attr in vars(cls).values():
                    target = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
                    if isinstance(target, types.FunctionType):
                        _function_values(cls.__qualname__, target, out, seen)
    for f in (fn, *helpers):
        if isinstance(f, torch.nn.Module):
            continue
        owner = getattr(f, "__self__", None)
        if owner is not None and not isinstance(owner, torch.nn.Module) and hasattr(owner, "__dict__"):
            _object_values("self", owner, out, seen, 0)
        _function_values(getattr(f, "__qualname__", "step"), f, out, seen)
    return tuple(out)


def describe_change(mine: tuple, theirs: tuple) -> str:
    """One line naming the first value that differs between two snapshots."""
    old = dict(theirs)
    new = dict(mine)
    for path, value in mine:
        if path in old and old[path] != value:
            return f"Python value {path} changed: {_show(old[path])} -> {_show(value)}"
    for path in new.keys() - old.keys():
        return f"Python value {path} appeared"
    for path in old.keys() - new.keys():
        return f"Python value {path} disappeared"
    return "Python values changed"


def changed_paths(mine: tuple, theirs: tuple) -> list[str]:
    old = dict(theirs)
    return [path for path, value in mine if path not in old or old[path] != value]


def _show(value) -> str:
    text = repr(value[1] if isinstance(value, tuple) and len(value) == 2 and value[0] in ("list", "tuple") else value)
    return text if len(text) <= 40 else text[:37] + "..."

