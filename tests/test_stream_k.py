"""Stream-K on the Hopper path (hopper.py step 8), host side: the walk's closed forms
(``schedule.StreamKPlan``) against a brute-force partition, the emitted kernels' index arithmetic
against the same closed forms (a small evaluator of the MLIR's index ops), ptxas on stream-K kernels,
the configurator's decision (explain, JSON, ``NOVA_STREAM_K``) and the oracle's space."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from nova.codegen import CodegenError
from nova.codegen.ptxas import wgmma_hazards
from nova.configurator import GemmProblem, configure
from nova.kernels.gemm import hopper
from nova.kernels.gemm.emit_hopper import build_hopper_module, build_split_reduce_module, check_supported
from nova.kernels.gemm.problem import ProblemError
from nova.kernels.gemm.schedule import Schedule, StreamKPlan

DW = (768, 3072, 16384, "bf16", {"trans_a": True})      # GPT-144M's weight gradient: 72 tiles on 132 SMs


@pytest.fixture
def stream_k(monkeypatch):
    """``stream_k("1")``: configure with NOVA_STREAM_K set from now on."""
    def force(value):
        monkeypatch.setenv("NOVA_STREAM_K", value)
    monkeypatch.delenv("NOVA_STREAM_K", raising=False)
    monkeypatch.setenv("NOVA_HOPPER", "1")
    return force


# ---- the walk's closed forms -----------------------------------------------------------------------
@st.composite
def plans(draw):
    tiles = draw(st.integers(1, 400))
    sk = draw(st.integers(1, tiles))
    ktiles = draw(st.integers(1, 300))
    ctas = draw(st.integers(1, min(300, sk * ktiles)))
    return StreamKPlan(tiles, sk, ktiles, ctas)


@settings(max_examples=300, deadline=None)
@given(plans())
def test_the_walk_covers_every_k_tile_of_every_tile_once(plan):
    """The CTAs' walks (data-parallel tiles whole, then each CTA's [floor(c*I/G), floor((c+1)*I/G))
    cut at tile boundaries) cover every (tile, K tile) exactly once; each stream-K tile's pieces are
    its segments: CTAs first..first+count-1 (``segments``), segment index c - first, below ``slots``;
    a whole tile is its one segment."""
    seen = {}
    pieces: dict[int, list] = {}
    for c in range(plan.ctas):
        walk = plan.walk(c)
        assert [u for u, *_ in walk] == sorted(u for u, *_ in walk)        # tiles in walk order
        for u, begin, count, seg, nseg in walk:
            assert count >= 1 and 0 <= begin and begin + count <= plan.ktiles
            for k in range(begin, begin + count):
                assert (u, k) not in seen, (u, k, c, seen[(u, k)])
                seen[(u, k)] = c
            pieces.setdefault(u, []).append((c, seg, nseg, begin, count))
        lo, hi = plan.cta_range(c)
        assert hi > lo                                                      # every CTA has work
        assert all(plan.owner(i) == c for i in (lo, hi - 1))
    assert len(seen) == plan.tiles * plan.ktiles
    for u, ps in pieces.items():
        if u < plan.dp_tiles:
            assert ps == [(u % plan.ctas, 0, 1, 0, plan.ktiles)]
            continue
        first, count = plan.segments(u - plan.dp_tiles)
        assert [c for c, *_ in ps] == list(range(first, first + count))
        assert [seg for _, seg, *_ in ps] == list(range(count)) and all(n == count for _, _, n, *_ in ps)
        assert count <= plan.slots
        assert (count == 1) == (ps[0][3:] == (0, plan.ktiles))
    assert plan.split_tiles == sum(1 for t in range(plan.sk_tiles) if plan.segments(t)[1] > 1)
    busiest = max(sum(count for _, _, count, *_ in plan.walk(c)) for c in range(plan.ctas))
    assert busiest <= plan.busiest_iters
    assert max(sum(1 for u, *_ in plan.walk(c) if u >= plan.dp_tiles) for c in range(plan.ctas)) <= plan.max_cta_segments


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 800), st.integers(1, 600), st.sampled_from([78, 108, 132]))
def test_the_region_and_grid_rules(tiles, ktiles, sms):
    """``stream_k_region``: all tiles under two waves, else the last partial wave + one full wave
    (the data-parallel tiles make whole waves), none when the tiles make whole waves; the grid gives
    every CTA at least MIN_SLICE_K_TILES iterations (or one, when there are fewer)."""
    sk = hopper.stream_k_region(tiles, sms)
    if tiles % sms == 0:
        assert sk == 0
        return
    assert (tiles - sk) % sms == 0 and 0 < sk <= tiles and (sk == tiles or sk < 2 * sms)
    plan = hopper.stream_k_plan(tiles, ktiles, sms)
    assert plan.ctas <= sms and (plan.dp_tiles == 0 or plan.ctas == sms)
    assert plan.iters // plan.ctas >= min(hopper.MIN_SLICE_K_TILES, plan.iters) or plan.dp_tiles


# ---- the emitted index arithmetic vs the closed forms ------------------------------------------------
_ARITH = re.compile(r"^\s*(%[\w]+) = arith\.(addi|subi|muli|divui|remui|minsi|maxsi|cmpi|andi|constant) (.*)$")
_PRED = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
         "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b, "sle": lambda a, b: a <= b}
_OPS = {"addi": lambda a, b: a + b, "subi": lambda a, b: a - b, "muli": lambda a, b: a * b,
        "divui": lambda a, b: a // b, "remui": lambda a, b: a % b, "minsi": min, "maxsi": max,
        "andi": lambda a, b: a and b}


def evaluate(lines, env):
    """Evaluate the index/i1 arith ops of ``lines`` in order (an op with an unknown operand is skipped)."""
    env = dict(env)
    for line in lines:
        m = _ARITH.match(line)
        if not m:
            continue
        name, op, rest = m.groups()
        if op == "constant":
            v = rest.split(":")[0].strip()
            if re.fullmatch(r"-?\d+", v):
                env[name] = int(v)
            elif v in ("true", "false"):
                env[name] = v == "true"
            continue
        pred = None
        if op == "cmpi":
            pred, rest = rest.split(",", 1)
        args = [a.strip() for a in rest.split(":")[0].split(",")]
        if not all(a in env for a in args):
            continue
        a, b = (env[x] for x in args)
        env[name] = _PRED[pred.strip()](a, b) if op == "cmpi" else _OPS[op](a, b)
    return env


def kernel_walk(text: str, plan: StreamKPlan, bid: int) -> list[tuple]:
    """What the producer's stream-K loop header computes for CTA ``bid``: per %skt iteration
    (tile, first K tile, K tiles, segment, whole tile), by evaluating the emitted MLIR."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if "scf.for %skt" in ln)
    env = evaluate(lines[:head], {"%bid": bid})
    m = re.search(r"scf\.for %skt = (\S+) to (\S+) step", lines[head])
    t0, t1 = (env[v] if v in env else int(v.removeprefix("%c")) for v in m.groups())
    body = lines[head + 1:head + 60]
    out = []
    for t in range(t0, t1):
        e = evaluate(body, {**env, "%skt": t})
        pick = lambda prefix: next(e[k] for k in sorted(e, key=len) if k.startswith(prefix) and k not in env)  # noqa: E731
        out.append((t + plan.dp_tiles, pick("%k_begin"), pick("%k_count"), pick("%segment"), pick("%whole_tile")))
    return out


STREAM_K_SHAPES = [
    (768, 3072, 16384, "bf16", {"trans_a": True}),                       # the dW shape: 72 tiles, all stream-K
    (1000, 600, 5000, "bf16", {"trans_a": True, "bias": True, "activation": "gelu"}),   # tails, K % 64 != 0
    (4000, 4000, 2000, "bf16", {"trans_b": True, "bias": True, "activation": "silu"}),  # hybrid: 264 whole tiles first
    (700, 300, 9000, "tf32", {"trans_a": True, "bias": True}),           # TF32, A through registers or prep
    (1000, 1000, 3000, "tf32", {"activation": "relu"}),                  # TF32 swapped: B^T from registers
    (500, 384, 7000, "bf16", {}),                                        # NN
    (1536, 512, 16384, "fp16", {"trans_a": True}),
    (512, 2048, 16384, "tf32", {"trans_a": True}),                       # f32 output
    (2304, 768, 4000, "bf16", {"trans_a": True, "trans_b": True, "out_dtype": "f32"}),  # TT, f32 out of bf16
]


def forced_schedule(M, N, K, dtype, extra) -> tuple[GemmProblem, Schedule]:
    p = GemmProblem(M, N, K, dtype, **extra)
    s = configure(p, "h200").schedule
    assert s.stream_k, (p.describe(), s)
    return p, s


@pytest.mark.parametrize("M,N,K,dtype,extra", STREAM_K_SHAPES, ids=str)
def test_the_kernel_and_the_reduction_compute_the_closed_forms(stream_k, M, N, K, dtype, extra):
    """The emitted GEMM's stream-K loop (evaluated for several CTAs) walks ``StreamKPlan.walk``'s
    pieces, and the reduction kernel's per-element test and segment count (evaluated on elements of
    every tile) are the tile's ``segments``."""
    stream_k("1")
    p, s = forced_schedule(M, N, K, dtype, extra)
    plan = s.stream_k_plan(p.M, p.N, p.K)
    text = build_hopper_module(p, s)
    assert f"%W: memref<{plan.slots * p.M}x{p.N}xf32>" in text
    for c in sorted({0, 1, plan.ctas // 3, plan.ctas // 2, plan.ctas - 1}):
        want = [(u, b, n, seg, nseg == 1) for u, b, n, seg, nseg in plan.walk(c) if u >= plan.dp_tiles]
        assert kernel_walk(text, plan, c) == want, c
    reduce = build_split_reduce_module(p, s).splitlines()
    cut = next(i for i, ln in enumerate(reduce) if "scf.if %split_tile" in ln)
    v = s.vector_c
    swap = s.swap_ab
    tile_i, tile_j = (s.block_n, s.block_m) if swap else (s.block_m, s.block_n)
    tiles_i, tiles_j = -(-(p.N if swap else p.M) // tile_i), -(-(p.M if swap else p.N) // tile_j)
    gm = max(1, min(s.group_m, tiles_i))
    for u in range(0, plan.tiles, max(1, plan.tiles // 40)):
        # the tile at walk index u (tile_origin's group-M order), one of its elements
        group, inside = divmod(u, gm * tiles_j)
        rows = min(tiles_i - group * gm, gm)
        pi, pj = group * gm + inside % rows, inside // rows
        i, j = min(pi * tile_i + 5, (p.N if swap else p.M) - 1), pj * tile_j + 2 * v
        j = min(j, (p.M if swap else p.N) - 1)
        row, col = (j, i) if swap else (i, j)
        col -= col % v
        e = row * p.N + col
        env = evaluate(reduce[:cut], {"%bid": e // v // 256, "%tid": e // v % 256})
        assert env["%e"] == e
        segments = plan.segments(u - plan.dp_tiles)[1] if u >= plan.dp_tiles else 1
        assert env["%split_tile"] == (segments > 1), (u, e)
        if segments > 1:
            assert env["%segments"] == segments, (u, e)


@pytest.mark.parametrize("M,N,K,dtype,extra", STREAM_K_SHAPES, ids=str)
def test_stream_k_kernels_assemble_without_spills(stream_k, M, N, K, dtype, extra):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    stream_k("1")
    p, s = forced_schedule(M, N, K, dtype, extra)
    art = compile_gemm(p, s)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert not wgmma_hazards(r), r["ptxas_info"]
    assert art.params == ("tmap_a", "tmap_b", "C", "W") + (("bias",) if p.bias else ()) and not art.zero_output
    assert art.grid == (s.hopper.ctas, 1, 1)
    reduce = art.meta["reduce_kernel"]
    assert reduce["resources"]["spill_store_bytes"] == 0
    assert reduce["params"] == ["W", "C"] + (["bias"] if p.bias else [])


# ---- the configurator ------------------------------------------------------------------------------
def test_the_dw_shape_keeps_split_k_because_stream_k_streams_from_dram(stream_k):
    """768x3072x16384 BF16 dW: stream-K's CTAs sit at different K offsets and share no K tile, so
    with A and B beyond half of L2 every iteration streams from DRAM (measured on the H200: 191 us
    against split-K's 171, and 276 vs 172 in the suite harness, bench/results/h200-2026-12-01/e); the model prices that and
    keeps split-K (2 slices of 192x192 tiles, three consumer warpgroups).  Forced, the
    walk is the closed form's and its DRAM term is iters x (block_i + n) x 128 B."""
    from nova.hwmodel import get_target
    from nova.kernels.gemm.hopper import stream_k_terms
    p = GemmProblem(*DW[:4], **DW[4])
    cfg = configure(p, "h200")
    assert not cfg.schedule.stream_k and cfg.schedule.split_k == 2 and cfg.schedule.block_n == 192
    stream_k("1")
    forced = configure(p, "h200")
    s = forced.schedule
    assert s.stream_k and s.split_k == 1 and s.hopper.ctas == 132
    assert not s.hopper.tma_store and s.persistent and (s.cluster_m, s.cluster_n) == (1, 1)
    row = next(st for st in forced.derivation if st.step == "split-K")
    assert row.value == "stream-K"
    for needle in ("G = 132 CTAs", "floor(((i+1)*G - 1)/I)", "a reduction kernel adds in segment order"):
        assert needle in row.reason, needle
    assert forced.prediction.time_us > cfg.prediction.time_us
    gpu = get_target("h200")
    terms = stream_k_terms(p, gpu, 128, 256)
    assert terms["dram"] == pytest.approx((18432 * (128 + 256) * 128 + p.M * p.N * p.out_bytes) / gpu.dram_bw)
    assert Schedule.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert "stream_k_tiles" not in cfg.schedule.to_dict()          # other schedules keep their dict (and key)


def test_explain_json_and_table_show_the_walk():
    env = {**os.environ, "NOVA_HOPPER": "1", "NOVA_STREAM_K": "1"}
    args = [sys.executable, "-m", "nova.cli.config", "explain", "matmul", "768x3072x16384", "--dtype", "bf16",
            "--trans-a", "--target", "h200"]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    sk_tiles = d["schedule"]["stream_k_tiles"]
    assert sk_tiles > 0 and d["schedule"]["split_k"] == 1
    assert any(st["step"] == "split-K" and st["value"] == "stream-K" for st in d["derivation"])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    text = " ".join(re.sub("[\u2500-\u257f]", " ", r.stdout).split())       # the table's cells, unwrapped
    assert f"stream-K over the last {sk_tiles} tiles:" in text and "K-tile iterations on 132 CTAs" in text
    assert "added in order by a reduction kernel (deterministic)" in text


def test_forced_stream_k_where_not_allowed_is_one_clear_line():
    """NOVA_STREAM_K=1 on a batched problem: one 'error:' line, exit 2; a bad value likewise."""
    base = [sys.executable, "-m", "nova.cli.config", "explain", "matmul"]
    rest = ["--dtype", "bf16", "--target", "h200"]
    for shape, value, message in (("4x512x512x16384", "1", "cannot run stream-K"),
                                  ("512x512x16384", "2", "NOVA_STREAM_K='2': expected auto, or 1")):
        r = subprocess.run(base + [shape] + rest, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NOVA_HOPPER": "1", "NOVA_STREAM_K": value})
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize("target,env,why", [("rtx3060", {}, "rtx3060 has no wgmma/TMA"),
                                           ("a100", {}, "a100 has no wgmma/TMA"),
                                           ("h200", {"NOVA_HOPPER": "0"}, "NOVA_HOPPER=0 rules them out")])
def test_forced_stream_k_on_the_mma_sync_path_is_one_line_not_ignored(target, env, why):
    """Stream-K is a walk of the wgmma kernels: forcing it where the mma.sync kernels run is refused,
    in one line saying why they run, not a schedule without it."""
    r = subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", "matmul", "4096", "--target", target],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "NOVA_STREAM_K": "1", **env})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and r.stdout == "", r.stderr
    assert lines[0] == (f"nova-config: error: NOVA_STREAM_K=1: gemm 4096x4096x4096 tf32 NN -> f32 cannot run stream-K on "
                        f"{target}: only the wgmma kernels have it, and {why} (unset NOVA_STREAM_K)")


def test_forced_stream_k_leaves_a_named_mma_sync_family_alone(stream_k):
    """A caller that names the mma.sync family (the schedule space, reports) gets its schedule."""
    stream_k("1")
    p = GemmProblem(4096, 4096, 4096, "tf32")
    with pytest.raises(ProblemError, match="NOVA_STREAM_K=1: .* cannot run stream-K on a100"):
        configure(p, "a100")
    assert not configure(p, "a100", family="mma.sync").schedule.stream_k


def test_forced_stream_k_in_python_and_codegen_checks(stream_k):
    stream_k("1")
    with pytest.raises(ProblemError, match="not with a batch"):
        configure(GemmProblem(512, 512, 16384, "bf16", trans_a=True, batch=4), "h200")
    # a stream-K schedule handed to the code generator with a problem it does not fit: one clear line
    p, s = forced_schedule(*DW[:4], DW[4])
    batched = GemmProblem(*DW[:4], **DW[4], batch=2)
    with pytest.raises(CodegenError, match="stream-K with a batch of 2") as e:
        check_supported(batched, s)
    assert "\n" not in str(e.value)


def test_no_stream_k_means_the_old_pick(stream_k):
    """NOVA_STREAM_K=0: step 8 never prices stream-K (the pick of before)."""
    stream_k("0")
    s = configure(GemmProblem(*DW[:4], **DW[4]), "h200").schedule
    assert not s.stream_k and s.split_k > 1 and s.split_workspace


def test_the_space_holds_stream_k_candidates(stream_k):
    """The oracle's space (nova tune --exhaustive) enumerates stream-K schedules the code generator
    accepts, among them a stream-K walk of the configurator's own tile."""
    from nova.kernels.gemm.space import enumerate_schedules, label
    p = GemmProblem(*DW[:4], **DW[4])
    space = enumerate_schedules(p, "h200")
    sk = [s for s in space if s.stream_k]
    assert sk and all(s.split_k == 1 and not s.hopper.tma_store for s in sk)
    for s in sk:
        check_supported(p, s)
    pick = configure(p, "h200").schedule
    assert any((s.block_m, s.block_n) == (pick.block_m, pick.block_n) for s in sk)
    assert all("streamk" in label(s) for s in sk)
