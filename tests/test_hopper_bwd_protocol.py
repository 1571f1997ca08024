"""The Hopper attention backward's barrier protocol, read from its MLIR and run as a model.

The first H200 run of the wgmma dK/dV and dQ kernels hung (bench/NOTES.md, "Hopper backward").
The cause was not in the rings: the consumers' ``setmaxnreg.inc 240`` asked for registers the block
never held (32 x 128 + 240 x 256 = 65536 > 384 x 168 = 64512), so they waited forever and the producer
waited on ``empty``.  These tests pin both halves without a GPU: the register split the kernels ask for,
and every barrier's arrivals, transaction bytes and trip counts per role (the producer's TMA thread, dK/dV's
LSE/D warp, the consumer warps) taken from the generated text, run through the mbarrier rules under random
interleavings for ragged, one-tile, causal and GQA problems.
"""
import random
import re

import pytest

from nova.kernels.attention.module import build_module
from nova.kernels.attention.derive import configure_attention
from nova.kernels.attention.problem import AttentionProblem
from mbarrier_model import Mbarrier

# (B, H, Hkv, T, D, causal, dtype)
PROBLEMS = [(2, 2, 2, 200, 64, False, "bf16"), (1, 2, 2, 128, 64, False, "bf16"), (32, 8, 8, 512, 64, True, "bf16"),
            (1, 2, 2, 1, 64, True, "fp16"), (1, 4, 2, 150, 64, True, "bf16"), (1, 3, 1, 300, 128, True, "fp16"),
            (2, 2, 2, 100, 128, False, "bf16"), (1, 2, 2, 333, 64, True, "fp16")]


@pytest.fixture(autouse=True)
def hopper_bwd(monkeypatch):
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER_BWD", "1")


def _kernels(case):
    B, H, Hkv, T, D, causal, dtype = case
    p = AttentionProblem(B, H, T, T, D, causal=causal, dtype=dtype, kv_heads=Hkv)
    s = configure_attention(p, "h200").schedule
    return p, s, [r for r in ("bwd_dkv", "bwd_dq") if s.kernel(r).hopper]


def _protocol(text):
    """What the MLIR says each role does: barrier counts, per-iteration arrivals and bytes, trip counts."""
    consts = {m[0]: int(m[1]) for m in re.findall(r"(%c\d+) = arith.constant (\d+) : index", text)}
    inits = {}
    for name, count in re.findall(r"nvgpu.mbarrier.init %(\w+)\[%c\d+\], (%c\d+)", text):
        assert inits.setdefault(name, consts[count]) == consts[count]
    prod = text[text.index("scf.if %is_producer {"):]
    prod, cons = prod[:prod.index("} else {")], prod[prod.index("} else {"):]
    loads = re.findall(r"nvgpu.tma.async.load %tm_\w+\[[^\]]*\], %(\w+)\[[^\]]*\] to %\w+ : [^\n]*?"
                       r"memref<1x1x(\d+)x(\d+)x(bf16|f16)", prod)
    box = {name: sum(int(r) * int(c) * 2 for n, r, c, _ in loads if n == name) for name in ("kept_full", "full")}
    tx = dict((n, consts[c]) for n, c in re.findall(r"arrive.expect_tx %(\w+)\[[^\]]*\], (%c\d+)", prod))
    trips = dict(re.findall(r"scf.for %(itp|itv|it) = %c0 to (%\w+) step", text))
    return {"init": inits, "tx": tx, "box": box, "trips": trips, "consts": consts,
            "vec_warp": "%is_vec_warp" in prod and "nvgpu.mbarrier.arrive %full" in prod,
            "consumer_release_per_warp": bool(re.search(r"scf.if %lane0 \{\s*%tok = nvgpu.mbarrier.arrive %empty",
                                                        cons)),
            "consumer_release_per_thread": bool(re.search(r"\n\s*%tok = nvgpu.mbarrier.arrive %empty", cons))
            and not re.search(r"scf.if %lane0 \{\s*%tok = nvgpu.mbarrier.arrive %empty", cons)}


@pytest.mark.parametrize("case", PROBLEMS, ids=lambda c: "B{}H{}kv{}T{}D{}{}-{}".format(*c[:5], "c" if c[5] else "",
                                                                                       c[6]))
def test_every_role_agrees_on_arrivals_bytes_and_trips(case):
    """full: the TMA thread's expect_tx + (dK/dV) 32 LSE/D lanes = the init count, expect_tx = the bytes of
    the boxes issued on the barrier (TMA counts whole boxes, zero-filled rows too); empty: one arrival per
    consumer warp (dQ), per consumer thread in dK/dV (every lane read LSE/D with ordinary loads: lane 0's
    arrival would not order the others', compute-sanitizer's racecheck); one trip count (one SSA value) for the
    producer thread, the LSE/D warp and the consumers; and the setmaxnreg split inside the block's
    registers at launch (the hang)."""
    p, s, roles = _kernels(case)
    assert roles, "the forced backward should run on the Hopper kernels"
    for role in roles:
        k = s.kernel(role)
        text = build_module(p.for_role(role), s, role)
        pr = _protocol(text)
        vec = role == "bwd_dkv"
        assert pr["vec_warp"] == vec
        assert pr["init"] == {"kept_full": 1, "full": 1 + 32 * vec, "empty": 4 * k.consumer_warpgroups * (32 if vec else 1)}
        assert pr["tx"] == pr["box"] == {"kept_full": 2 * k.block_rows * p.head_dim * p.elem_bytes,
                                         "full": 2 * k.block_cols * p.head_dim * p.elem_bytes}
        assert pr["consumer_release_per_thread"] if vec else pr["consumer_release_per_warp"]
        trips = pr["trips"]
        assert set(trips) == ({"itp", "itv", "it"} if vec else {"itp", "it"}) and len(set(trips.values())) == 1
        assert 128 * (k.producer_regs + k.consumer_warpgroups * k.consumer_regs) <= k.threads * k.regs_per_thread
        assert f"nvvm.setmaxregister increase {k.consumer_regs}" in text


def _ring(stages, iters, vec_lanes, consumer_warps, boxes, seed):
    """One random interleaving of the backward's ring: the TMA thread waits empty[s] (flipped parity),
    arrive.expect_tx(full[s], the boxes) and issues its boxes (landing later, in any order); each LSE/D
    lane waits empty[s] the same way, writes its columns and arrives on full[s]; each consumer reader (a
    warp in dQ, a thread in dK/dV, whose lanes read LSE/D) waits full[s], reads the slot (TMA boxes and
    LSE/D columns of its round) and arrives on empty[s]."""
    rng = random.Random(seed)
    full = [Mbarrier(1 + vec_lanes) for _ in range(stages)]
    empty = [Mbarrier(consumer_warps) for _ in range(stages)]
    data = [[None] * (boxes + vec_lanes) for _ in range(stages)]
    readers = [set() for _ in range(stages)]
    tma, lanes, cons, landing = 0, [0] * vec_lanes, [0] * consumer_warps, []
    while True:
        moves = [("land", i) for i in range(len(landing))]
        if tma < iters and empty[tma % stages].passed(((tma // stages) & 1) ^ 1):
            moves.append(("tma", 0))
        moves += [("lane", i) for i, it in enumerate(lanes) if it < iters and
                  empty[it % stages].passed(((it // stages) & 1) ^ 1)]
        moves += [("cons", w) for w, it in enumerate(cons) if it < iters and w not in readers[it % stages]
                  and full[it % stages].passed((it // stages) & 1)]
        moves += [("release", w) for w, it in enumerate(cons) if w in readers[it % stages]]
        if not moves:
            assert tma == iters and lanes == [iters] * vec_lanes and cons == [iters] * consumer_warps, \
                f"deadlock: TMA {tma}, lanes {lanes}, consumers {cons}"
            return
        kind, x = rng.choice(moves)
        if kind == "tma":
            s = tma % stages
            full[s].arrive(expect_tx=boxes)
            landing += [(s, b, tma) for b in range(boxes)]
            tma += 1
        elif kind == "land":
            s, b, it = landing.pop(x)
            assert not readers[s], f"round {it} landed in slot {s} while it is read"
            data[s][b] = it
            full[s].complete_tx(1)
        elif kind == "lane":
            it = lanes[x]
            s = it % stages
            assert not readers[s], f"LSE/D of round {it} written in slot {s} while it is read"
            data[s][boxes + x] = it
            full[s].arrive()
            lanes[x] += 1
        elif kind == "cons":              # the warp's wgmmas read the slot from here to its release
            it = cons[x]
            s = it % stages
            assert data[s] == [it] * len(data[s]), (s, it, data[s])
            readers[s].add(x)
        else:                             # wgmma waited: the reader arrives on empty[s]
            s = cons[x] % stages
            readers[s].discard(x)
            empty[s].arrive()
            cons[x] += 1


def test_the_backward_ring_holds_under_any_interleaving():
    for stages in (2, 3, 4):
        for iters in (0, 1, stages, 3 * stages + 1):
            for vec_lanes in (0, 32):
                for seed in range(6):
                    _ring(stages, iters, vec_lanes, 64 if vec_lanes else 8, 4, seed)


def test_the_abi6_register_split_would_not_fit():
    """ABI 6's 32 / 240 wanted 65536 registers of the 64512 a 384-thread block of 168 holds: the builder
    now refuses such a schedule instead of emitting a kernel whose consumers wait forever."""
    from dataclasses import replace

    from nova.kernels.attention.build import AttentionCodegenError
    p, s, _ = _kernels(PROBLEMS[0])
    bad = replace(s, bwd_dkv=replace(s.bwd_dkv, producer_regs=32, consumer_regs=240))
    with pytest.raises(AttentionCodegenError, match="setmaxnreg.inc would wait forever"):
        build_module(p.for_role("bwd_dkv"), bad, "bwd_dkv")


def test_watchdog_builds_bound_every_wait_and_leave_the_normal_kernel_alone():
    """The debug build (bench/probes/attention_bwd_hang.py): no unbounded nvgpu wait left, a bounded
    try_wait loop per wait site (3 in dK/dV: empty by the TMA thread and the LSE/D warp, kept_full and full by
    the consumers; 3 in dQ), one more parameter; the normal build's text has none of it."""
    from nova.kernels.attention.build import AttentionCodegenError
    p, s, roles = _kernels(PROBLEMS[0])
    for role in roles:
        plain = build_module(p.for_role(role), s, role)
        debug = build_module(p.for_role(role), s, role, watchdog_ms=500)
        assert "watchdog" not in plain and "globaltimer" not in plain
        assert plain.count("nvgpu.mbarrier.try_wait.parity") == 3 + (role == "bwd_dkv")
        assert "nvgpu.mbarrier.try_wait.parity" not in debug
        assert debug.count("mbarrier.try_wait.parity.shared::cta.b64") == plain.count("nvgpu.mbarrier.try_wait.parity")
        assert "%watchdog: memref<32xi32>" in debug and debug.count("exit;") == debug.count("atom.relaxed.sys.cas")
        assert "arith.constant 500000000 : i64" in debug
    with pytest.raises(AttentionCodegenError, match="watchdog"):
        build_module(p.for_role("bwd_pre"), s, "bwd_pre", watchdog_ms=500)


@pytest.mark.skipif(__import__("shutil").which("ptxas") is None, reason="needs ptxas")
def test_watchdog_builds_assemble_without_spills():
    from nova.kernels.attention.compile import compile_kernel
    p, s, roles = _kernels(PROBLEMS[2])
    for role in roles:
        art = compile_kernel(p, s, role, watchdog_ms=500)
        r = art.resources
        assert art.params[-1] == "watchdog" and r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0
        assert "%globaltimer" in art.ptx and "atom.relaxed.sys.cas.b32" in art.ptx
