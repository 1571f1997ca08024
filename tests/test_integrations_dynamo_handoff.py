"""What the torch.compile backend hands its programs (``nova/integrations/dynamo_handoff.py``): a
strided saved tensor as IR views of its storage, the backward's input plan for GPT-tiny (one input
per storage, duplicates merged, donated buffers, tangents copied), the per-call checks that copy a
group whose real layout is not the traced one, and the results copied to keep the trace's aliasing."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nova.integrations import dynamo  # noqa: E402
from nova.integrations.dynamo_handoff import (InputPlan, apply_chain, is_contiguous, output_copies,  # noqa: E402
                                              view_chain)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GEOMETRIES = [
    ((2, 4, 16, 8), (1536, 8, 96, 1), 0),       # q of one [B*T, 3C] projection, heads split and transposed
    ((2, 4, 16, 8), (1536, 8, 96, 1), 32),      # k
    ((2, 4, 16, 8), (1536, 8, 96, 1), 64),      # v
    ((2, 4, 16, 8), (512, 8, 32, 1), 0),        # attention's output in [B, H, T, D] over [B, T, H, D]
    ((512, 32), (1, 512), 0),                   # a transposed weight
    ((32, 32), (32, 1), 0),                     # contiguous
    ((3, 1, 5), (10, 7, 2), 3),                 # every other element, a size-1 axis of any stride
    ((), (), 7),                                # a scalar inside a storage
    ((4, 5), (20, 1), 10),                      # a column block
    ((3, 4), (1, 3), 5),                        # transposed at an offset
    ((2, 3, 4), (12, 1, 3), 0),                 # inner axes permuted
]


@pytest.mark.parametrize("shape,strides,offset", GEOMETRIES)
def test_a_strided_tensor_is_views_of_its_storage(shape, strides, offset):
    storage = torch.arange(20000, dtype=torch.float64)
    chain = view_chain(shape, strides, offset)
    view = apply_chain(storage, chain.ops)
    expected = torch.as_strided(storage, shape, strides, offset)
    assert torch.equal(view, expected) and view.data_ptr() == expected.data_ptr()
    assert all(n == 1 or a == b for n, a, b in zip(shape, view.stride(), expected.stride()))
    assert chain.start <= offset and chain.start + chain.length <= 20000
    assert {op[0] for op in chain.ops} <= {"slice", "view", "permute"}


def test_tensors_without_a_view_chain():
    assert view_chain((4, 4), (0, 1), 0) is None            # broadcast
    assert view_chain((4, 4), (1, 1), 0) is None            # overlapping
    assert view_chain((3, 4), (6, 4), 0) is None            # strides that do not nest
    assert is_contiguous((2, 1, 3), (3, 99, 1)) and not is_contiguous((2, 3), (1, 2))


@pytest.fixture
def tiny_backward(monkeypatch):
    """GPT-tiny through the backend (executor on the CPU): the backward's FX graph, its
    CompiledGraph and the arguments AOTAutograd passed it (kept alive here).  Every saved storage is
    read in place (``STAGED_BYTES`` 0: GPT-tiny's would all be small enough to be copied)."""
    from nova.integrations import dynamo_handoff
    from nova.models import gpt
    monkeypatch.setattr(dynamo_handoff, "STAGED_BYTES", 0)
    seen = {}
    compile_graph, call = dynamo.compile_graph, dynamo.CompiledGraph.__call__

    def spy(gm, example_inputs, *, part, settings):
        if part == "backward":
            seen["gm"] = gm
        return compile_graph(gm, example_inputs, part=part, settings=settings)

    def recording(self, args):
        if self.name.startswith("backward"):
            seen["args"], seen["graph"] = list(args), self
        return call(self, args)
    monkeypatch.setattr(dynamo, "compile_graph", spy)
    monkeypatch.setattr(dynamo.CompiledGraph, "__call__", recording)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = gpt.GPT(gpt.CONFIGS["tiny"])
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend=dynamo.nova_backend, options={"engine": "executor"})
    compiled(idx, idx).backward()
    torch._dynamo.reset()
    return seen


def test_the_backward_reads_each_storage_once(tiny_backward):
    plan: InputPlan = tiny_backward["graph"].inputs
    gm = tiny_backward["gm"]
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    storages = [s for s in plan.sources if s[0] == "storage"]
    qkv = [s for _, s in storages if {names[m.arg] for m in s.members} >= {"transpose", "transpose_1", "transpose_2"}]
    assert len(qkv) == 1 and qkv[0].length == 32 * 96                   # one input for q, k and v
    logp, detach = names.index("_log_softmax"), names.index("detach_2")
    assert plan.duplicates[logp] == [detach] and ("arg", detach) not in plan.sources
    k = plan.sources.index(("arg", logp))
    assert k in plan.donated and k in plan.in_place                       # the backward may overwrite logp
    tangent = plan.sources.index(("arg", names.index("tangents_1")))
    assert tangent not in plan.in_place                                   # copied into a static slot
    ir_inputs = tiny_backward["graph"].graph.inputs
    assert len(ir_inputs) == len(plan.sources) < len(names)
    program = tiny_backward["graph"].engine.program
    assert program.stats["in_place_inputs"] == len(plan.in_place)
    assert program.stats["static_input_bytes"] <= 512                   # the tangent's slot only


def test_gather_reads_in_place_and_copies_what_is_not_laid_out_as_traced(tiny_backward):
    plan: InputPlan = tiny_backward["graph"].inputs
    args = tiny_backward["args"]
    inputs = plan.gather(args)
    qkv = next(k for k, s in enumerate(plan.sources) if s[0] == "storage" and len(s[1].members) == 3)
    storage = plan.sources[qkv][1]
    assert inputs[qkv].untyped_storage().data_ptr() == args[storage.members[0].arg].untyped_storage().data_ptr()
    for m in storage.members:                          # each saved tensor is its view chain of the input
        view = apply_chain(torch.cat([torch.zeros(storage.start), inputs[qkv]]), m.chain.ops)
        assert torch.equal(view, args[m.arg])
    moved = list(args)
    for m in storage.members:                          # the same values, each in a storage of its own
        moved[m.arg] = args[m.arg].clone()
    copied = plan.gather(moved)[qkv]
    assert copied.untyped_storage().data_ptr() not in {x.untyped_storage().data_ptr() for x in moved}
    for m in storage.members:
        assert torch.equal(torch.as_strided(copied, m.shape, m.strides, m.offset - storage.start), args[m.arg])


def test_a_donated_input_is_copied_when_it_is_not_the_programs_alone(tiny_backward):
    plan: InputPlan = tiny_backward["graph"].inputs
    args = tiny_backward["args"]
    k = next(iter(plan.donated))
    i = plan.sources[k][1]
    assert plan.gather(args)[k] is args[i]
    assert plan.gather(args, donate=False)[k] is not args[i]              # a first run: never overwritten
    shared = list(args) + [args[i].view(-1)]           # one more argument on its storage
    copy = plan.gather(shared)[k]
    assert copy is not args[i] and torch.equal(copy, args[i])


def test_results_copied_where_the_trace_does_not_share_storage():
    base = torch.empty(8)
    plan = InputPlan([("arg", 0)], fake_storages=[dynamo_storage(base)])
    fresh, view = torch.empty(8), base[2:]
    vals = [fresh, view, fresh, torch.empty(3)]
    roots = [("input", 0), ("input", 0), ("buffer", "a"), ("buffer", "a")]
    assert output_copies(vals, roots, plan) == {0, 3}


def dynamo_storage(t):
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


def test_small_saved_storages_are_copied_not_bound(monkeypatch):
    """A saved storage of at most STAGED_BYTES is copied into a static slot (the batch the forward saved
    for the embedding's gradient is a new tensor every step: read in place, it would make every step a
    new binding); a larger one is read in place."""
    from nova.integrations import dynamo_handoff
    gm = torch.fx.Graph()
    big, small, tangent = (gm.placeholder(n) for n in ("saved_big", "saved_small", "tangents_1"))
    big.meta["val"] = torch.empty(dynamo_handoff.STAGED_BYTES // 4 + 1)
    small.meta["val"] = torch.empty(16, dtype=torch.long)
    tangent.meta["val"] = torch.empty(())
    gm.output(big)
    plan = dynamo_handoff.plan_inputs(torch.fx.GraphModule(torch.nn.Module(), gm), "backward", set(), set())
    assert plan.in_place == {0}
