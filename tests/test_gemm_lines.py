"""Rows off the 128-byte line (``hopper.k_pad``, ``line_crossings``, the line-pad step): the operand prep
pads K to whole lines, a map read in place off the line is priced by the fraction of its box rows that
fill from two L2 lines, and step 2b pads a K-major operand where the model predicts that pays."""
from __future__ import annotations

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.kernels.gemm.hopper import k_pad, line_crossings, operand_plan, time_terms
from nova.kernels.gemm.schedule import OperandPrep
from nova.kernels.gemm.space import label


def test_the_prep_pads_k_to_whole_lines():
    assert k_pad(GemmProblem(64, 64, 25836)) == 25856               # 32 TF32 elements a line
    assert k_pad(GemmProblem(64, 64, 63541, "bf16")) == 63552       # 64 BF16 elements a line
    assert k_pad(GemmProblem(64, 64, 4096)) == 4096
    plan = operand_plan(GemmProblem(1767, 1262, 24985, trans_a=True))    # K odd: both operands prepped
    assert plan.a.prep.dst == (1767, 24992) and plan.b.prep.dst == (1262, 24992)
    assert line_crossings(GemmProblem(1767, 1262, 24985, trans_a=True), plan) == (1, 1)


@pytest.mark.parametrize("M,N,K,dtype,trans_b,lines", [
    (1207, 714, 25836, "tf32", True, (1.875, 1.875)),     # 103,344-byte rows: gcd 16
    (1000, 1000, 1000, "tf32", False, (1.75, 1.75)),      # 4,000-byte rows (A K-major, B N-major): gcd 32
    (1207, 714, 25856, "tf32", True, (1, 1)),             # whole lines
])
def test_rows_off_the_line_fill_from_two_lines_in_proportion(M, N, K, dtype, trans_b, lines):
    p = GemmProblem(M, N, K, dtype, trans_b=trans_b)
    assert line_crossings(p, operand_plan(p)) == pytest.approx(lines)


def test_the_l2_term_counts_each_operands_lines():
    """1207x714x25836 NT against the same problem on the line: the same tile's L2 fill term 1.875x."""
    gpu = get_target("h100")
    off, on = GemmProblem(1207, 714, 25836, trans_b=True), GemmProblem(1207, 714, 25856, trans_b=True)
    t_off = time_terms(off, gpu, 128, 256, 4, operand_plan(off), "workspace")
    t_on = time_terms(on, gpu, 128, 256, 4, operand_plan(on), "workspace")
    assert t_off["l2"] == pytest.approx(1.875 * t_on["l2"], rel=2e-3) and t_off["mma"] == pytest.approx(t_on["mma"], rel=2e-3)


def test_the_line_pad_step_pads_where_the_model_says_it_pays():
    """4096x4096x4100 NT TF32 (16,400-byte rows): a pad is predicted faster than reading in place and the
    step takes the fastest of the choices its row lists (on the H100 padding B; on the H200, whose
    padding copy runs at its DRAM bandwidth, both); 2048x2048x1000 NN BF16 stays in place (a pad pass
    costs more than its fills save)."""
    import re
    for target, choice in (("h100", "pad B"), ("h200", "pad A+B")):
        cfg = configure(GemmProblem(4096, 4096, 4100, trans_b=True), target)
        step = next(s for s in cfg.derivation if s.step == "line pads")
        listed = dict((name, float(us)) for name, us in re.findall(r"(in place|pad A\+B|pad A|pad B) ([\d.]+) us", step.reason))
        assert set(listed) == {"in place", "pad A", "pad B", "pad A+B"} and step.value == choice == min(listed, key=listed.get)
        b = cfg.schedule.hopper.operands.b
        assert b.prep is not None and b.prep.line and not b.prep.transpose and b.cols == 4128
        assert (cfg.schedule.hopper.operands.a.prep is None) == (choice == "pad B")
        assert label(cfg.schedule).endswith(" padB" if choice == "pad B" else " padAB")
    stays = configure(GemmProblem(2048, 2048, 1000, "bf16"), "h200")
    assert next(s for s in stays.derivation if s.step == "line pads").value == "in place"
    assert stays.schedule.hopper.operands.a.prep is None and " pad" not in label(stays.schedule)
    aligned = configure(GemmProblem(4096, 4096, 4096, trans_b=True), "h200")
    assert all(s.step != "line pads" for s in aligned.derivation)


def test_a_line_pad_round_trips_in_the_schedule():
    prep = OperandPrep(False, False, (4096, 4100), (4096, 4128), line=True)
    assert OperandPrep.from_dict(prep.to_dict()) == prep
    assert "line" not in OperandPrep(False, False, (4096, 4100), (4096, 4128)).to_dict()   # keys as before
