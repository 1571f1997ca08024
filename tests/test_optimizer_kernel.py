"""The multi-tensor optimizer kernel family on the host: update rules, the argument table (and the
CTAs' walk over it, replayed in Python), the configurator, PTX for sm_80/86/90 without spills or
calls, the fusion pass's optimizer groups, the memory plan across one such kernel, the CUDA
program's launch on meta, the bind-time checks, and the NOVA_POINTWISE switch."""
import dataclasses
import re

import pytest
import torch
from hypothesis import given, settings, strategies as st

from nova.kernels.optimizer.derive import MAX_LANES, configure_multi_tensor, configure_rule
from nova.kernels.optimizer.launch import mismatch
from nova.kernels.optimizer.problem import (MultiTensorProblem, OptimizerProblemError, UpdateRule, operand_slots,
                                            parse_sizes)
from nova.kernels.optimizer.table import HEADER, chunk_counts, field_word, row_fields, row_words, table_words
from nova.passes import pipeline
from nova.passes.examples import transformer_step

RULES = [UpdateRule("adamw", "f32", "f32"), UpdateRule("adamw", "bf16", "f32"),
         UpdateRule("adamw", "f16", "i64", decoupled=False, maximize=True), UpdateRule("adamw", "f64", "f64"),
         UpdateRule("sgd", "f32"), UpdateRule("sgd", "bf16", with_momentum=True, nesterov=True),
         UpdateRule("sgd", "f32", with_momentum=True, first_step=True, maximize=True),
         UpdateRule("sgd", "f64", with_momentum=True), UpdateRule("adamw", "f32", "f32", grad_scale=True),
         UpdateRule("sgd", "bf16", with_momentum=True, grad_scale=True, grad_out=True)]


# --------------------------------------------------------------------------- rules and problems
def test_rules_name_what_they_read_and_write():
    adam = UpdateRule("adamw", "bf16", "f32")
    assert adam.pointers() == ("param", "grad", "exp_avg", "exp_avg_sq", "step", "param_out", "exp_avg_out",
                               "exp_avg_sq_out")
    assert adam.bytes_per_element == 7 * 2 and adam.hyper == ("lr", "beta1", "beta2", "eps", "weight_decay")
    first = UpdateRule("sgd", "f32", with_momentum=True, first_step=True)
    assert first.pointers() == ("param", "grad", "param_out", "momentum_buffer_out")
    later = dataclasses.replace(first, first_step=False)
    assert later.pointers() == ("param", "grad", "momentum_buffer", "param_out", "momentum_buffer_out")
    assert UpdateRule("sgd", "f32").bytes_per_element == 3 * 4
    assert operand_slots(later, ["p", "g", "h", "b"], ["p1", "b1"]) == {
        "param": "p", "grad": "g", "momentum_buffer": "b", "param_out": "p1", "momentum_buffer_out": "b1"}
    clipped = UpdateRule("adamw", "f32", "f32", grad_scale=True, grad_out=True)     # clipping's coefficient folded in
    assert clipped.pointers() == ("param", "grad", "exp_avg", "exp_avg_sq", "step", "grad_scale", "param_out",
                                  "exp_avg_out", "exp_avg_sq_out", "grad_out")
    assert clipped.bytes_per_element == 8 * 4 and "grad x scale" in clipped.describe()
    assert "grad_scale" not in adam.to_dict() and clipped.to_dict()["grad_out"] is True   # old keys unchanged


@pytest.mark.parametrize("kwargs, message", [
    (dict(op="adagrad", dtype="f32"), "optimizer must be"),
    (dict(op="adamw", dtype="i32", step_dtype="f32"), "dtype must be"),
    (dict(op="adamw", dtype="f32", step_dtype="bf16"), "step counts"),
    (dict(op="sgd", dtype="f32", nesterov=True), "need momentum"),
    (dict(op="adamw", dtype="f32", step_dtype="f32", with_momentum=True), "sgd's"),
    (dict(op="sgd", dtype="f32", grad_out=True), "needs grad_scale"),
])
def test_bad_rules_are_one_line_errors(kwargs, message):
    with pytest.raises(OptimizerProblemError, match=message):
        UpdateRule(**kwargs)


def test_sizes_parse_and_refuse_nonsense():
    assert parse_sizes("42000000") == (42_000_000,)
    assert parse_sizes("50304x768, 768,3x4x5") == (50304 * 768, 768, 60)
    for bad in ("", "12,x", "0", "-4", "1e6"):
        with pytest.raises(OptimizerProblemError):
            parse_sizes(bad)


# --------------------------------------------------------------------------- the argument table
def walk(words, rule, schedule):
    """The kernel's walk (emit.py) replayed: CTA b takes chunks b, b + grid, ... below the table's chunk
    count, scans forward from its last row, and covers its threads' vectors; returns, per tensor, how
    many times each element is visited."""
    R, H = row_words(rule), len(HEADER)
    fields = row_fields(rule)
    tensors, chunks = words[0], words[1]
    numels = [words[H + t * R + fields.index("numel")] for t in range(tensors)]
    seen = [[0] * n for n in numels]
    for b in range(schedule.grid):
        t = -1
        for c in range(b, chunks, schedule.grid):
            row = max(t, 0)
            while c >= words[H + row * R + fields.index("chunk_end")]:
                row += 1
            t = row
            begin = words[H + t * R + fields.index("chunk_begin")]
            for thread in range(schedule.threads):
                for u in range(schedule.unroll):
                    e = (c - begin) * schedule.chunk + u * schedule.threads * schedule.vector + thread * schedule.vector
                    for k in range(e, min(e + schedule.vector, numels[t])):
                        seen[t][k] += 1
    return seen


@pytest.mark.parametrize("rule", [RULES[0], RULES[6]], ids=lambda r: r.describe())
def test_table_layout_and_the_walk_cover_every_element_once(rule):
    schedule = dataclasses.replace(configure_rule(rule, "rtx3060"), grid=5)       # few CTAs: each walks many chunks
    numels = [1, 0, 4097, schedule.chunk, schedule.chunk * 3 + 7, 33, 0, 2 * schedule.chunk - 1]
    rows = [{**{name: 0x10000 * (k + 1) + 16 * j for j, name in enumerate(rule.pointers())}, "numel": n}
            for k, n in enumerate(numels)]
    words = table_words(rule, rows, schedule.chunk)
    counts = chunk_counts(numels, schedule.chunk)
    assert words[:2] == [len(numels), sum(counts)] and len(words) == len(HEADER) + len(numels) * row_words(rule)
    for k, (r, n) in enumerate(zip(rows, numels)):
        for name in rule.pointers():
            assert words[field_word(rule, k, name)] == r[name]
        assert words[field_word(rule, k, "numel")] == n
        assert words[field_word(rule, k, "chunk_end")] - words[field_word(rule, k, "chunk_begin")] == counts[k]
        assert words[field_word(rule, k, "chunk_begin")] == sum(counts[:k])
    assert all(v == 1 for per in walk(words, rule, schedule) for v in per)


# --------------------------------------------------------------------------- the configurator
@settings(max_examples=40, deadline=None)
@given(rule=st.sampled_from(RULES), sizes=st.lists(st.integers(0, 3_000_000), min_size=1, max_size=20),
       target=st.sampled_from(["h200", "a100", "rtx3060"]))
def test_configurator_properties(rule, sizes, target):
    c = configure_multi_tensor(MultiTensorProblem(rule, tuple(sizes)), target)
    s, gpu = c.schedule, c.target
    assert s.vector * rule.itemsize == 16 and s.threads % 32 == 0 and s.chunk == s.vector * s.threads * s.unroll
    assert s.unroll & (s.unroll - 1) == 0 and s.unroll * s.vector <= MAX_LANES
    assert s.unroll * len(rule.reads()) >= row_words(rule) or s.unroll * s.vector == MAX_LANES
    assert s.grid == gpu.sm_count * c.facts["ctas_per_sm"] and s.arch == gpu.arch
    assert c.facts["chunks"] == sum(chunk_counts(sizes, s.chunk)) and c.facts["trips"] * s.grid >= c.facts["chunks"]
    assert c.facts["bytes"] >= sum(sizes) * rule.bytes_per_element
    p = c.prediction
    assert p.time_us >= p.terms_us["launch"] > 0 and p.bound in ("dram", "launch")
    assert s == configure_rule(rule, target)            # the kernel never depends on the tensors


def test_prediction_grows_with_the_bytes():
    rule = RULES[0]
    small, big = (configure_multi_tensor(MultiTensorProblem(rule, (n,)), "h200").prediction for n in (10_000, 42_000_000))
    assert small.bound == "launch" and big.bound == "dram" and big.time_us > 50 * small.time_us


# --------------------------------------------------------------------------- generated code
ptxas = pytest.importorskip("nova.codegen.ptxas")


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.describe())
def test_kernels_assemble_without_spills_or_calls(arch, rule):
    pytest.importorskip("mlir")
    from nova.kernels.optimizer.compile import build
    schedule = dataclasses.replace(configure_rule(rule), arch=arch)
    art = build(rule, schedule)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
    assert r["registers"] <= 255 and art.grid == (schedule.grid, 1, 1) and art.params == ("table", "hyper")
    assert not re.search(r"\bcall\b", art.ptx)                       # no out-of-line libdevice calls
    vector = "v2.b64" if rule.dtype == "f64" else "v4.b32"
    assert f"ld.global.{vector}" in art.ptx and f"st.global.{vector}" in art.ptx
    if rule.op == "adamw":
        assert ("sqrt.rn.f64" if rule.dtype == "f64" else "sqrt.rn.f32") in art.ptx and "sqrt.approx" not in art.ptx


# --------------------------------------------------------------------------- the plan
def optimizer_groups(planned):
    return [g for g in planned.groups if g.nodes[0].op in ("adamw", "sgd")]


def test_fusion_puts_optimizer_groups_on_one_kernel_and_donation_survives():
    from nova.passes.memory import validate_memory_plan
    planned = pipeline(transformer_step(layers=2))
    groups = optimizer_groups(planned)
    assert groups and all(g.kernel == "nova" and g.problem.rule == UpdateRule("adamw", "f32", "f32") for g in groups)
    assert all("one Nova multi-tensor kernel" in g.reason for g in groups)
    assert all(g.problem.sizes == tuple(n.inputs[0].type.numel for n in g.nodes) for g in groups)
    updating = [o for o in planned.graph.outputs if o.updates is not None]
    assert len(planned.memory.donations) == len(updating)          # every parameter and moment updated in place
    validate_memory_plan(planned.graph, planned.groups, planned.memory)


def test_mixed_element_types_stay_on_aten_with_the_reason():
    from nova.ir import Graph, TensorType
    g = Graph("mixed")
    hyper = g.input(TensorType((5,), "f64"), "hyper", "opt_state")
    step = g.input(TensorType((), "f32"), "step", "opt_state")
    p = g.input(TensorType((8, 4), "bf16"), "p", "param")
    grad = g.input(TensorType((8, 4), "f32"), "g", "grad")
    m, v = (g.input(TensorType((8, 4), "bf16"), n, "opt_state") for n in ("m", "v"))
    for k, r in enumerate(g.op("adamw", p, grad, m, v, step, hyper, decoupled=True)):
        g.output(r, f"o{k}", "param" if k == 0 else "opt_state", updates=(2, 4, 5)[k])
    (group,) = optimizer_groups(pipeline(g))
    assert group.kernel == "aten" and "mixed element types" in group.reason


@pytest.mark.parametrize("setting, key, pointwise, optimizer", [
    ("0", "none", "aten", "aten"), ("fused", "fused", "nova", "aten"), ("optimizer", "optimizer", "aten", "nova"),
    ("1", "all", "nova", "nova"), ("", "all", "nova", "nova")])
def test_the_switch_keeps_groups_on_aten(monkeypatch, setting, key, pointwise, optimizer):
    from nova.kernels.switch import kernel_switch
    monkeypatch.setenv("NOVA_POINTWISE", setting)
    assert kernel_switch().key() == key
    planned = pipeline(transformer_step())
    fused = [g for g in planned.groups if g.kind == "pointwise" and g.kernel != "none"]     # launching pointwise groups
    assert fused and {g.kernel for g in fused} == {pointwise}
    assert {g.kernel for g in optimizer_groups(planned)} == {optimizer}
    assert any(f"NOVA_POINTWISE={key}" in g.reason for g in planned.groups) == (key != "all")


def test_a_bad_switch_is_one_line(monkeypatch):
    from nova.options import OptionError
    monkeypatch.setenv("NOVA_POINTWISE", "maybe")
    with pytest.raises(OptionError, match=r"^NOVA_POINTWISE='maybe': expected all, none, fused, optimizer"):
        pipeline(transformer_step())


def test_the_plan_cache_keys_the_switch(tmp_path, monkeypatch):
    from nova.compiler import plan_cache
    graph = transformer_step()
    monkeypatch.setenv("NOVA_POINTWISE", "0")
    off, status = plan_cache.plan(graph, None, "cuda", root=tmp_path)
    assert status == "miss" and {g.kernel for g in optimizer_groups(off)} == {"aten"}
    monkeypatch.setenv("NOVA_POINTWISE", "1")
    on, status = plan_cache.plan(graph, None, "cuda", root=tmp_path)
    assert status == "miss" and {g.kernel for g in optimizer_groups(on)} == {"nova"}
    assert plan_cache.plan(graph, None, "cuda", root=tmp_path)[1] == "hit"


# --------------------------------------------------------------------------- the program
def test_meta_program_launches_one_kernel_per_optimizer_group():
    from nova.compiler.executor import build, optimizer_rules
    from nova.compiler.precompile import step_kernels
    from nova.kernels.optimizer.table import table_bytes
    planned = pipeline(transformer_step())
    program = build(planned, "meta")
    launches = [l for l in program.launches if l.nodes[0].op == "adamw"]
    assert launches and all(len(l.kernels) == 1 and l.kernels[0].optimizer is not None for l in launches)
    assert all("nova multi-tensor kernel" in l.kernels[0].what for l in launches)
    tables = sum(table_bytes(l.kernels[0].optimizer, len(l.nodes)) for l in launches)
    assert program.stats["workspace_bytes"] >= tables
    assert optimizer_rules(planned) == step_kernels(planned).optimizer == [UpdateRule("adamw", "f32", "f32")]
    cpu = build(planned, "cpu")                                       # the CPU program keeps ATen's foreach path
    assert not any(k.optimizer for l in cpu.launches for k in l.kernels)


def _row(rule, numel=64, dtype=torch.float32, **override):
    out = {}
    for name in rule.pointers():
        out[name] = torch.zeros((), dtype=torch.float32) if name == "step" else torch.zeros(numel, dtype=dtype)
    out.update(override)
    return out


def test_bind_checks_name_what_the_kernel_cannot_take():
    rule = UpdateRule("adamw", "f32", "f32")
    hyper = torch.zeros(5, dtype=torch.float64)
    ok = _row(rule)
    ok.update(param_out=ok["param"], exp_avg_out=ok["exp_avg"], exp_avg_sq_out=ok["exp_avg_sq"])   # in place
    assert mismatch(rule, [ok, _row(rule, 7)], hyper) == ""
    shared, big = torch.zeros(64), torch.zeros(200)
    assert mismatch(rule, [_row(rule, grad=shared), _row(rule, grad=shared)], hyper) == ""      # reads may share
    why = mismatch(rule, [_row(rule, param_out=shared), _row(rule, grad=shared)], hyper)
    assert "overlaps" in why and "tensor 0's param_out" in why and "tensor 1's grad" in why
    assert "overlaps" in mismatch(rule, [_row(rule, param_out=big[:64], grad=big[32:96])], hyper)
    assert "16-byte boundary" in mismatch(rule, [_row(rule, param=big[1:65])], hyper)
    assert "not a contiguous f32" in mismatch(rule, [_row(rule, grad=torch.zeros(64, dtype=torch.bfloat16))], hyper)
    assert "not a contiguous f32" in mismatch(rule, [_row(rule, grad=torch.zeros(128)[::2])], hyper)
    assert "step is not one f32" in mismatch(rule, [_row(rule, step=torch.zeros((), dtype=torch.int64))], hyper)
    assert "hyper-parameters" in mismatch(rule, [ok], torch.zeros(4, dtype=torch.float64))


def test_the_hyper_parameter_order_is_the_irs():
    from nova.ir import ops
    from nova.kernels.optimizer import problem
    assert problem.ADAMW_HYPER == ops.ADAMW_HYPER and problem.SGD_HYPER == ops.SGD_HYPER


# --------------------------------------------------------------------------- the kernel's own code, on the CPU
CPU_RULES = [UpdateRule("adamw", "f32", "f32"), UpdateRule("adamw", "f32", "i64", decoupled=False, maximize=True),
             UpdateRule("adamw", "bf16", "f32"), UpdateRule("adamw", "f64", "f64"),
             UpdateRule("sgd", "f32"), UpdateRule("sgd", "f16", with_momentum=True, nesterov=True),
             UpdateRule("sgd", "f32", with_momentum=True, first_step=True, maximize=True),
             # gradient clipping's coefficient folded into the update (the scaled gradient written, or not)
             UpdateRule("adamw", "f32", "f32", grad_scale=True), UpdateRule("adamw", "bf16", "f32", grad_scale=True,
                                                                            grad_out=True),
             UpdateRule("sgd", "f32", with_momentum=True, maximize=True, grad_scale=True, grad_out=True)]
CPU_TOL = {"f32": 1e-6, "bf16": 8e-3, "f16": 2e-3, "f64": 1e-13}
GUARD = 16                      # elements on each side of every tensor: must stay untouched


@pytest.mark.parametrize("rule", CPU_RULES, ids=lambda r: r.describe())
def test_the_kernel_run_on_the_cpu_matches_the_float64_reference(rule):
    """The generated kernel, its gpu.func run thread by thread on the CPU (tests/mlir_cpu.py), over
    tensors of odd sizes, an empty one, one at a chunk's edge and several chunks per CTA (3 CTAs), each
    with its own step count; half the tensors updated in place, half into NaN-poisoned outputs; the
    memory around every tensor untouched; every value against ref_adamw / ref_sgd in float64.  With
    ``grad_scale`` each tensor's gradient is scaled by its own factor (rounded to the storage type, as the
    IR's ``mul``) before the update, and with ``grad_out`` that scaled gradient is written too."""
    pytest.importorskip("mlir")
    from mlir_cpu import run_kernel
    from nova.ir.ops import ref_adamw, ref_sgd
    from nova.kernels.optimizer.emit import build_module
    schedule = dataclasses.replace(configure_rule(rule, "h200"), grid=3)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}[rule.dtype]
    sizes = [1, 7, 0, schedule.chunk + 3, 2 * schedule.chunk, 33, 5 * schedule.chunk + schedule.threads * 4 + 1]
    gen = torch.Generator().manual_seed(0)
    hyper = torch.tensor([1e-2, 0.9, 0.99, 1e-8, 0.1] if rule.op == "adamw" else [5e-2, 0.9, 0.1, 1e-2],
                         dtype=torch.float64)
    if rule.nesterov:
        hyper[2] = 0.0                                        # torch: nesterov needs zero dampening
    bases, rows, before = [], [], []

    def tensor(n, values):
        base = torch.full((n + 2 * GUARD,), 7.0, dtype=dtype)
        view = base[GUARD:GUARD + n]
        view.copy_(values)
        bases.append(base)
        return view

    for k, n in enumerate(sizes):
        start = {"param": torch.randn(n, generator=gen), "grad": torch.randn(n, generator=gen),
                 "exp_avg": torch.randn(n, generator=gen) * 0.1, "exp_avg_sq": torch.rand(n, generator=gen) * 0.01,
                 "momentum_buffer": torch.randn(n, generator=gen)}
        row = {name: tensor(n, start[name]) for name in rule.reads()}
        for name in rule.writes():
            row[f"{name}_out"] = row[name] if k % 2 == 0 and name in row else tensor(n, torch.full((n,), float("nan")))
        if rule.op == "adamw":
            step_dtype = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64}[rule.step_dtype]
            row["step"] = torch.tensor(k + 1, dtype=step_dtype)
        old = {name: row[name].double().clone() for name in rule.reads()}
        if rule.grad_scale:
            row["grad_scale"] = torch.tensor(0.25 + 0.1 * k, dtype=dtype)
            old["grad"] = (row["grad"] * row["grad_scale"]).double()      # rounded to the storage type
        rows.append(row)
        before.append(old)
    guards = [torch.cat([b[:GUARD], b[-GUARD:]]).clone() for b in bases]
    words = [{**{name: row[name].data_ptr() for name in rule.pointers()}, "numel": n} for row, n in zip(rows, sizes)]
    table = torch.tensor(table_words(rule, words, schedule.chunk), dtype=torch.int64)
    run_kernel(build_module(rule, schedule), schedule.grid, schedule.threads, table.data_ptr(), hyper.data_ptr())
    for k, (row, old) in enumerate(zip(rows, before)):
        if rule.op == "adamw":
            want = ref_adamw(torch, old["param"], old["grad"], old["exp_avg"], old["exp_avg_sq"],
                             torch.tensor(float(k + 1), dtype=torch.float64), hyper, rule.decoupled, rule.maximize)
        else:
            buffer = () if "momentum_buffer" not in old else (old["momentum_buffer"],)
            want = ref_sgd(torch, old["param"], old["grad"], hyper, *buffer, with_momentum=rule.with_momentum,
                           nesterov=rule.nesterov, maximize=rule.maximize)
        want = tuple(want) + ((old["grad"],) if rule.grad_out else ())
        for name, w in zip(rule.writes(), want):
            got = row[f"{name}_out"].double()
            assert not got.isnan().any(), (sizes[k], name)
            err = float((got - w).norm() / w.norm().clamp_min(1e-30)) if sizes[k] else 0.0
            assert err < CPU_TOL[rule.dtype], (sizes[k], name, err)
    assert all(torch.equal(torch.cat([b[:GUARD], b[-GUARD:]]), g) for b, g in zip(bases, guards))


def test_an_sgd_first_step_precompiles_the_rule_of_the_steps_after():
    """A step captured before SGD's momentum buffers exist (``nova precompile train --optimizer sgd``
    plans that one) is followed by steps reading them: the precompile list holds both kernels."""
    from nova.compiler.explain import plan_training_step
    from nova.compiler.executor import optimizer_rules
    from nova.compiler.precompile import step_kernels
    planned, _ = plan_training_step("tiny", 2, 16, "sgd", "h200")
    (first,) = optimizer_rules(planned)
    assert first.first_step and first.with_momentum
    assert step_kernels(planned).optimizer == [first, dataclasses.replace(first, first_step=False)]
    assert UpdateRule("adamw", "f32", "f32").later_steps() == UpdateRule("adamw", "f32", "f32")
