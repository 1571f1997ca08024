"""The collectives of a program, bound to their process group when it runs.

A collective node names its group by the c10d group name (``attrs["group"]``) and states its
``world_size``; the group itself exists only in the processes that run the program, so it is
looked up here, at run time (``torch.distributed``'s registry of groups by name), and checked
against the size the graph was captured for.

Both engines run the same functions:

- the reference interpreter through ``implementations()`` (op name -> callable with the op's
  reference signature), on CPU tensors: gloo;
- the executor through ``collective_launch`` (one kernel per node, writing into the planned
  output buffer): gloo on CPU, NCCL on CUDA.

``avg`` is computed as DDP's reducer computes it: every rank divides by the world size, then the
group sums (``x / n`` summed over ranks).  Besides matching eager DDP bit for bit, this needs no
AVG reduction from the backend (gloo has none).

On CUDA, ``torch.distributed``'s NCCL backend runs the collective on its own stream, ordered
after the work already queued on the current stream and before the work queued after it
(``async_op=False``: the current stream waits for it).  NCCL kernels can be captured in a CUDA
graph (NCCL >= 2.9.6; ProcessGroupNCCL detects the capture and enqueues on the capturing stream
order), so the executor keeps a program with collectives inside its CUDA graph; every rank must
then replay its graph the same number of times (each replay is one collective call per bucket).
Measured only on a multi-GPU machine (``bench/runs/ddp-2gpu.sh``).
"""
from __future__ import annotations

import torch


class CollectiveError(RuntimeError):
    """A collective could not run: no process group, or not the one the program was captured for."""


def process_group(name: str, world_size: int):
    """The c10d process group named ``name``, checked against the ``world_size`` it was captured with."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise CollectiveError(f"the step runs a collective over process group {name!r} but torch.distributed is "
                              f"not initialized in this process (call dist.init_process_group first)")
    from torch.distributed.distributed_c10d import _resolve_process_group
    try:
        group = _resolve_process_group(name)
    except Exception:
        raise CollectiveError(f"no process group named {name!r} in this process (the step was captured with "
                              f"another group; was it destroyed?)") from None
    if group.size() != world_size:
        raise CollectiveError(f"process group {name!r} has {group.size()} ranks, the step was captured for "
                              f"{world_size}")
    return group


def _reduce_into(out: torch.Tensor, reduce_op: str, world_size: int, group) -> None:
    """``out`` <- its sum (``avg``: mean, as x / n summed) over the group, in place."""
    import torch.distributed as dist
    if reduce_op == "avg" and world_size > 1:
        out.div_(world_size)
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)


def all_reduce_into(out, x, reduce_op: str, group_name: str, world_size: int) -> None:
    group = process_group(group_name, world_size)
    if out.data_ptr() != x.data_ptr():
        out.copy_(x)
    _reduce_into(out, reduce_op, world_size, group)


def all_gather_into(out, x, group_name: str, world_size: int) -> None:
    import torch.distributed as dist
    group = process_group(group_name, world_size)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)


def reduce_scatter_into(out, x, reduce_op: str, group_name: str, world_size: int) -> None:
    """This rank's chunk of axis 0 of the reduction of ``x``.  Through an all-reduce of a copy:
    gloo has no reduce-scatter of one tensor, and the result is the same."""
    import torch.distributed as dist
    group = process_group(group_name, world_size)
    if x.device.type == "cuda":
        if reduce_op == "avg":
            x = x / world_size
        dist.reduce_scatter_tensor(out, x.contiguous(), op=dist.ReduceOp.SUM, group=group)
        return
    full = x.clone()
    _reduce_into(full, reduce_op, world_size, group)
    rank = dist.get_rank(group)
    chunk = x.shape[0] // world_size
    out.copy_(full[rank * chunk:(rank + 1) * chunk])


def implementations() -> dict:
    """Op name -> a callable with the op's reference signature that runs the real collective (the
    reference interpreter's ``implementations``)."""
    def all_reduce(torch_, x, reduce_op, group, world_size):
        out = x.clone()
        all_reduce_into(out, out, reduce_op, group, world_size)
        return out

    def all_gather(torch_, x, group, world_size):
        out = x.new_empty((x.shape[0] * world_size,) + tuple(x.shape[1:]))
        all_gather_into(out, x, group, world_size)
        return out

    def reduce_scatter(torch_, x, reduce_op, group, world_size):
        out = x.new_empty((x.shape[0] // world_size,) + tuple(x.shape[1:]))
        reduce_scatter_into(out, x, reduce_op, group, world_size)
        return out
    return {"all_reduce": all_reduce, "all_gather": all_gather, "reduce_scatter": reduce_scatter}


def has_collectives(graph) -> bool:
    from nova.ir.ops import kind
    return any(kind(n.op) == "collective" for n in graph.nodes)


def collective_launch(node, ins, outs, device_kind: str):
    """The executor's launch of one collective node, the collective written into its output
    buffer: ``(run, description)``."""
    (x,), (out,) = ins, outs
    attrs = dict(node.attrs)
    if node.op == "all_reduce":
        run = lambda: all_reduce_into(out, x, attrs["reduce_op"], attrs["group"], attrs["world_size"])  # noqa: E731
    elif node.op == "all_gather":
        run = lambda: all_gather_into(out, x, attrs["group"], attrs["world_size"])  # noqa: E731
    elif node.op == "reduce_scatter":
        run = lambda: reduce_scatter_into(out, x, attrs["reduce_op"], attrs["group"], attrs["world_size"])  # noqa: E731
    else:
        raise CollectiveError(f"no kernel for collective {node.op}")
    backend = "nccl" if device_kind == "cuda" else "gloo"
    return run, f"torch.distributed {node.op} ({attrs.get('reduce_op', '')}, {backend}, group {attrs['group']!r})"


def bucketed(graph, target, bucket_bytes: int | None = None):
    """``graph`` with its all-reduces bucketed (``nova.passes.buckets``): ``bucket_bytes`` as given,
    else the closed-form size for ``target``'s interconnect and the group's size
    (``nova.hwmodel.interconnect.gradient_bucket_size``; a target without interconnect figures:
    one bucket per group).  Returns (graph, buckets, the bucket size used)."""
    from nova.passes.buckets import bucket_all_reduces
    if not any(n.op == "all_reduce" for n in graph.nodes):
        return graph, [], bucket_bytes
    if bucket_bytes is None:
        from nova.hwmodel import get_target
        from nova.hwmodel.interconnect import LINK_FIGURES, gradient_bucket_size
        model = get_target(target)
        world = max(n.attrs["world_size"] for n in graph.nodes if n.op == "all_reduce")
        if all(model.has(f) for f in LINK_FIGURES):
            size = gradient_bucket_size(model, world)
            bucket_bytes = size.bytes if size is not None else None
    new, buckets = bucket_all_reduces(graph, bucket_bytes)
    return new, buckets, bucket_bytes
