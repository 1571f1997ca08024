"""Batched and strided-batched GEMM on the host: the problem statement and its errors, the
configurator's counts on both families (work units = tiles x batch, no split-K), the MLIR of both
builders (3-D memrefs and tensor maps, the unit -> (batch element, tile) walk), ptxas on sm_90a,
sm_80 and sm_86 without spills, the runtime's 3-D tensor maps and the CLI's BxMxNxK shapes.
The GPU checks of the same kernels are in tests/test_runtime_gpu.py (``BATCHED_CASES``)."""
from __future__ import annotations

import json
import re

import pytest
from nova.options import OptionError

from nova.hwmodel import get_target
from nova.configurator import configure
from nova.kernels.gemm.problem import MAX_DIM, GemmProblem, ProblemError
from nova.kernels.gemm.schedule import Schedule

from nova.codegen.ptxas import wgmma_hazards   # wgmmas serialised, arrive/wait injected, setmaxnreg ignored


# --------------------------------------------------------------------------- the problem
def test_batch_one_is_the_unbatched_problem_and_key():
    plain = GemmProblem(256, 192, 64, "bf16", True)
    for same in (GemmProblem(256, 192, 64, "bf16", True, batch=1, batch_stride_a=0, batch_stride_c=7),
                 GemmProblem(256, 192, 64, "bf16", True, batch=1)):
        assert same == plain and same.to_dict() == plain.to_dict() and same.describe() == plain.describe()
    assert "batch" not in plain.to_dict() and plain.batch_strides == (0, 0, 0)


def test_batched_problem_fields_and_counts():
    p = GemmProblem(64, 48, 32, "tf32", batch=3)
    assert (p.batch_stride_a, p.batch_stride_b, p.batch_stride_c) == (64 * 32, 32 * 48, 64 * 48)   # packed
    assert p.describe() == "gemm 3x64x48x32 tf32 NN -> f32" and p.to_dict()["batch"] == 3
    assert p.flops == 3 * 2 * 64 * 48 * 32
    q = GemmProblem(64, 48, 32, "bf16", batch=3, batch_stride_a=0, batch_stride_c=64 * 48 + 8)
    assert q.describe() == "gemm 3x64x48x32 bf16 NN -> bf16 (batch strides A,B,C = 0,packed,3080)"
    assert q.matrices("a") == 1 and q.matrices("b") == 3
    assert q.min_bytes == (64 * 32 + 3 * 32 * 48) * 2 + 3 * 64 * 48 * 2        # a broadcast A is read once
    assert q.footprint_bytes == (64 * 32 + 3 * 32 * 48) * 2 + (2 * 3080 + 64 * 48) * 2


@pytest.mark.parametrize("kw,error", [
    ({"batch": 0}, r"^GEMM batch must be a positive integer, got 0$"),
    ({"batch": 2**31}, r"^GEMM batch=2147483648 exceeds the limit 2\^31-1"),
    ({"batch": 2, "batch_stride_a": -1}, r"^batch stride of A must be a non-negative integer \(elements\), got -1$"),
    ({"batch": 2, "batch_stride_b": 1.5}, r"^batch stride of B must be a non-negative integer"),
    ({"batch": 2, "batch_stride_c": 0}, r"^batch stride of C \(0 elements\) is smaller than one C matrix \(M\*N = 64\): "
                                        r"the 2 outputs would overlap$"),
    ({"batch": 2**20}, r"A, B and C take [\d.]+ GB, more than the 154.6 GB"),
])
def test_batch_errors_are_one_line(kw, error):
    size = 8 if kw.get("batch", 1) < 2**20 else 2048
    with pytest.raises(ProblemError, match=error):
        GemmProblem(size, size, size, "tf32", **kw)


def test_packed_a_and_c_against_one_b_is_the_flat_gemm():
    """Packed A (not transposed) and packed C against one broadcast B: one [batch*M, K] GEMM, the
    same problem (and key) however it is stated."""
    flat = GemmProblem(32, 6, 5, "bf16", False, True)
    assert GemmProblem(8, 6, 5, "bf16", False, True, batch=4, batch_stride_b=0) == flat
    assert GemmProblem(8, 6, 5, "bf16", True, batch=4, batch_stride_b=0).batch == 4        # A transposed: batched
    assert GemmProblem(8, 6, 5, "bf16", batch=4, batch_stride_b=0, batch_stride_c=50).batch == 4   # C padded
    assert GemmProblem(8, 6, 5, "bf16", batch=4).batch == 4                                # B batched
    with pytest.raises(ProblemError, match=r"M=\d+ \(a batch of 2 packed A matrices against one B\) exceeds"):
        GemmProblem(MAX_DIM // 2 + 1, 1, 1, "bf16", batch=2, batch_stride_b=0)


# --------------------------------------------------------------------------- the configurator
def _steps(cfg) -> dict:
    return {st.step: st for st in cfg.derivation}


@pytest.mark.parametrize("family", [None, "mma.sync"])
def test_work_units_are_tiles_times_batch_and_k_is_not_split(family):
    """A deep-K batch of small outputs (which unbatched would split K): the derivation counts
    tiles x batch, says why K is not split, and the grid covers every (batch element, tile)."""
    p = GemmProblem(256, 256, 16384, "tf32", batch=3)
    one = configure(GemmProblem(256, 256, 16384, "tf32"), "h200", family=family)
    cfg = configure(p, "h200", family=family)
    s, st = cfg.schedule, _steps(cfg)
    assert one.schedule.split_k > 1 and s.split_k == 1                     # split unbatched, not batched
    assert "not with a batch" in st["split-K"].reason and "not supported for batched" in st["split-K"].reason
    tiles = -(-p.M // s.block_m) * -(-p.N // s.block_n)
    assert st["work units"].value == tiles * 3
    assert s.grid(p.M, p.N, p.batch) == (tiles * 3, 1, 1)
    if family is None:
        assert s.mma.family == "wgmma" and s.hopper.ctas == min(tiles * 3, 132)
        assert "min(tiles x batch, SMs)" in st["grid"].reason
    assert cfg.prediction.tflops == pytest.approx(p.flops / cfg.prediction.time_us / 1e6)


@pytest.mark.parametrize("family", [None, "mma.sync"])
def test_prediction_scales_with_the_batch(family):
    """8 batch elements cost up to 8x one element's time (less where one element leaves SMs idle)."""
    one = configure(GemmProblem(2048, 2048, 2048, "bf16"), "h200", family=family).prediction
    eight = configure(GemmProblem(2048, 2048, 2048, "bf16", batch=8), "h200", family=family).prediction
    assert 4 < eight.time_us / one.time_us <= 8.5
    assert eight.floor_us == pytest.approx(8 * one.floor_us, rel=1e-6)


def test_group_m_rasterises_within_a_batch_element():
    """A batched GEMM's raster group comes from one batch element's tile grid (step 14 on its tile rows
    and tiles), so a group never spans two elements: 512x2048x512 x 64 has 4 tile rows per element and
    groups 4 of them, where the batch's 256 stacked rows would give 14."""
    from nova.kernels.gemm.hopper import raster_groups
    gpu = get_target("h200")
    for M in (2048, 512):
        s = configure(GemmProblem(M, 2048, 512, "bf16", batch=64), gpu).schedule
        rows = -(-M // s.block_m)
        tiles = rows * -(-2048 // s.block_n)
        assert s.group_m == raster_groups(gpu, rows, tiles, s.block_m, s.block_n)[0] <= rows
    assert configure(GemmProblem(512, 2048, 512, "bf16", batch=64), gpu).schedule.group_m == 4


def test_operand_plan_of_batched_operands():
    """Batched operands get 3-D tensor maps with their batch stride; a broadcast one the 2-D map of
    its one matrix; a batch stride TMA cannot use goes through a batched prep pass into a packed
    workspace (3-D map over it); a broadcast operand that needs prep is prepped once."""
    s = configure(GemmProblem(256, 192, 128, "bf16", True, batch=3, batch_stride_b=0), "h200").schedule
    a, b = s.hopper.operands.a, s.hopper.operands.b
    assert (a.batch, a.batch_stride, a.prep) == (3, 256 * 128, None) and (b.batch, b.batch_stride) == (1, 0)
    odd = GemmProblem(256, 192, 128, "bf16", batch=3, batch_stride_a=256 * 128 + 1)      # 2 B off 16
    a = configure(odd, "h200").schedule.hopper.operands.a
    assert a.prep is not None and (a.prep.batch, a.prep.src_stride) == (3, 256 * 128 + 1)
    assert (a.batch, a.batch_stride) == (3, a.rows * a.cols) and not a.prep.transpose
    over = GemmProblem(256, 192, 128, "bf16", batch=3, batch_stride_b=128)          # overlapping B matrices
    assert configure(over, "h200").schedule.hopper.operands.b.prep.batch == 3
    once = GemmProblem(255, 511, 320, "bf16", True, True, batch=3, batch_stride_a=0)  # A [K, 255]: prep, once
    a = configure(once, "h200").schedule.hopper.operands.a
    assert a.prep.transpose and (a.prep.batch, a.batch, a.batch_stride) == (1, 1, 0)


def test_vectors_divide_the_batch_strides():
    p = GemmProblem(64, 64, 64, "bf16", batch=3, batch_stride_a=64 * 64 + 4, batch_stride_c=64 * 64 + 2)
    s = configure(p, "a100").schedule
    assert (s.vector_a, s.vector_c) == (4, 2)           # 8-byte copies of A, pairs into C
    s = configure(GemmProblem(64, 64, 64, "bf16", batch=3, batch_stride_c=64 * 64 + 1), "h200").schedule
    assert s.vector_c == 1 and s.hopper.epilogue == "registers"        # C's stride: no TMA store either
    s = configure(GemmProblem(2048, 2048, 512, "bf16", batch=3, batch_stride_c=2048 * 2048 + 8), "h200").schedule
    assert s.hopper.epilogue == "tma_store"                             # 16 bytes: a 3-D map of C


def test_batched_schedule_round_trips_and_unbatched_dicts_are_unchanged():
    s = configure(GemmProblem(333, 257, 129, "fp16", True, True, batch=17), "h200").schedule
    d = json.loads(json.dumps(s.to_dict()))
    assert Schedule.from_dict(d) == s and d["hopper"]["operands"]["a"]["batch"] == 17
    plain = configure(GemmProblem(333, 257, 129, "fp16", True, True), "h200").schedule.to_dict()
    assert "batch" not in plain["hopper"]["operands"]["a"] and "batch" not in plain["hopper"]["operands"]["a"]["prep"]


# --------------------------------------------------------------------------- the kernels
def test_mma_sync_mlir_indexes_the_batch():
    from nova.kernels.gemm.compile import build_module
    p = GemmProblem(96, 80, 72, "tf32", True, False, batch=5, batch_stride_b=0)
    text = build_module(p, configure(p, "a100").schedule)
    assert "%A: memref<5x72x96xf32, strided<[6912, 96, 1]>>" in text and "%B: memref<72x80xf32>" in text
    assert "%C: memref<5x96x80xf32, strided<[7680, 80, 1]>>" in text
    assert re.search(r"%batch = arith.divui %pid, %c\d+ : index", text)
    assert re.search(r"%C\[%batch, ", text) and re.search(r"%A\[%batch, ", text) and not re.search(r"%B\[%batch", text)


def test_hopper_mlir_walks_batch_elements_with_3d_maps(monkeypatch):
    from nova.kernels.gemm.compile import build_module
    monkeypatch.setenv("NOVA_PINGPONG", "0")           # the cooperative pick: the TMA store (a 3-D map of C)
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")     # (3 warpgroups' 192x192 tile would take the registers)
    p = GemmProblem(3000, 2048, 512, "tf32", False, True, True, batch=3, batch_stride_a=0)
    s = configure(p, "h200").schedule
    assert s.hopper.epilogue == "tma_store"
    text = build_module(p, s)
    assert "%batch = arith.divui %tile" in text and "%unit_tile = arith.remui %tile" in text
    assert re.search(r"tma.async.load %tmB\[%\w+, %\w+, %batch\]", text)          # B: 3-D
    assert re.search(r"tma.async.load %tmA\[%\w+, %\w+\],", text)                 # A broadcast: 2-D
    assert re.search(r"tma.async.store %\w+ to %tmC\[%\w+, %\w+, %batch\w*\]", text)
    assert "tensor = memref<1x128x32xf32" in text or "tensor = memref<1x" in text


def _assemble(p, target, family=None):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    art = compile_gemm(p, configure(p, target, family=family).schedule)
    kernels = [art.resources] + [d["resources"] for d in art.meta.get("prep_kernels", {}).values()]
    for r in kernels:
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert not wgmma_hazards(r), r["ptxas_info"]
    return art


HOPPER = [
    GemmProblem(300, 200, 256, "tf32", batch=3),                                          # swapped (B^T from registers)
    GemmProblem(333, 257, 129, "fp16", True, True, True, "gelu", batch=17),               # both prepped, batched
    GemmProblem(512, 512, 64, "bf16", False, True, batch=256),                             # attention-like, TMA store
    GemmProblem(3000, 2048, 512, "tf32", False, True, True, batch=3, batch_stride_a=0),   # 3-D C map, broadcast A
    GemmProblem(127, 253, 61, "tf32", True, False, batch=3, batch_stride_b=0),           # TN: prep, broadcast B
    GemmProblem(1000, 1000, 512, "tf32", True, True, batch=5),
    GemmProblem(255, 511, 320, "bf16", True, True, batch=3, batch_stride_a=0, batch_stride_c=255 * 512),
    GemmProblem(256, 192, 128, "tf32", False, True, batch=3, batch_stride_a=256 * 128 + 1),   # prep for the stride
]


@pytest.mark.parametrize("p", HOPPER, ids=lambda p: p.describe())
def test_hopper_batched_kernels_assemble_without_spills(p):
    art = _assemble(p, "h200")
    s = configure(p, "h200").schedule
    assert art.grid == (s.hopper.ctas, 1, 1)
    for op, d in art.meta["prep_kernels"].items():
        prep = s.hopper.operands.role(op).prep
        assert d["grid"][0] % prep.batch == 0 and d["meta"]["prep"].get("batch", 1) == prep.batch


MMA_SYNC = [
    GemmProblem(512, 512, 64, "bf16", batch=4),
    GemmProblem(333, 257, 129, "fp16", True, True, True, "gelu", batch=17),
    GemmProblem(255, 511, 300, "bf16", True, True, batch=3, batch_stride_a=0, batch_stride_c=130312),
    GemmProblem(1000, 1000, 512, "tf32", False, True, True, "relu", batch=3),
    GemmProblem(96, 80, 72, "tf32", True, False, batch=5),
]


@pytest.mark.parametrize("target,family", [("a100", None), ("rtx3060", None), ("h200", "mma.sync")])
@pytest.mark.parametrize("p", MMA_SYNC, ids=lambda p: p.describe())
def test_mma_sync_batched_kernels_assemble_without_spills(p, target, family):
    art = _assemble(p, target, family)
    s = configure(p, target, family=family).schedule
    assert art.grid == (-(-p.M // s.block_m) * -(-p.N // s.block_n) * p.batch, 1, 1)


def test_codegen_refuses_split_k_with_a_batch():
    import dataclasses
    from nova.codegen import CodegenError
    from nova.kernels.gemm.compile import build_module
    p = GemmProblem(256, 256, 4096, "tf32", batch=2)
    for target in ("a100", "h200"):
        s = configure(p, target).schedule
        with pytest.raises(CodegenError, match="batched GEMMs do not split K"):
            build_module(p, dataclasses.replace(s, split_k=2, vector_c=1))   # as atomic split-K stores


# --------------------------------------------------------------------------- the runtime (no GPU)
def test_hopper_runtime_encodes_3d_maps_from_the_plan(monkeypatch):
    """HopperGemm reads each operand's batch and batch stride from the plan (3-D maps; a broadcast
    operand's 2-D map) and C's from the artifact's problem, sizes batched prep workspaces for every
    matrix, and encodes 3-D maps with the batch stride in bytes."""
    import types
    from nova.runtime import tma
    monkeypatch.setenv("NOVA_PINGPONG", "0")           # the cooperative pick: the TMA store (a 3-D map of C)
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")     # (3 warpgroups' 192x192 tile would take the registers)
    p = GemmProblem(3000, 2048, 512, "tf32", False, True, True, batch=3, batch_stride_a=0)
    s = configure(p, "h200").schedule
    encoded = []
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: encoded.append((ptr, shape)) or ptr + 8)
    monkeypatch.setattr(tma.driver, "load_kernel", lambda *a, **k: types.SimpleNamespace(launches=[]))
    art = types.SimpleNamespace(meta={"problem": p.to_dict(), "prep_kernels": {}}, params=("tmap_a", "tmap_b", "tmap_c", "bias"),
                                grid=(s.hopper.ctas, 1, 1))
    hop = tma.HopperGemm(art, s, types.SimpleNamespace(ordinal=0), p.describe())
    hop.tensor_map("a", 0x1000), hop.tensor_map("b", 0x2000), hop.tensor_map("c", 0x3000)
    box_a, box_b, box_c = s.hopper.box_a, s.hopper.box_b, s.hopper.box_c
    assert encoded == [(0x1000, ("tf32", 3000, 512, box_a.rows, box_a.cols)),
                       (0x2000, ("tf32", 2048, 512, box_b.rows, box_b.cols, 3, 2048 * 512)),
                       (0x3000, ("f32", 3000, 2048, box_c.rows, box_c.cols, 3, 3000 * 2048))]
    q = GemmProblem(333, 257, 129, "fp16", True, True, batch=17)
    role = configure(q, "h200").schedule.hopper.operands.a
    assert tma.workspace_bytes(role, 2) == 17 * role.rows * role.cols * 2


def test_tensor_map_encoding_rejects_a_misaligned_batch_stride():
    from nova.runtime import driver, tma
    with pytest.raises(driver.NovaRuntimeError, match=r"TMA needs 16-byte aligned rows, batch stride and base"):
        tma.encode_tiled_2d(0x10000, "bf16", 64, 64, 64, 64, batch=3, batch_stride=64 * 64 + 1)


# --------------------------------------------------------------------------- the CLI
def test_cli_shapes_and_strides():
    from nova.cli.shapes import ShapeError, parse_batch_strides, parse_problem_shape
    assert parse_problem_shape("8x512x512x64") == ((512, 512, 64), {"B": 8})
    assert parse_problem_shape("64") == ((64, 64, 64), {})
    assert parse_batch_strides("0,packed,100") == (0, None, 100)
    assert parse_batch_strides([0, "packed", None]) == (0, None, None)
    for bad in ("0,packed", "x,0,0", "-1,0,0"):
        with pytest.raises(ShapeError, match="bad batch stride"):
            parse_batch_strides(bad)
    with pytest.raises(ShapeError, match=r"bad GEMM shape '0x8x8x8': expected S, SxS, MxNxK or BxMxNxK"):
        parse_problem_shape("0x8x8x8")


def test_explain_matmul_json_states_the_batch(capsys):
    from nova.cli.config import main
    assert main(["explain", "matmul", "4x512x512x64", "--target", "h200", "--dtype", "bf16", "--batch-strides",
                 "0,packed,packed", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch"] == 4 and d["problem"]["batch"] == 4 and d["problem"]["batch_stride_a"] == 0
    assert main(["explain", "matmul", "4x512x512x64", "--target", "h200", "--batch-strides", "packed,0,packed",
                 "--json"]) == 0                                   # packed A and C, one B: the flat GEMM
    flat = json.loads(capsys.readouterr().out)
    assert (flat["batch"], flat["M"]) == (1, 2048)
    units = next(st for st in d["derivation"] if st["step"] == "work units")
    assert units["value"] == d["schedule"]["grid"][0]
    assert main(["explain", "matmul", "4x512x512x64", "--target", "a100", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "gemm 4x512x512x64 bf16 NN" in out and "4 GEMMs in one launch" in out


def test_suite_entries_carry_the_batch(tmp_path):
    import argparse
    from nova.cli.main import make_problem
    from nova.cli.shapes import read_suite_entries
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps([{"B": 3, "M": 64, "N": 48, "K": 32, "trans_b": True, "batch_strides": [0, "packed", None]},
                                 {"model": "m", "batch": 32, "M": 64, "N": 48, "K": 32}]))
    args = argparse.Namespace(trans_a=False, trans_b=False, bias=False, activation="none", out_dtype=None,
                              tf32_fast=False, deterministic=False, batch_strides=None)
    problems = [make_problem(s, "bf16", args, f) for s, f in read_suite_entries(suite)]
    assert problems == [GemmProblem(64, 48, 32, "bf16", False, True, batch=3, batch_stride_a=0),
                        GemmProblem(64, 48, 32, "bf16")]      # a training suite's "batch" is not the GEMM's
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"B": 0, "M": 8, "N": 8, "K": 8}]))
    from nova.cli.shapes import ShapeError
    with pytest.raises(ShapeError, match="B=0 .* must be a positive integer"):
        read_suite_entries(bad)


def test_batched_problems_run_without_thread_block_clusters(monkeypatch):
    """Clusters (hopper.py step 12) walk one GEMM's cluster tiles: a batched problem stays 1x1, even
    under NOVA_CLUSTER, and the derivation says why."""
    p = GemmProblem(4096, 4096, 1024, "bf16", batch=4)
    monkeypatch.setenv("NOVA_CLUSTER", "2x1")
    cfg = configure(p, "h200")
    assert (cfg.schedule.cluster_m, cfg.schedule.cluster_n) == (1, 1)
    assert "2x1: not with a batch" in _steps(cfg)["cluster"].reason
    monkeypatch.delenv("NOVA_CLUSTER")
    assert (configure(p, "h200").schedule.cluster_m, configure(p, "h200").schedule.cluster_n) == (1, 1)


def test_tensor_map_l2_promotion_follows_the_row_pitch(monkeypatch):
    """A GEMM operand's map promotes 256 B where its base and strides are whole 128-byte lines, else 128 B
    (BF16 3000^3's 6000-byte rows: 112.6 -> 97.7 us on the H200, bench/results/h200-2026-12-01/h/call8); attention's maps keep 256 B;
    NOVA_TMA_L2_PROMOTION overrides every map, and a bad value is one clear error."""
    from nova.runtime import tma
    seen = []
    monkeypatch.setattr(tma, "_encode_fn", lambda: lambda *args: seen.append(args[10]) or 0)
    tma.encode_tiled_2d(0x10000, "bf16", 3072, 3072, 64, 64)          # 6144-byte rows
    tma.encode_tiled_2d(0x10000, "bf16", 3000, 3000, 64, 64)          # 6000-byte rows
    tma.encode_tiled_2d(0x10040, "bf16", 3072, 3072, 64, 64)          # a base 64 bytes into a line
    tma.encode_tiled(0x10000, "bf16", (64, 3000, 1, 1), (6000, 6000 * 3000, 6000 * 3000), (64, 64, 1, 1))
    assert seen == [tma.L2_PROMOTION_256B, tma.L2_PROMOTION_128B, tma.L2_PROMOTION_128B, tma.L2_PROMOTION_256B]
    monkeypatch.setenv("NOVA_TMA_L2_PROMOTION", "0")
    tma.encode_tiled_2d(0x10000, "bf16", 3072, 3072, 64, 64)
    assert seen[-1] == 0
    monkeypatch.setenv("NOVA_TMA_L2_PROMOTION", "256")
    with pytest.raises(OptionError, match="NOVA_TMA_L2_PROMOTION='256'"):
        tma.encode_tiled_2d(0x10000, "bf16", 3072, 3072, 64, 64)


@pytest.mark.parametrize("target", ["h100", "h200"])
def test_the_gpu_tests_batched_tma_store_cases_are_the_configurators(target):
    """tests/test_runtime_gpu.py's BATCHED_TMA_STORE_CASES (checked there on a GPU) are the batched cases
    the configurator gives the TMA store (ping-pong picks choose their own epilogue)."""
    from test_runtime_gpu import BATCHED_CASES, BATCHED_TMA_STORE_CASES, STRIDED_CASES, batched_id, batched_problem
    for case in BATCHED_CASES + STRIDED_CASES:
        s = configure(batched_problem(case), target).schedule
        assert s.hopper.tma_store == (case in BATCHED_TMA_STORE_CASES) or s.pingpong, batched_id(case)
