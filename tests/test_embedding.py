"""The embedding family on the CPU: the problem statement, the configurator's closed-form decisions, the
generated kernels (lowered to PTX and assembled for sm_80 and sm_90 without spills, where MLIR and ptxas are
installed), the lowering of a captured GPT-tiny step (its gathers and scatter-adds on Nova's embedding
kernels, the position ``iota`` folded into a constant of the step), and the CPU executor's whole step
(loss and every gradient) against eager PyTorch.  The GPU runs are tests/test_embedding_gpu.py."""
from __future__ import annotations

import math

import pytest

from nova.kernels.embedding import EmbeddingProblem, EmbeddingProblemError
from nova.kernels.embedding.derive import SORT_SMEM_LIMIT, configure_embedding
from nova.kernels.embedding.problem import merge_index_axes


# ------------------------------------------------------------------ problem
def test_index_axes_merge_and_strided_views_keep_their_strides():
    assert merge_index_axes((32, 512), (512, 1)) == ((16384,), (1,))
    assert merge_index_axes((7, 1, 9), (1, 5, 7)) == ((7, 9), (1, 7))
    p = EmbeddingProblem("forward", 63, 50, 10, "f32", "i64", (7, 9), (1, 7))
    assert p.index_extent == 1 + 6 * 1 + 8 * 7 and not p.contiguous_indices
    assert EmbeddingProblem("forward", 16384, 32768, 512, index_shape=(32, 512), index_strides=(512, 1)).contiguous_indices


@pytest.mark.parametrize("bad, words", [
    (dict(direction="sideways"), "direction"), (dict(count=0), "count"), (dict(dtype="f64"), "f64"),
    (dict(index_dtype="i16"), "i16"), (dict(stride=3), "stride"), (dict(index_shape=(3,), index_strides=(1,)), "index"),
    (dict(align=3), "alignment")])
def test_bad_problems_are_one_line_errors(bad, words):
    args = dict(direction="forward", count=16, vocab=100, dim=8) | bad
    with pytest.raises(EmbeddingProblemError) as e:
        EmbeddingProblem(**args)
    assert words in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ configurator
@pytest.mark.parametrize("dtype, dim, stride, align", [("f32", 512, 512, 16), ("bf16", 768, 768, 16),
                                                      ("f32", 37, 37, 16), ("f16", 130, 136, 16), ("f32", 64, 64, 8)])
def test_vector_width_is_the_widest_legal_16_byte_access(dtype, dim, stride, align):
    p = EmbeddingProblem("forward", 1000, 5000, dim, dtype, stride=stride, align=align)
    t = configure_embedding(p, "h200").schedule.rows
    e = p.elem_bytes
    assert t.vec * e <= 16 and dim % t.vec == 0 and stride % t.vec == 0 and align % (t.vec * e) == 0
    wider = 2 * t.vec
    assert wider * e > 16 or dim % wider or stride % wider or align % (wider * e)
    slots = math.ceil(dim / t.vec)
    assert t.threads_per_row == min(32, 1 << math.ceil(math.log2(slots)))
    assert t.chunks * t.threads_per_row >= slots > (t.chunks - 1) * t.threads_per_row
    assert t.threads % t.threads_per_row == 0 and t.rows_per_cta == t.threads // t.threads_per_row
    assert t.grid == math.ceil(p.count / t.rows_per_cta)


def test_forward_prediction_is_bytes_over_bandwidth_plus_launch():
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import memory_constants
    gpu = get_target("h200")
    p = EmbeddingProblem("forward", 16384, 32768, 512, "f32", "i64")
    cfg = configure_embedding(p, gpu)
    mc = memory_constants(gpu)
    expected = p.bytes_moved / (gpu.dram_bw * mc["eta_dram"]) * 1e6 + mc["t_launch_us"]
    assert cfg.schedule.roles == ("gather",)
    assert cfg.prediction.time_us == pytest.approx(expected, abs=1e-3)       # terms kept to the nanosecond
    assert [st.step for st in cfg.derivation][:2] == ["vector width", "vectors per row"]


@pytest.mark.parametrize("direction, count, vocab, bound", [
    ("forward", 16384, 32768, "dram"), ("backward", 16384, 32768, "dram"),   # GPT-42M's token embedding
    ("forward", 512, 512, "launch"), ("backward", 512, 512, "launch"),       # its position embedding
])
def test_the_bound_is_the_largest_of_the_predictions_terms(direction, count, vocab, bound):
    """Bytes over bandwidth, launches, or the rest (the segment searches at DRAM latency): a 2 MB
    scatter-add is not called DRAM-bound (the step profiles set it against the copy ceiling at 6%); its
    seven launches outweigh its two search rounds (a binary search's ten rounds outweighed them)."""
    cfg = configure_embedding(EmbeddingProblem(direction, count, vocab, 512, "f32", "i64"), "h200")
    terms = cfg.prediction.terms_us
    assert cfg.prediction.bound == bound
    largest = {"dram": terms["dram_us"], "launch": terms["launch_us"], "latency": terms.get("latency_us", 0.0)}
    assert max(largest, key=largest.get) == bound


@pytest.mark.parametrize("count, vocab", [(16384, 32768), (512, 512), (3000, 70000), (10, 2)])
def test_backward_sort_covers_the_key_bits_within_shared_memory(count, vocab):
    p = EmbeddingProblem("backward", count, vocab, 64, "f32")
    s = configure_embedding(p, "h200").schedule
    sp = s.sort
    assert sp.passes * sp.digit_bits >= p.key_bits > (sp.passes - 1) * sp.digit_bits
    assert (sp.tile // 32) * sp.digits * 4 <= SORT_SMEM_LIMIT
    assert sp.tiles == math.ceil(count / sp.tile) and sp.scan_threads * sp.scan_per_thread >= sp.entries
    passes = [f"{r}{k}" for k in range(sp.passes) for r in ("histogram", "scan", "scatter")]
    assert s.roles == tuple(passes) + ("accumulate",)
    assert s.rows.rows == vocab


def test_backward_beats_the_single_pass_count_table_it_rejects():
    """32768 rows: one 15-bit pass would need 2^15 digit counters per warp (too much shared memory)."""
    cfg = configure_embedding(EmbeddingProblem("backward", 16384, 32768, 512, "f32"), "h200")
    assert cfg.schedule.sort.passes == 2
    step = next(st for st in cfg.derivation if st.step == "digit bits")
    assert "too large" in step.reason


def test_explain_embedding_cli(capsys):
    import json
    from nova.cli.config import main
    assert main(["explain", "embedding", "16384x512", "--vocab", "32768", "--backward", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["op"] == "embedding" and d["schedule"]["roles"][-1] == "accumulate"
    assert set(d["kernels_us"]) == set(d["schedule"]["roles"])
    assert main(["explain", "embedding", "32x512x64", "--vocab", "1000"]) == 0
    assert "gather" in capsys.readouterr().out
    assert main(["explain", "embedding", "16384x512", "--vocab", "0"]) == 2
    assert "vocab" in capsys.readouterr().err


# ------------------------------------------------------------------ generated code
CODEGEN = [EmbeddingProblem("forward", 16384, 32768, 512, "f32", "i64"),
           EmbeddingProblem("forward", 63, 50, 1000, "f16", "i32", (7, 9), (1, 7)),
           EmbeddingProblem("backward", 16384, 32768, 512, "f32", "i64"),
           EmbeddingProblem("backward", 1000, 777, 37, "bf16", "i32", stride=40),
           EmbeddingProblem("backward", 16384, 32768, 512, "f32", "i64", base="f32")]


@pytest.mark.parametrize("problem", CODEGEN, ids=lambda p: p.describe())
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_lowers_and_assembles_without_spills(problem, arch):
    pytest.importorskip("mlir")
    from nova.codegen import ptxas
    from nova.hwmodel import get_target
    from nova.kernels.embedding.compile import compile_kernel
    gpu = get_target("a100" if arch == "sm_80" else "h200")
    s = configure_embedding(problem, gpu).schedule
    for role in s.roles:
        art = compile_kernel(problem, s, role, cubin=ptxas.available())
        assert art.ptx and art.arch == arch
        if ptxas.available():
            assert art.resources["spill_store_bytes"] == 0 and art.resources["spill_load_bytes"] == 0, role
    if problem.direction == "backward":
        from nova.kernels.embedding.emit import build_module
        text = build_module(problem, s, "scatter0")
        assert "match.any.sync.b32" in text and "%lanemask_lt" in text


# ------------------------------------------------------------------ lowering
def _gpt_tiny_planned():
    pytest.importorskip("torch")
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    from nova.passes import pipeline
    fn, args, model, opt, _ = training_step("tiny", 4, 16)
    graph = capture(fn, args, models=[model], optimizers=[opt], name="train_tiny").graph
    return graph, pipeline(graph, "h200")


@pytest.mark.parametrize("count, vocab", [(16384, 32768), (1333, 1000), (100, 77)])
def test_the_sort_scan_writes_the_exclusive_sums_of_its_counts(count, vocab):
    """The backward's one-CTA scan, its generated MLIR executed thread by thread on the CPU
    (``tests/simt_cpu.py``: lockstep warps, shuffles, shared memory checked for races): the [digit, tile]
    counts become their exclusive prefix sums in place, in every pass, whatever the counts."""
    import sys
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, str(Path(__file__).parent))
    from simt_cpu import parse, run_kernel
    from nova.hwmodel import get_target
    from nova.kernels.embedding.abi import kernel_name
    from nova.kernels.embedding.emit import build_scan
    p = EmbeddingProblem("backward", count, vocab, 64, "f32", "i64")
    sp = configure_embedding(p, get_target("h200")).schedule.sort
    rng = np.random.default_rng(count)
    for k in range(sp.passes):
        text = build_scan(p, configure_embedding(p, get_target("h200")).schedule, k)
        params = parse(text, kernel_name("scan"))[0]
        buffers = {name.lstrip("%"): np.zeros(int(ty.split("<")[1].split("x")[0]), np.float32) for name, ty in params}
        counts = rng.integers(0, 64, sp.entries).astype(np.float32)
        buffers["counts"][:sp.entries] = counts
        run_kernel(text, kernel_name("scan"), (1, 1, 1), sp.scan_threads, 4 * 32, buffers)
        assert np.array_equal(buffers["counts"][:sp.entries], np.concatenate([[0], np.cumsum(counts)[:-1]])), k


@pytest.mark.parametrize("problem, repeated", [
    (EmbeddingProblem("backward", 300, 100, 37, "f32", "i64"), False),                 # 32 lanes a row, vec 1
    (EmbeddingProblem("backward", 700, 120, 24, "f32", "i64"), True),                  # 8 lanes a row: 4 rows a warp
    (EmbeddingProblem("backward", 260, 40, 512, "f32", "i64", base="f32"), True),      # 2 rows a trip, a base
    (EmbeddingProblem("backward", 90, 300, 520, "bf16", "i32"), False),                # mostly empty rows
    (EmbeddingProblem("backward", 50, 20, 4100, "f32", "i64"), True),                  # a walk per chunk
])
def test_the_accumulate_adds_each_rows_gradients_in_index_order(problem, repeated):
    """The backward's accumulate, its MLIR run thread by thread on the CPU (``tests/simt_cpu.py``: lockstep
    warps, the ballot of the segment search) on the keys and positions a stable sort gives: every table row
    is its indices' dy rows summed in FP32 in index order (then the base, then rounded to the storage
    type), bit for bit, rows no index names zero (plus the base); NaN-poisoned output; indices drawn at
    random, or mostly one index (a segment of most of the keys)."""
    import sys
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, str(Path(__file__).parent))
    from simt_cpu import parse, round_to, run_kernel
    from nova.hwmodel import get_target
    from nova.kernels.embedding.abi import kernel_name
    from nova.kernels.embedding.emit import build_accumulate
    p = problem
    s = configure_embedding(p, get_target("h200")).schedule
    t = s.rows
    rng = np.random.default_rng(p.count * p.dim)
    idx = rng.integers(0, p.vocab, p.count)
    if repeated:
        idx[rng.random(p.count) < 0.6] = p.vocab // 3
    perm = np.argsort(idx, kind="stable")
    dy = round_to(rng.standard_normal(p.count * p.dim).astype(np.float32), p.dtype)
    base = rng.standard_normal(p.vocab * p.dim).astype(np.float32) if p.base else None
    text = build_accumulate(p, s)
    params = parse(text, kernel_name("accumulate"))[0]
    buffers = {name.lstrip("%"): np.full(int(ty.split("<")[1].split("x")[0]), np.nan, np.float32)
               for name, ty in params}
    buffers["keys"][:p.count], buffers["perm"][:p.count] = idx[perm], perm
    buffers["dy"][:] = dy[:len(buffers["dy"])]
    if base is not None:
        buffers["base"][:] = base
    run_kernel(text, kernel_name("accumulate"), (t.grid, 1, 1), t.threads, 0, buffers)
    want = np.zeros((p.vocab, p.dim), np.float32)
    rows = dy.reshape(p.count, p.dim)
    for i in perm:                                          # index order within each row: FP32, one at a time
        want[idx[i]] += rows[i]
    if base is not None:
        want += base.reshape(p.vocab, p.dim)
    got = buffers["grad"][:p.vocab * p.dim].reshape(p.vocab, p.dim)
    assert not np.isnan(got).any()
    assert np.array_equal(got, round_to(want, p.dtype)), np.argwhere(got != round_to(want, p.dtype))[:4]
    assert t.search_steps < max(1, p.count.bit_length()) and t.tokens_per_trip >= 1


def test_gpt_tiny_gathers_and_scatters_run_on_embedding_kernels_and_iota_is_folded():
    from nova.kernels.embedding import EmbeddingProblem as P
    _, planned = _gpt_tiny_planned()
    by_op = {}
    for g in planned.groups:
        by_op.setdefault(g.nodes[0].op, []).append(g)
    for op, direction in (("index_select", "forward"), ("scatter_add", "backward")):
        assert len(by_op[op]) == 2
        for g in by_op[op]:
            assert g.kernel == "nova" and isinstance(g.problem, P) and g.problem.direction == direction
            based = {"base"} if g.problem.base else set()
            assert "Nova" in g.reason and set(g.bindings) == ({"idx", "table", "out"} if direction == "forward"
                                                               else {"idx", "dy", "grad"} | based)
    # the tied token embedding's gradient: the LM head's weight gradient added as the scatter-add writes
    (tied,) = [g for g in by_op["scatter_add"] if g.problem.base]
    scatter, add = tied.nodes
    assert add.op == "add" and tied.problem.base == "f32" and "+ f32 base" in tied.reason
    assert tied.bindings["grad"] is add.outputs[0] and tied.bindings["base"] in add.inputs
    assert scatter.outputs[0] not in tied.outputs                  # the lookup's sum alone is never written
    (iota,) = by_op["iota"]
    assert iota.kernel == "none" and "constant of the step" in iota.reason


def test_explain_train_prices_the_embedding_groups_with_the_configurator():
    from nova.compiler.explain import explain_planned
    graph, planned = _gpt_tiny_planned()
    report = explain_planned(graph, planned, "h200")
    embedding = [k for k in report["kernels"] if k["model"] == "embedding configurator"]
    assert len(embedding) == 4 and all(k["kernel"] == "nova" for k in embedding)
    assert all(k["name"] != "iota" for k in report["kernels"])
    backward = [k for k in embedding if "scatter-add" in k["name"]]
    assert all(k["schedule"]["roles"][-1] == "accumulate" for k in backward)


def test_cpu_whole_step_loss_and_every_gradient_match_eager():
    torch = pytest.importorskip("torch")
    import copy
    import nova
    from nova.models.gpt import GPT
    model = GPT("tiny", seed=0)
    twin = copy.deepcopy(model)

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    compiled = nova.compile(step, backend="executor")
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    idx = torch.randint(0, vocab, (2, 16), generator=gen)
    idx[0, :8] = 5                                    # repeated indices: rows summed many times
    targets = torch.randint(0, vocab, (2, 16), generator=gen)
    loss = compiled(idx, targets)
    ref = twin(idx, targets)
    ref.backward()
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), name
    planned = compiled._last.engine.program.plan
    assert sum(g.embedding is not None for g in planned.groups) == 4
