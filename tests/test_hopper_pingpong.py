"""Ping-pong consumers on the Hopper path (hopper.py's consumers step, emit_hopper's "Ping-pong
consumers"), host side: the ring + ordering-barrier protocol as a model under random interleavings,
the configurator's pricing, forcing and explain rows, and ptxas on the kernels (no spills, no wgmma
serialisation)."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from nova.codegen import CodegenError
from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.kernels.gemm import hopper
from nova.kernels.gemm.emit_hopper import build_hopper_module, check_supported
from nova.kernels.gemm.hopper import (PINGPONG_MIN_STAGES, k_tiles, operand_plan, pingpong_depth, pingpong_ring_cap,
                                      pingpong_terms, ring_depth, staging_bytes, total_time, wgmma_schedule)
from nova.kernels.gemm.problem import ProblemError
from nova.kernels.gemm.schedule import Schedule
from nova.kernels.gemm.space import enumerate_schedules
from mbarrier_model import Mbarrier

from nova.codegen.ptxas import wgmma_hazards   # wgmmas serialised, arrive/wait injected, setmaxnreg ignored
H200 = get_target("h200")


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("NOVA_HOPPER", "1")
    for name in ("NOVA_PINGPONG", "NOVA_STREAM_K", "NOVA_CLUSTER"):
        monkeypatch.delenv(name, raising=False)

    def set_(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return set_


def pingpong_schedule(p, slabs, n, epilogue, stages=None):
    ops = operand_plan(p)
    depth = stages or pingpong_depth(p, H200, 64 * slabs, n, epilogue)
    return wgmma_schedule(p, H200, ops, 2, n, 1, depth, 8, epilogue=epilogue, pingpong=slabs)


# ---- the protocol: producer + two consumer warpgroups, ring of S slots, ordering barriers ------------


class StaleRead(AssertionError):
    pass


def pingpong_run(stages, units, ktiles, boxes, seed, ordered=True):
    """One random interleaving of the ping-pong kernel's protocol in one CTA: the producer walks the
    units' K tiles in order (iteration it = j x ktiles + k): waits empty[s] (flipped parity),
    arrive.expect_tx(full[s]), its boxes land later one by one; consumer warpgroup w takes units
    j = w, w + 2, ...: before unit j > 0 it bar.syncs on its ordering barrier (``ordered``), waits
    full[s] for each K tile (the slot must then hold that iteration's boxes, else StaleRead), releases
    the previous K tile's slot (4 warps: 4 arrivals, landing in any order), after its last K tile
    bar.arrives on the other's barrier if the CTA has a unit j + 1, then releases the last slot.
    Named barriers: a bar.arrive while the previous one is still unmatched would complete a phase
    without the waiter (asserted never to happen); every arrival is matched at the end."""
    rng = random.Random(seed)
    full = [Mbarrier(1) for _ in range(stages)]
    empty = [Mbarrier(4) for _ in range(stages)]
    data = [[None] * boxes for _ in range(stages)]
    reading = [None] * stages
    iters = units * ktiles
    prod = 0
    # consumer state: the unit index j, the K tile k, the slot held for release, phase of its program
    cons = [{"j": w, "k": 0, "held": None, "state": "start"} for w in (0, 1)]
    arrived = [False, False]            # ordering barrier w: the other warpgroup's arrival, not yet synced
    events = []

    def release(s):
        reading[s] = None
        events.extend(("empty", s) for _ in range(4))

    while True:
        moves = [("event", i) for i in range(len(events))]
        if prod < iters and empty[prod % stages].passed(((prod // stages) & 1) ^ 1):
            moves.append(("produce", None))
        for w, c in enumerate(cons):
            if c["state"] == "done":
                continue
            if c["state"] == "start":
                if c["j"] >= units:
                    moves.append(("finish", w))
                elif c["j"] == 0 or not ordered or arrived[w]:
                    moves.append(("begin", w))
            elif c["state"] == "loop":
                it = c["j"] * ktiles + c["k"]
                if full[it % stages].passed((it // stages) & 1):
                    moves.append(("consume", w))
        if not moves:
            assert all(c["state"] == "done" for c in cons) and prod == iters, f"deadlock: {prod}, {cons}"
            assert not any(arrived), "an ordering barrier left half-complete"
            return
        kind, x = rng.choice(moves)
        if kind == "produce":
            s = prod % stages
            full[s].arrive(expect_tx=boxes)
            events.extend(("land", s, b, prod) for b in range(boxes))
            prod += 1
        elif kind == "begin":
            c = cons[x]
            if c["j"] > 0 and ordered:
                arrived[x] = False      # bar.sync consumes the other warpgroup's arrival
            c["state"], c["k"] = "loop", 0
        elif kind == "consume":
            c = cons[x]
            it = c["j"] * ktiles + c["k"]
            s = it % stages
            if data[s] != [it] * boxes or reading[s] is not None:
                raise StaleRead(f"warpgroup {x} passed full[{s}] for iteration {it}; slot holds {data[s]}")
            reading[s] = it
            if c["held"] is not None:
                release(c["held"])
            c["held"] = s
            c["k"] += 1
            if c["k"] == ktiles:        # every K tile waited for: signal, retire, release, next unit
                if ordered and c["j"] + 1 < units:
                    assert not arrived[1 - x], "a second bar.arrive before the waiter's bar.sync"
                    arrived[1 - x] = True
                release(c["held"])
                c["held"], c["j"], c["state"] = None, c["j"] + 2, "start"
        elif kind == "finish":
            cons[x]["state"] = "done"
        else:
            ev = events.pop(x)
            if ev[0] == "land":
                _, s, b, it = ev
                assert reading[s] is None, f"iteration {it} landed in slot {s} while {reading[s]} is read"
                data[s][b] = it
                full[s].complete_tx(1)
            else:
                empty[ev[1]].arrive()


def test_the_pingpong_ring_protocol_holds_under_any_interleaving():
    """With the ordering barriers every wait reads its own iteration's boxes, nothing lands in a slot
    being read, no deadlock, no barrier left half-complete: across ring depths, K-tile counts (fewer
    and more than the stages) and unit counts (odd: the last unit's warpgroup has no one to signal)."""
    for stages in (2, 3, 4, 7):
        for ktiles in (1, 2, 3, 8):
            for units in (1, 2, 3, 6):
                for seed in range(12):
                    pingpong_run(stages, units, ktiles, 2, seed)


def test_without_the_ordering_the_parity_waits_read_stale_slots():
    """The same protocol without the ordering barriers: the second warpgroup's parity wait on unit 1
    passes on a slot whose previous round has not landed (emit_hopper's docstring), so some
    interleavings read stale data: the barrier is required for correctness, not only for speed."""
    stale = 0
    for seed in range(200):
        try:
            pingpong_run(4, 4, 8, 2, seed, ordered=False)
        except StaleRead:
            stale += 1
    assert stale > 0


# ---- the schedule and the kernel ------------------------------------------------------------------
def test_pingpong_schedule_keys_and_round_trip(env):
    p = GemmProblem(16384, 2048, 512, "bf16", trans_b=True)
    coop = configure(GemmProblem(8192, 8192, 8192, "bf16"), "h200").schedule
    assert not coop.pingpong and "consumers" not in coop.to_dict()       # the cooperative dict (and key) as before
    s = pingpong_schedule(p, 2, 128, "tma_store")
    d = s.to_dict()
    assert d["consumers"] == "pingpong" and Schedule.from_dict(d) == s
    assert (s.block_m, s.block_n, s.consumer_warpgroups, s.tile_slabs) == (128, 128, 2, 2)
    assert s.hopper.ring.staging == staging_bytes(2, "tma_store")      # one staging pair per warpgroup


def test_pingpong_mlir_has_the_ordering_and_one_warpgroup_per_slot(env):
    p = GemmProblem(1000, 999, 1001, "fp16", bias=True, activation="gelu")
    s = pingpong_schedule(p, 2, 128, "registers")
    text = build_hopper_module(p, s)
    assert "nvvm.barrier id = %order_mine number_of_threads = %c256_i32" in text
    assert "nvvm.barrier.arrive id = %order_other number_of_threads = %c256_i32" in text
    assert "%pp_it0 = arith.muli %wu, %c" in text and "ping-pong consumers (128x128 per warpgroup" in text
    assert "gpu.shuffle idx %wu_i32, %c0_i32, %c32_i32" in text        # the warpgroup index, warp-uniform
    assert ", %c4, predicate = %is_t0" in text                          # empty[s]: one warpgroup's 4 warps
    assert text.count('"nvvm.wgmma.mma_async"') == 2 * (64 // 16)     # 2 slabs x 4 k-steps per K tile
    coop = wgmma_schedule(p, H200, operand_plan(p), 2, 128, 1, ring_depth(H200, 128, 128), 8)   # cooperative
    assert coop.consumers == "cooperative" and "order_mine" not in build_hopper_module(p, coop)


def test_codegen_refuses_pingpong_where_the_walk_does_not_fit(env):
    """A ping-pong schedule with split-K, stream-K, a cluster or one CTA per unit: one clear line."""
    import dataclasses
    p = GemmProblem(4096, 4096, 4096, "bf16")
    s = pingpong_schedule(p, 2, 128, "registers")
    for change, message in (({"split_k": 2, "split_reduction": "workspace"}, "not with split-K"),
                            ({"persistent": False}, "not with one CTA per work unit"),
                            ({"cluster_m": 2}, "not with a thread-block cluster")):
        with pytest.raises(CodegenError, match=message) as e:
            check_supported(p, dataclasses.replace(s, **change))
        assert "\n" not in str(e.value)
    with pytest.raises(ProblemError, match="not with split-K"):
        wgmma_schedule(p, H200, operand_plan(p), 2, 128, 2, 4, 8, reduction="workspace", pingpong=2)


# ---- the configurator -----------------------------------------------------------------------------
def test_the_model_hides_all_but_the_last_epilogue(env):
    """pingpong_terms: U units per SM, the epilogue e of a unit under the other warpgroup's K loop m
    (exposed (e - m)/2 per unit where e > m), the last one's e whole."""
    p = GemmProblem(16384, 2048, 512, "bf16", trans_b=True)
    t = pingpong_terms(p, H200, 2, 128, None, ("registers", "tma_store"))
    for e in ("registers", "tma_store"):
        x = t[e]
        assert x["units_per_sm"] == 16384 * 2048 // (128 * 128) // 132 + 1
        hidden = x["unit_epilogue"] < x["unit_mainloop"]
        assert hidden
        expected = x["unit_epilogue"] + x["units_per_sm"] * hopper.PINGPONG_HANDOFF_CLK / H200.clock_hz
        assert x["epilogue"] == pytest.approx(expected)
    # the cooperative epilogue is paid per tile: ping-pong's is a small fraction of it
    env(NOVA_PINGPONG="0")
    coop = configure(p, "h200")
    assert t["registers"]["epilogue"] * 1e6 < coop.prediction.terms_us["epilogue"] / 4


def test_forcing_and_excluding_pingpong(env):
    p = GemmProblem(16384, 2048, 512, "bf16", trans_b=True)
    env(NOVA_PINGPONG="1")
    c = configure(p, "h200")
    assert c.schedule.pingpong and [st for st in c.derivation if st.step == "consumers"]
    row = next(st for st in c.derivation if st.step == "consumers")
    assert row.value.startswith("ping-pong") and "NOVA_PINGPONG=1 forces" in row.reason and "U = " in row.formula
    steps = [st.step for st in c.derivation]
    assert steps.index("epilogue") < steps.index("consumers") < steps.index("stages")
    assert c.prediction.time_us == pytest.approx(total_time(pingpong_terms(
        p, H200, c.schedule.tile_slabs, c.schedule.mma.n, c.schedule.hopper.operands, (c.schedule.hopper.epilogue,),
        c.schedule.stages)[c.schedule.hopper.epilogue]) * 1e6)
    env(NOVA_PINGPONG="0")
    c0 = configure(GemmProblem(4096, 4096, 256, "bf16"), "h200")         # the model's ping-pong pick, excluded
    assert not c0.schedule.pingpong
    assert next(st for st in c0.derivation if st.step == "consumers").reason.startswith("NOVA_PINGPONG=0")


def test_automatic_picks_and_the_switch(env, monkeypatch):
    """With AUTO_PINGPONG (ping-pong measured without ptxas's serialisation, bench/results/h200-2026-12-01/d/call5) the model
    picks it where the cooperative tile's exposed epilogue outweighs the smaller tile's costs (the
    short-K forwards and the LM head: 1.04-1.20x measured, bench/results/h200-2026-12-01/d) and keeps the
    cooperative tile (with no consumers row: its derivation as before) where not (a deep-K square, the
    register-fed TF32 dX: 0.94-1.0x measured); AUTO_PINGPONG = False leaves every pick cooperative."""
    assert hopper.AUTO_PINGPONG
    short = GemmProblem(4096, 4096, 256, "bf16")
    lm_head = GemmProblem(16384, 32768, 512, "bf16", trans_b=True)
    forward_tf32 = GemmProblem(16384, 3072, 768, "tf32", trans_b=True, bias=True)
    square, dx_tf32 = GemmProblem(8192, 8192, 8192, "bf16"), GemmProblem(16384, 2048, 512, "tf32")
    for p in (short, lm_head, forward_tf32):
        c = configure(p, "h200")
        assert c.schedule.pingpong, p.describe()
        row = next(st for st in c.derivation if st.step == "consumers")
        assert row.value.startswith("ping-pong") and f"{hopper.COOPERATIVE_KLOOP_TENSOR:g} of the tensor peak" in row.reason
    for p in (square, dx_tf32):
        c = configure(p, "h200")
        assert not c.schedule.pingpong and "consumers" not in [st.step for st in c.derivation], p.describe()
    monkeypatch.setattr(hopper, "EXPLAIN_PINGPONG_ALWAYS", True)
    row = next(st for st in configure(square, "h200").derivation if st.step == "consumers")
    assert row.value == "cooperative" and "not predicted faster" in row.reason
    monkeypatch.setattr(hopper, "AUTO_PINGPONG", False)
    assert not configure(short, "h200").schedule.pingpong and not configure(lm_head, "h200").schedule.pingpong


def test_the_lm_heads_run_128x192_pingpong(env):
    """The consumers step's fitted rule (ping-pong K loop at 0.80 of the peak, the contention of close
    limits on both sides): the LM heads take 128x192 ping-pong tiles (GPT-144M BF16: cooperative 2108 ->
    1814 us measured, 1.01x XLA), the deep-K dX and the squares stay cooperative (measured faster there)."""
    for p in (GemmProblem(16384, 50304, 768, "bf16", trans_b=True), GemmProblem(16384, 32768, 512, "bf16", trans_b=True),
              GemmProblem(16384, 50304, 768, "tf32", trans_b=True)):
        s = configure(p, "h200").schedule
        assert s.pingpong and (s.tile_slabs, s.mma.n) == (2, 192), p.describe()
    for p in (GemmProblem(16384, 768, 50304, "bf16"), GemmProblem(16384, 512, 32768, "bf16"),
              GemmProblem(8192, 8192, 8192, "bf16"), GemmProblem(3000, 3000, 3000, "bf16"),
              GemmProblem(6144, 6144, 6144, "bf16", trans_b=True)):
        assert not configure(p, "h200").schedule.pingpong, p.describe()


def test_contention_is_zero_where_one_limit_dominates():
    """||(mma, L2, ring)||_8 - max: 0 with one limit alone, (3^(1/8) - 1) x max with three equal ones, never
    negative, and more for the tile whose L2 term is closer to its tensor term."""
    from nova.kernels.gemm.hopper import CONTENTION_NORM, contention
    assert contention({"mma": 1.0, "l2": 0.0, "ring": 0.0}) == 0.0
    assert contention({"mma": 1.0, "l2": 1.0, "ring": 1.0}) == pytest.approx(3 ** (1 / CONTENTION_NORM) - 1)
    assert contention({"mma": 1.0, "l2": 0.99, "ring": 0.5}) > contention({"mma": 1.0, "l2": 0.8, "ring": 0.5}) > 0


def test_the_register_rule_of_wide_pingpong_tiles(env):
    """128x192 ping-pong tiles (192 accumulators) only with a plain TMA-store epilogue and X in shared
    memory, unbatched: ptxas spilled with a bias in the 16-bit TMA store, with a register-fed X (TF32 NN),
    with the register epilogue of a C whose rows the TMA cannot store (1001 wide) and batched, so those keep
    CONSUMER_OVERHEAD_REGS and have no 128x192 tile.  If a newer ptxas stops spilling, this says so."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.hopper import pingpong_tiles
    plain, bias = GemmProblem(16384, 3072, 768, "bf16", trans_b=True), GemmProblem(16384, 3072, 768, "bf16", trans_b=True, bias=True)
    regs_fed, odd_c = GemmProblem(16384, 3072, 768, "tf32"), GemmProblem(1000, 1001, 520, "bf16", trans_a=True)
    batched = GemmProblem(1000, 1152, 256, "bf16", trans_b=True, batch=3)
    assert (2, 192) in pingpong_tiles(plain, H200, operand_plan(plain), 256)
    for p in (bias, regs_fed, odd_c, batched):
        assert (2, 192) not in pingpong_tiles(p, H200, operand_plan(p), 256), p.describe()
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    for p in (bias, batched):
        r = compile_gemm(p, pingpong_schedule(p, 2, 192, "tma_store")).resources
        assert r["spill_store_bytes"] > 0, f"ptxas no longer spills 128x192 {p.describe()}: PINGPONG_OVERHEAD_REGS could cover it"


def test_forcing_a_pingpong_tile(env):
    """NOVA_PINGPONG=ROWSxN forces ping-pong on that warpgroup tile, or says in one line which tiles fit."""
    env(NOVA_PINGPONG="128x192")
    s = configure(GemmProblem(16384, 2048, 512, "bf16", trans_b=True), "h200").schedule
    assert s.pingpong and (s.tile_slabs, s.mma.n) == (2, 192)
    with pytest.raises(ProblemError, match=r"NOVA_PINGPONG=128x192: .* the tiles its registers and extents allow are "
                                           r"64x256, .*128x128"):
        configure(GemmProblem(16384, 2048, 512, "bf16", trans_b=True, bias=True), "h200")
    env(NOVA_PINGPONG="96x192")
    with pytest.raises(ProblemError, match="ROWSxN with ROWS one of 64, 128"):
        configure(GemmProblem(16384, 2048, 512, "bf16", trans_b=True), "h200")


def test_forcing_errors_are_one_line(env):
    base = [sys.executable, "-m", "nova.cli.config", "explain", "matmul"]
    rest = ["--dtype", "bf16", "--target", "h200"]
    for shape, extra, message in (
            ("512x512x16384", {"NOVA_PINGPONG": "2"}, "NOVA_PINGPONG='2': expected auto, 1/0"),
            ("512x512x16384", {"NOVA_PINGPONG": "1", "NOVA_STREAM_K": "1"}, "not with stream-K"),
            ("4096x4096x4096", {"NOVA_PINGPONG": "1", "NOVA_CLUSTER": "2x1"}, "not with a thread-block cluster")):
        r = subprocess.run(base + [shape] + rest, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NOVA_HOPPER": "1", **extra})
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize("value", ["1", "128x192"])
@pytest.mark.parametrize("target,extra,why", [("rtx3060", {}, "rtx3060 has no wgmma/TMA"),
                                             ("a100", {}, "a100 has no wgmma/TMA"),
                                             ("h200", {"NOVA_HOPPER": "0"}, "NOVA_HOPPER=0 rules them out")])
def test_forced_pingpong_on_the_mma_sync_path_is_one_line_not_ignored(env, value, target, extra, why):
    """Ping-pong consumers are warpgroups of the wgmma kernels: forcing them where the mma.sync kernels
    run is refused in one line saying why, not a schedule without them."""
    r = subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", "matmul", "4096", "--target", target,
                        "--json"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NOVA_PINGPONG": value, **extra})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and r.stdout == "", r.stderr
    assert lines[0] == (f"nova-config: error: NOVA_PINGPONG={value}: gemm 4096x4096x4096 tf32 NN -> f32 cannot run "
                        f"ping-pong consumers on {target}: only the wgmma kernels have them, and {why} "
                        "(unset NOVA_PINGPONG)")


def test_pingpong_ruled_out_on_the_mma_sync_path_is_no_error(env):
    env(NOVA_PINGPONG="0")
    assert not configure(GemmProblem(4096, 4096, 4096, "tf32"), "a100").schedule.pingpong


def test_explain_json_shows_the_pingpong_schedule(env):
    r = subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", "matmul", "16384x2048x512", "--dtype",
                        "bf16", "--trans-b", "--target", "h200", "--json"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "NOVA_HOPPER": "1", "NOVA_PINGPONG": "1"})
    import json
    d = json.loads(r.stdout)
    assert d["schedule"]["consumers"] == "pingpong"
    assert any(st["step"] == "consumers" and st["value"].startswith("ping-pong") for st in d["derivation"])
    text = subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", "matmul", "16384x2048x512", "--dtype",
                           "bf16", "--trans-b", "--target", "h200"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NOVA_HOPPER": "1", "NOVA_PINGPONG": "1", "COLUMNS": "200"}).stdout
    assert "ping-pong" in text and "consumers" in text


def test_the_space_holds_pingpong_candidates(env):
    from nova.kernels.gemm.space import enumerate_schedules, label
    p = GemmProblem(16384, 2048, 512, "bf16", trans_b=True)
    pp = [s for s in enumerate_schedules(p, "h200") if s.pingpong]
    assert pp and all(label(s).endswith(" pp") for s in pp)
    assert {(s.tile_slabs, s.mma.n) for s in pp} >= {(1, 256), (2, 128)}
    assert {s.hopper.epilogue for s in pp} == {"registers", "tma_store"}
    for s in pp[::17]:
        check_supported(p, s)
    assert max(s.stages for s in pp) <= pingpong_ring_cap(p) == 8          # a unit's K tiles (512 / 64)


def test_a_pingpong_ring_deeper_than_a_units_k_tiles_is_refused_in_one_line(env):
    """8 stages for 4 K tiles computed wrong results on the H100 (``pingpong_ring_cap``): the derivation
    keeps the ring within the K tiles, and the code generator refuses a deeper one (a forced schedule)."""
    from nova.kernels.gemm.emit_hopper import check_supported
    p = GemmProblem(300, 200, 256, "bf16", trans_b=True, batch=17)
    env(NOVA_PINGPONG="64x64")
    s = configure(p, "h100").schedule
    assert s.pingpong and s.stages == pingpong_ring_cap(p) == 4
    with pytest.raises(CodegenError, match="a ring of 8 stages for 4 K tiles"):
        check_supported(p, pingpong_schedule(p, 1, 64, "tma_store", stages=8))
    with pytest.raises(CodegenError, match="a ring of 3 stages for 4 K tiles"):
        check_supported(p, pingpong_schedule(p, 1, 64, "tma_store", stages=3))


@pytest.mark.parametrize("M, N, K, options", [(4000, 4004, 64, {"trans_b": True}),
                                              (1023, 1025, 40, {"bias": True, "activation": "gelu"}),
                                              (4096, 4096, 128, {"out_dtype": "f32"})])
def test_pingpong_needs_four_k_tiles(env, M, N, K, options):
    """Ping-pong with fewer K tiles than PINGPONG_MIN_STAGES computed wrong results or faulted on the H100
    (2 stages for 1 K tile: bench/results/h100-2026-12-07/run128-h100): never picked, and NOVA_PINGPONG=1
    is refused in one line naming the K tiles."""
    p = GemmProblem(M, N, K, "bf16", **options)
    assert k_tiles(p) < PINGPONG_MIN_STAGES
    for target in ("h100", "h200"):
        assert not configure(p, target).schedule.pingpong
        assert not any(s.pingpong for s in enumerate_schedules(p, target))
    env(NOVA_PINGPONG="1")
    with pytest.raises(ProblemError, match=f"fewer than {PINGPONG_MIN_STAGES} K tiles a unit") as err:
        configure(p, "h100")
    assert "\n" not in str(err.value)


# ---- ptxas ------------------------------------------------------------------------------------------
PTXAS_CASES = [   # (M, N, K, dtype, problem options, slabs, N, epilogue)
    (16384, 2048, 512, "bf16", {"trans_b": True}, 2, 128, "tma_store"),       # GPT-42M's MLP forward
    (16384, 2048, 512, "bf16", {"trans_b": True}, 1, 256, "registers"),
    (16384, 2048, 512, "bf16", {}, 2, 128, "tma_store"),                      # NN: B by the transpose bit
    (1000, 999, 1001, "fp16", {"bias": True, "activation": "gelu"}, 2, 128, "registers"),   # tails in M, N, K
    (3000, 5000, 700, "fp16", {"trans_b": True, "bias": True, "activation": "silu"}, 1, 256, "tma_store"),
    (4096, 4096, 4096, "tf32", {}, 1, 256, "registers"),                      # NN: swapped, X from registers
    (4095, 4100, 1000, "tf32", {"bias": True}, 1, 256, "tma_store"),          # swapped, ragged, bias along N
    (3000, 5000, 700, "tf32", {"trans_b": True, "bias": True, "activation": "relu"}, 2, 128, "tma_store"),
    (4000, 4004, 700, "bf16", {"trans_a": True, "trans_b": True, "out_dtype": "f32"}, 2, 128, "tma_store"),
    (1000, 1000, 300, "bf16", {"bias": True}, 1, 64, "tma_store"),            # one staging step per tile
    (4096, 4096, 4000, "tf32", {}, 1, 256, "registers"),                      # register-fed, odd K-tile count
    (4096, 4096, 4000, "tf32", {}, 2, 64, "registers"),                       # two register-fed slabs, odd tail
    (1000, 1000, 1000, "tf32", {"trans_a": True, "trans_b": True}, 2, 64, "tma_store"),   # A^T from registers
    (16384, 50304, 768, "bf16", {"trans_b": True}, 2, 192, "tma_store"),     # GPT-144M's LM head: 192 accumulators
    (16384, 3072, 768, "bf16", {}, 2, 192, "tma_store"),                     # NN dX, B by the transpose bit
    (3000, 5000, 700, "tf32", {"trans_b": True}, 2, 192, "tma_store"),       # TF32, ragged
    (1000, 1024, 520, "bf16", {"trans_a": True}, 2, 192, "tma_store"),       # A^T (MN-major A), ragged M and K
]


@pytest.mark.parametrize("case", PTXAS_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[5]}x{c[6]}-{c[7]}")
def test_pingpong_kernels_assemble_clean(env, case):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    M, N, K, dtype, extra, slabs, n, epilogue = case
    p = GemmProblem(M, N, K, dtype, **extra)
    s = pingpong_schedule(p, slabs, n, epilogue)
    art = compile_gemm(p, s)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert not wgmma_hazards(r), r["ptxas_info"]
    assert "bar.arrive" in art.ptx and "wgmma.mma_async" in art.ptx
    assert art.block == (384, 1, 1) and art.smem_bytes == s.smem_bytes <= 232448


def test_forced_pingpong_picks_assemble_clean(env):
    """What NOVA_PINGPONG=1 configures for the GPU tests' main shapes assembles clean."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    env(NOVA_PINGPONG="1")
    for p in (GemmProblem(16384, 2048, 512, "bf16", trans_b=True), GemmProblem(2048, 1024, 512, "tf32"),
              GemmProblem(2048, 1536, 512, "bf16", trans_b=True, batch=3)):
        s = configure(p, "h200").schedule
        assert s.pingpong
        r = compile_gemm(p, s).resources
        assert r["spill_store_bytes"] == 0 and not wgmma_hazards(r), r


def test_the_gpu_tests_pingpong_cases_are_pingpong_and_assemble(env):
    """Each ping-pong case of tests/test_runtime_gpu.py is configured ping-pong under NOVA_PINGPONG=1, its
    precompile line sets it, and the kernel assembles clean."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from test_runtime_gpu import (PINGPONG_BATCHED_CASES, PINGPONG_CASES, PINGPONG_F32_OUT, batched_problem,
                                  precompile_commands)
    lines = precompile_commands("h200")
    env(NOVA_PINGPONG="1")
    problems = ([GemmProblem(*c) for c in PINGPONG_CASES] + [GemmProblem(*PINGPONG_F32_OUT, out_dtype="f32")]
                + [batched_problem(c) for c in PINGPONG_BATCHED_CASES])
    for p in problems:
        s = configure(p, "h200").schedule
        assert s.pingpong, p.describe()
        shape = f"{p.batch}x{p.M}x{p.N}x{p.K}" if p.batch > 1 else f"{p.M}x{p.N}x{p.K}"
        assert any(ln.startswith("NOVA_PINGPONG=1 nova precompile gemm --shapes ") and shape in ln for ln in lines)
        if ptxas.available():
            r = compile_gemm(p, s).resources
            assert r["spill_store_bytes"] == 0 and not wgmma_hazards(r), r
    assert {configure(p, "h200").schedule.hopper.epilogue for p in problems} == {"registers", "tma_store"}


def test_the_training_steps_picks_assemble_free_of_wgmma_hazards(env):
    """The configurator's own picks for the GPT training steps' GEMMs (every third of
    bench/suites/train_gemms.json in TF32 and BF16: ping-pong forwards, cooperative dX and split-K dW)
    assemble without spills and free of WGMMA_HAZARDS: a ping-pong kernel whose every wgmma ptxas serialises (C7520) runs at half rate
    and is otherwise only found by scanning a cache."""
    import json
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    entries = json.load(open("bench/suites/train_gemms.json"))[::3]
    kinds = set()
    for e in entries:
        for dtype in ("tf32", "bf16"):
            p = GemmProblem(e["M"], e["N"], e["K"], dtype, e["trans_a"], e["trans_b"], bias=e["bias"])
            s = configure(p, "h200").schedule
            kinds.add("pingpong" if s.pingpong else ("split" if s.split_k > 1 else "cooperative"))
            r = compile_gemm(p, s).resources
            assert r["spill_store_bytes"] == 0 and not wgmma_hazards(r), (p.describe(), r)
    assert kinds == {"pingpong", "split", "cooperative"}, kinds


@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
@pytest.mark.parametrize("shape, extra", [((4095, 4104, 1000), {"bias": True, "residual": True}),
                                          ((2000, 3000, 512), {"bias": True, "activation": "gelu",
                                                               "preactivation": True, "residual": True})])
def test_ragged_tiles_with_r_keep_one_slab_and_assemble_clean(env, shape, extra, dtype):
    """With R on ragged tiles a ping-pong warpgroup tile has one 64-row slab (RAGGED_RESIDUAL_SLABS:
    two slabs spilled 32-168 B); the picks on both Hopper presets assemble without spills."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    p = GemmProblem(*shape, dtype, trans_b=True, **extra)
    for target in ("h200", "h100"):
        s = configure(p, target, kernel="tiles").schedule
        assert not (s.pingpong and s.tile_slabs > 1), (target, s.block_m, s.block_n)
        if ptxas.available():
            r = compile_gemm(p, s).resources
            assert r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0, (target, r)
