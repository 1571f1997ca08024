"""``torch.distributed`` collectives in a captured step.

Two halves:

1. While tracing, the in-place collectives a step calls (``dist.all_reduce(t)``,
   ``dist.all_gather_into_tensor(out, t)``, ``dist.reduce_scatter_tensor(out, t)``) run as their
   functional forms (``torch.distributed._functional_collectives``) followed by a ``copy_`` into
   the tensor they update, the remapping torch.compile applies too: the c10d in-place ops carry an
   ordered side effect that ``make_fx`` cannot trace, the functional ones trace as
   ``_c10d_functional.<op>`` + ``_c10d_functional.wait_tensor``.
2. The lowerings of those ops to the IR's collectives (``nova/ir/ops.py``): ``wait_tensor`` is
   the identity (value semantics: a result is ready when it is read), the group is kept by its
   c10d name and its size.

Supported: SUM and AVG reductions, synchronous calls (``async_op=False``), gathers and scatters
along axis 0.  Anything else: one ``NovaUnsupportedError`` line.
"""
from __future__ import annotations

import contextlib

import torch

from nova.frontend.errors import NovaUnsupportedError
from nova.frontend.lower import LOWERINGS

_REDUCE_NAMES = {"sum": "sum", "avg": "avg"}


def _functional_ops():
    ops = getattr(torch.ops, "_c10d_functional", None)
    return ops if ops is not None and hasattr(ops, "all_reduce") else None


def _group_size(group_name: str) -> int:
    from torch.distributed.distributed_c10d import _resolve_process_group
    return _resolve_process_group(group_name).size()


def _reduce_op(ctx, name) -> str:
    key = str(name).lower()
    if key not in _REDUCE_NAMES:
        raise NovaUnsupportedError(f"collective reduction {name!r} is not supported (sum and avg are){ctx.where()}")
    return _REDUCE_NAMES[key]


def _all_reduce(ctx, x, reduce_op, group_name):
    return ctx.op("all_reduce", x, reduce_op=_reduce_op(ctx, reduce_op), group=str(group_name),
                  world_size=_group_size(group_name))


def _all_reduce_coalesced(ctx, xs, reduce_op, group_name):
    return tuple(_all_reduce(ctx, x, reduce_op, group_name) for x in xs)


def _all_gather(ctx, x, group_size, group_name):
    return ctx.op("all_gather", x, group=str(group_name), world_size=int(group_size))


def _reduce_scatter(ctx, x, reduce_op, group_size, group_name):
    return ctx.op("reduce_scatter", x, reduce_op=_reduce_op(ctx, reduce_op), group=str(group_name),
                  world_size=int(group_size))


def _wait(ctx, x):
    return x


def _register() -> None:
    ops = _functional_ops()
    if ops is None:
        return
    table = {"all_reduce": _all_reduce, "all_reduce_coalesced": _all_reduce_coalesced,
             "all_gather_into_tensor": _all_gather, "reduce_scatter_tensor": _reduce_scatter, "wait_tensor": _wait}
    for name, fn in table.items():
        packet = getattr(ops, name, None)
        if packet is not None:
            LOWERINGS[packet.default] = fn


_register()


# ====================================================================== tracing the in-place calls
def _op_name(op) -> str:
    import torch.distributed as dist
    names = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg"}
    for known, name in names.items():
        if op == known:
            return name
    raise NovaUnsupportedError(f"torch.distributed reduction {op} is not supported in a compiled step (SUM and AVG are)")


def _group(group):
    import torch.distributed as dist
    return group if group is not None else dist.group.WORLD


def _sync_only(async_op: bool, what: str) -> None:
    if async_op:
        raise NovaUnsupportedError(f"dist.{what}(..., async_op=True) is not supported in a compiled step; the "
                                   f"compiled program orders its collectives itself (call it with async_op=False)")


def _traced_all_reduce(tensor, op=None, group=None, async_op=False):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    _sync_only(async_op, "all_reduce")
    tensor.copy_(funcol.all_reduce(tensor, _op_name(dist.ReduceOp.SUM if op is None else op), _group(group)))


def _traced_all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    import torch.distributed._functional_collectives as funcol
    _sync_only(async_op, "all_gather_into_tensor")
    gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    output_tensor.copy_(gather(input_tensor, 0, _group(group)))


def _traced_reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    _sync_only(async_op, "reduce_scatter_tensor")
    scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
    output.copy_(scatter(input, _op_name(dist.ReduceOp.SUM if op is None else op), 0, _group(group)))


_TRACED = {"all_reduce": _traced_all_reduce, "all_gather_into_tensor": _traced_all_gather_into_tensor,
           "reduce_scatter_tensor": _traced_reduce_scatter_tensor}


@contextlib.contextmanager
def functional_collectives():
    """While tracing: ``torch.distributed``'s in-place collectives as functional ones + ``copy_``
    (a no-op context when torch.distributed is not initialized)."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        yield
        return
    from torch.distributed import distributed_c10d
    saved = []
    try:
        for module in (dist, distributed_c10d):
            for name, fn in _TRACED.items():
                if hasattr(module, name):
                    saved.append((module, name, getattr(module, name)))
                    setattr(module, name, fn)
        yield
    finally:
        for module, name, fn in reversed(saved):
            setattr(module, name, fn)
