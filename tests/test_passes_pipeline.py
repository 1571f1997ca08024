"""pipeline(graph) -> Planned end to end, and format_plan."""
import pytest
import torch

from nova.ir import Graph, IRError, TensorType, structural_hash, verify
from nova.ir import interpreter
from nova.passes import Planned, format_plan, pipeline, validate_memory_plan
from nova.passes.examples import linear_bias_gelu, random_inputs, transformer_step
from nova.passes.reference import run_planned


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_pipeline_returns_a_consistent_plan_and_leaves_its_input_alone():
    g = transformer_step()
    before = structural_hash(g)
    planned = pipeline(g, target="h200")
    assert isinstance(planned, Planned) and planned.target == "h200"
    assert structural_hash(g) == before and planned.graph is not g
    verify(planned.graph)
    assert planned.order == [n for gr in planned.groups for n in gr.nodes]
    assert set(planned.memory.values) == {i.value for i in planned.graph.inputs} | \
        {v for n in planned.graph.nodes for v in n.outputs}
    assert planned.stats == {"captured": 127, "dce": 127, "cse": 120, "canonicalize": 100,
                             "cross_entropy": 98, "rms_norm": 98, "grouped_query": 98, "recompute": 98,
                             "named_activations": 98, "sink_slices": 98, "casts": 98, "concat_copies": len(planned.graph.nodes)}
    assert len(planned.graph.nodes) == 98                 # log_softmax+nll_loss (+backward): 4 nodes -> 2
    assert [i.name for i in planned.graph.inputs] == [i.name for i in g.inputs]
    assert [(o.name, o.role, o.updates) for o in planned.graph.outputs] == [(o.name, o.role, o.updates) for o in g.outputs]


def test_format_plan_lists_groups_with_reasons_and_the_memory_breakdown():
    planned = pipeline(transformer_step())
    text = format_plan(planned)
    lines = text.splitlines()
    nova = sum(gr.kernel == "nova" for gr in planned.groups)          # GEMMs, rows, pointwise and optimizer groups
    pointwise = sum(gr.kind == "pointwise" and gr.kernel == "nova" for gr in planned.groups)
    updates = sum(gr.nodes[0].op == "adamw" and gr.kernel == "nova" for gr in planned.groups)
    assert nova > 15 + pointwise + updates and sum(gr.kind == "gemm" for gr in planned.groups) == 15
    assert pointwise > 0 and updates > 0
    assert lines[0].startswith("plan gpt_block_step:") and f"{nova} on Nova kernels" in lines[0]
    assert "passes: captured 127 -> dce 127 -> cse 120 -> canonicalize" in text
    for gr in planned.groups:
        assert gr.reason in text
    for section in ("memory: peak", "parameters", "optimizer_state", "gradients", "activations", "donation: 49 of 49"):
        assert section in text
    assert len(format_plan(planned, max_groups=5).splitlines()) < len(lines)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_precision_training_step(dtype):
    planned = pipeline(transformer_step(dtype=dtype))
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    gemms = [gr for gr in planned.groups if gr.kind == "gemm"]
    assert all(gr.kernel == "nova" and gr.problem.dtype == {"bf16": "bf16", "f16": "fp16"}[dtype] for gr in gemms)
    assert sum(gr.epilogue.bias is not None for gr in gemms) == 4       # bias in the output type
    g = linear_bias_gelu(dtype=dtype)          # (the step's layer_norm stats disagree with torch CPU in half)
    planned = pipeline(g)
    assert planned.groups[0].epilogue.describe() == "bias+gelu"
    inputs = random_inputs(g, 5)
    torch.testing.assert_close(run_planned(planned, [t.clone() for t in inputs])[0], interpreter.run(g, inputs)[0])


def test_inference_epilogue_end_to_end():
    planned = pipeline(linear_bias_gelu())
    assert [gr.kind for gr in planned.groups] == ["gemm"]
    assert planned.memory.arena_bytes == 64 * 48 * 4                    # only the result is written


def test_an_ill_formed_graph_is_refused():
    g = Graph()
    x = g.input(TensorType((4, 2), "f32"), "x")
    g.output(g.op("reshape", x, shape=(8,)), "y")
    g.nodes[0].attrs["shape"] = (2, 4)               # the recorded result type no longer follows
    with pytest.raises(IRError, match="result types"):
        pipeline(g)
