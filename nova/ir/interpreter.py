"""The reference interpreter: run a graph on CPU (or any) torch tensors, op by op, with each op's
reference semantics from ``nova.ir.ops``.  ``nova.compile`` uses it in reference mode (no GPU) and
every pass is tested against it."""
from __future__ import annotations

from nova.ir.ops import opdef
from nova.ir.types import FROM_TORCH_NAMES, IRError


def run(graph, inputs, *, check_types: bool = True, implementations: dict | None = None) -> list:
    """Evaluate ``graph`` on ``inputs`` (one tensor per graph input); returns the outputs' tensors.
    Values are freed after their last use, so the peak is close to the graph's live set.
    ``implementations`` maps an op name to a callable with its reference's signature that runs
    instead of the reference (the collectives, bound to their process group at run time)."""
    import torch

    if len(inputs) != len(graph.inputs):
        raise IRError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    env = {}
    for spec, tensor in zip(graph.inputs, inputs):
        if check_types:
            _check(spec.value, tensor, f"input {spec.name!r}")
        env[spec.value] = tensor
    last_use = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[v] = index
    keep = set(graph.output_values())
    for index, node in enumerate(graph.nodes):
        args = [env[v] for v in node.inputs]
        try:
            fn = (implementations or {}).get(node.op) or opdef(node.op).reference
            result = fn(torch, *args, **node.attrs)
        except IRError:
            raise
        except Exception as e:   # one line naming the node, not torch's traceback
            raise IRError(f"interpreting node {index} {node.op}{' (' + node.origin + ')' if node.origin else ''} "
                          f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        results = result if isinstance(result, (tuple, list)) else (result,)
        if len(results) != len(node.outputs):
            raise IRError(f"node {index} {node.op} returned {len(results)} results, expected {len(node.outputs)}")
        for v, t in zip(node.outputs, results):
            if check_types:
                _check(v, t, f"result of node {index} {node.op}")
            env[v] = t
        for v in node.inputs:
            if last_use.get(v) == index and v not in keep:
                env.pop(v, None)
    return [env[o.value] for o in graph.outputs]


def _check(value, tensor, what: str) -> None:
    dtype = FROM_TORCH_NAMES.get(str(tensor.dtype).removeprefix("torch."))
    if tuple(tensor.shape) != value.type.shape or dtype != value.type.dtype:
        raise IRError(f"{what}: expected {value.type}, got {dtype}{list(tensor.shape)}")
