"""The torch.compile backend's memory, predicted on the meta device from its plans
(``nova/integrations/dynamo_memory.py``): for a small GPT, each saved activation is held once (the
forward's output buffers, read in place by the backward: no copy in the forward's arena, none
returned as a clone, none staged by the backward), and the step's peak is the parameters, the
optimizer state, the gradients, the saved activations and the largest graph's temporaries."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nova.hwmodel import get_target  # noqa: E402
from nova.integrations.dynamo_memory import step_memory  # noqa: E402
from nova.integrations.dynamo_precompile import plan_dynamo  # noqa: E402
from nova.models.gpt import GPT, GPTConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIG = GPTConfig(vocab_size=2048, n_embd=128, n_layer=2, n_head=2, block_size=128)
BATCH = 8


@pytest.fixture(scope="module", autouse=True)
def unsplit_attention():
    """At this size the attention's dK/dV would split over its query tiles, and its FP32 partials (counted
    among a launch's temporaries when the step's memory is priced: tests/test_outside_arena.py) would
    outweigh the temporaries this accounting of the saved activations compares them with."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NOVA_ATTENTION_SPLIT_KV", "0")
        yield


@pytest.fixture(scope="module")
def small_gpt():
    """The small GPT's plans with every saved tensor read in place (``STAGED_BYTES`` 0: at this size most
    would be copied into static slots, which the handoff does only below 1 MiB)."""
    from nova.integrations import dynamo_handoff
    with torch.device("meta"):
        model = GPT(CONFIG, seed=0)
        idx = torch.zeros(BATCH, CONFIG.block_size, dtype=torch.long)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dynamo_handoff, "STAGED_BYTES", 0)
        plans = plan_dynamo(model, (idx, idx), get_target("h200"), training=True)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return plans, params


def test_each_saved_activation_is_held_once(small_gpt):
    plans, params = small_gpt
    assert [g.reason for g in plans.graphs] == ["", ""]
    forward, backward = (g.planned for g in plans.graphs)
    start, stop = forward.memory.output_region
    saved = stop - start                                   # the forward's outputs: the saved activations
    optimizer = 2 * params                                 # AdamW's two moments
    memory = step_memory(plans, optimizer_state_bytes=optimizer)
    fw, bw = memory.graphs
    # no copy of them: the forward owns no arena and returns no clone beyond its data inputs' views,
    # the backward copies nothing but its tangent and reads the rest in place
    assert fw.persistent < 2 ** 20 and bw.persistent < 2 ** 20
    assert bw.data <= 1024 and bw.in_place >= saved - fw.data
    # the gradients take no bytes of their own: each lies in a saved tensor AOTAutograd donated, dead by
    # the time the gradient is made (memory._place_in_donors)
    grads = sum(p.nbytes for v, p in backward.memory.values.items() if v in set(backward.graph.output_values())
                and p.kind == "external" and p.offset is not None)
    assert grads == pytest.approx(params, rel=0.01) and bw.outputs < 0.01 * params
    temporaries = max(g.step_arena for g in memory.graphs) + max(g.launch for g in memory.graphs)   # the shared arena
    # the forward lays every saved tensor out as the trace does (attention's output stored as the
    # trace's kernel stores it, its head merge a view of it): the backward copies none at the hand-over
    assert bw.copies == 0
    # the data inputs twice: the caller's batch, and the copy saved of the forward's static slot
    held_once = params + optimizer + 2 * fw.data + saved + bw.outputs + temporaries + fw.persistent + bw.persistent
    assert memory.peak_bytes <= held_once
    assert memory.peak_at == "backward graph 1"
    # what the programs that owned their arenas held: the forward's arena (the saved activations
    # among its outputs), their clones, and the backward's staged copies: three times
    assert memory.peak_bytes < params + optimizer + grads + 1.5 * saved
    assert saved > 4 * temporaries


def test_the_backward_overwrites_the_donated_log_probabilities(small_gpt):
    """The backward's cross_entropy_backward writes dlogits into the saved log-probabilities (donated
    by AOTAutograd): no [N, V] buffer in the backward's arena, whose values' peak is then below one
    (the launch workspaces placed there, a GEMM's operand preps, live during their launch only)."""
    plans, _ = small_gpt
    backward = plans.graphs[1].planned
    rows, vocab = BATCH * CONFIG.block_size, CONFIG.vocab_size
    donated = [v for v, p in backward.memory.values.items() if p.kind == "external" and p.donated]
    assert any(v.producer.op == "cross_entropy_backward" and v.type.shape == (rows, vocab) for v in donated)
    start = backward.memory.output_region[0]
    values_below = max(p.offset + p.nbytes for p in backward.memory.values.values()
                       if p.kind == "arena" and p.offset < start)
    assert values_below < rows * vocab * 4         # 0.56x of one here: dlogits has no buffer of its own
    assert all(w.offset + w.nbytes <= start for w in backward.memory.workspaces)
    forward = plans.graphs[0].planned
    logp = next(n for n in forward.graph.nodes if n.op == "log_softmax").outputs[0]
    assert forward.memory[logp].reuses is not None                          # written over the logits
    assert forward.memory.output_region[0] < rows * vocab * 4 / 2             # the logits are no temporary


def test_the_programs_that_owned_their_arenas_held_them_three_times(small_gpt):
    """The same plans, programs owning their arenas and copying outputs out and data inputs in (the
    executor's other mode): each saved activation in the forward's arena, its clone and the
    backward's static slot."""
    plans, params = small_gpt
    forward = plans.graphs[0].planned
    saved = forward.memory.output_region[1] - forward.memory.output_region[0]
    per_call, owned = step_memory(plans, per_call=True), step_memory(plans, per_call=False)
    assert owned.peak_bytes - per_call.peak_bytes > saved
    assert owned.graphs[0].persistent >= saved and owned.graphs[0].outputs >= saved


def test_the_gradients_placed_in_donated_inputs_pass_the_byte_level_check(small_gpt):
    """The backward's plan, its gradients at bytes of dead donated saved tensors, passes
    ``validate_memory_plan``; moved onto a donated input the backward still reads, one fails it."""
    import dataclasses

    from nova.passes.memory import MemoryPlan, validate_memory_plan
    plans, _ = small_gpt
    backward = plans.graphs[1].planned
    memory = backward.memory
    validate_memory_plan(backward.graph, backward.groups, memory)
    placed = [v for v, p in memory.values.items() if p.kind == "external" and p.offset is not None]
    assert placed
    v = min(placed, key=lambda v: memory.values[v].live[0])      # the first one made
    inputs = [s.value for s in backward.graph.inputs]
    users = backward.graph.users()
    order = [n for g in backward.groups for n in g.nodes]
    late = [i for i in sorted(memory.handoff.donated_inputs) if inputs[i].type.nbytes >= memory.values[v].nbytes
            and any(order.index(u) >= memory.values[v].live[0] for u in users.get(inputs[i], ()))]
    assert late, "no donated input is read after the first placed value is made"
    values = dict(memory.values)
    values[v] = dataclasses.replace(values[v], input_index=late[0], offset=0)
    broken = MemoryPlan(**{**{f.name: getattr(memory, f.name) for f in dataclasses.fields(MemoryPlan)},
                           "values": values})
    with pytest.raises(AssertionError, match="still read|overlap"):
        validate_memory_plan(backward.graph, backward.groups, broken)


def test_gpt42m_small_batch_plans_pass_the_byte_level_check():
    """The plans the GPU memory tests run (GPT-42M, batch 4 x 256): 150 values of the backward at bytes
    of dead donated saved tensors, among them a bias gradient written in the same input as the
    gradient its column sum reads (other bytes): every graph passes ``validate_memory_plan``."""
    from nova.passes.memory import validate_memory_plan
    with torch.device("meta"):
        model = GPT("gpt42m", seed=0)
        idx = torch.zeros(4, 256, dtype=torch.long)
    plans = plan_dynamo(model, (idx, idx), get_target("h200"), training=True)
    assert [g.reason for g in plans.graphs] == ["", ""]
    for g in plans.graphs:
        validate_memory_plan(g.planned.graph, g.planned.groups, g.planned.memory)
    backward = plans.graphs[1].planned.memory
    assert sum(p.kind == "external" and p.offset is not None for p in backward.values.values()) > 100
