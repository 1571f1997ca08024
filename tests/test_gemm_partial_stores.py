"""The register epilogue's partial sector writes: counted from the stores' pattern, priced in the
epilogue term, shown by the epilogue step, and the emitted stores agree with the vector priced."""
import math

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.kernels.gemm import hopper
from nova.kernels.gemm.hopper import (PARTIAL_SECTOR_CLK, epilogue_time, output_vector, store_sectors,
                                      workspace_vector)


def brute_sectors(out_bytes, pitch, swap, vector, rows=64, cols=256):
    """(whole, partial) sectors an element by simulating every store instruction of a rows x cols tile
    of C: the fragment layout of the register epilogue (4 lanes along a row with column pairs, quads
    after the exchange; swapped, 8 lanes of adjacent pairs), one instruction's bytes counted per sector."""
    whole = partial = elements = 0
    span = 16 if swap or vector == 4 else 8
    step = 1 if vector >= 2 else 2
    for row in range(rows):
        for origin_col in range(0, cols, span):
            for first in range(step):
                written = {}
                cols_written = range(origin_col + first, origin_col + span, step)
                for col in cols_written:
                    for b in range(out_bytes):
                        sector = (out_bytes * (row * pitch + col) + b) // 32
                        written[sector] = written.get(sector, 0) + 1
                whole += sum(v == 32 for v in written.values())
                partial += sum(v < 32 for v in written.values())
                elements += len(cols_written)
    return whole / elements, partial / elements


@pytest.mark.parametrize("out_bytes,pitch,swap,vector", [
    (2, 7959, False, 1), (2, 8000, False, 4), (2, 7564, False, 4), (2, 7562, False, 2), (4, 6075, False, 1),
    (4, 6074, False, 2), (4, 6080, False, 2), (2, 7959, True, 1), (2, 7960, True, 2), (4, 1001, False, 4)])
def test_sector_count_matches_a_tile_simulated_store_by_store(out_bytes, pitch, swap, vector):
    assert store_sectors(out_bytes, pitch, swap, vector) == pytest.approx(brute_sectors(out_bytes, pitch, swap, vector))


def test_sectors_by_pattern():
    assert store_sectors(2, 7959, False, 1)[0] == 0 and store_sectors(2, 7959, False, 1)[1] > 0.25   # singles: partial only
    assert store_sectors(2, 8000, False, 4) == (1 / 16, 0.0)        # bf16 quads on rows of 16000 bytes: whole sectors
    assert store_sectors(4, 6080, False, 2) == (1 / 8, 0.0)         # fp32 pairs on 32-byte rows
    for args in [(2, 7959, False, 1), (2, 7564, False, 4), (4, 6074, False, 2)]:
        whole, partial = store_sectors(*args)
        assert whole * 32 <= args[0] and partial > 0                 # a whole sector holds 32 bytes of elements


def test_partial_stores_priced_in_the_epilogue_and_nowhere_when_aligned():
    gpu = get_target("h100")
    odd, even = GemmProblem(7614, 7959, 6463, "bf16"), GemmProblem(7616, 8000, 6463, "bf16")
    units = 13 * gpu.sm_count
    t_odd = epilogue_time(odd, gpu, 192, 192, units, rows=7614, cols=7959)
    t_even = epilogue_time(even, gpu, 192, 192, units, rows=7616, cols=8000)
    partial = store_sectors(2, 7959, False, output_vector(odd, False, 1))[1]
    extra = 13 * 192 * 192 * partial * PARTIAL_SECTOR_CLK / gpu.clock_hz
    assert t_odd - t_even == pytest.approx(extra, rel=0.02)          # the stored bytes differ by a hair
    assert hopper.partial_store_time(gpu, 1000, 2, 8000, False, 4) == 0.0


def test_workspace_partials_priced_by_their_own_vector():
    gpu = get_target("h100")
    odd, even = GemmProblem(559, 365, 19131, "tf32"), GemmProblem(559, 368, 19131, "tf32")
    assert workspace_vector(odd, False) == 1 and workspace_vector(even, False) == 4
    t_odd = epilogue_time(odd, gpu, 128, 128, 132, 4, rows=559, cols=365, reduction="workspace")
    t_even = epilogue_time(even, gpu, 128, 128, 132, 4, rows=559, cols=368, reduction="workspace")
    assert t_odd > 1.5 * t_even


def test_epilogue_step_states_the_partial_sectors():
    cfg = configure(GemmProblem(7614, 7959, 6463, "bf16", trans_b=True), "h100")
    assert cfg.schedule.hopper.epilogue == "registers" and cfg.schedule.split_k == 1   # rows of 15918 bytes: no TMA store
    assert any(step.step == "epilogue" and "0.344 partial 32-byte sectors" in step.reason for step in cfg.derivation)
    aligned = configure(GemmProblem(7616, 8000, 6464, "bf16", trans_b=True), "h100")
    assert not any("partial 32-byte" in step.reason for step in aligned.derivation)


def test_no_pingpong_where_the_register_epilogue_stores_partial_sectors():
    """Rows of C off the sector with no TMA store: the ping-pong tiles are not candidates (measured
    1.2-2.1x their model), and forcing them names why in one line."""
    from nova.kernels.gemm.hopper import operand_plan, pingpong_epilogues, registers_store_partial
    from nova.options import Options
    odd = GemmProblem(7614, 7959, 6463, "bf16", trans_b=True)
    assert registers_store_partial(odd, False) and pingpong_epilogues(odd, operand_plan(odd), 128) == ()
    assert configure(odd, "h100").schedule.consumers == "cooperative"
    aligned = GemmProblem(7616, 8000, 6464, "bf16", trans_b=True)
    assert pingpong_epilogues(aligned, operand_plan(aligned), 128) == ("tma_store",)
    cfg = configure(odd, "h100", options=Options(pingpong=True))            # asked for: the registers
    assert cfg.schedule.consumers == "pingpong" and cfg.schedule.hopper.epilogue == "registers"
    from nova.kernels.gemm.hopper import pingpong_step
    gpu = get_target("h100")
    plain = configure(odd, gpu).schedule
    hopper.EXPLAIN_PINGPONG_ALWAYS, saved = True, hopper.EXPLAIN_PINGPONG_ALWAYS
    try:
        _, step = pingpong_step(odd, gpu, plain.hopper.operands, 256, plain, Options())
    finally:
        hopper.EXPLAIN_PINGPONG_ALWAYS = saved
    assert step.value == "cooperative" and "partial-sector stores do not leave" in step.reason


def test_stream_k_prices_its_partial_stores():
    gpu = get_target("h100")
    from nova.kernels.gemm.hopper import stream_k_terms, operand_plan
    odd, even = GemmProblem(1266, 1383, 1278, "tf32"), GemmProblem(1266, 1384, 1278, "tf32")
    t_odd = stream_k_terms(odd, gpu, 128, 128, operand_plan(odd))["epilogue"]
    t_even = stream_k_terms(even, gpu, 128, 128, operand_plan(even))["epilogue"]
    assert t_odd > 2 * t_even
