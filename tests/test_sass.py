"""The SASS check of wgmma descriptors (``nova.codegen.sass``) and the GEMM compile's answer to it.

ptxas 13.0 may leave the high word of a wgmma descriptor built as a sum unwritten (``nova/codegen/
sass.py`` says how); on the H100 such ping-pong GEMMs computed wrong results or faulted
(bench/results/h100-2026-12-08/run128-h100).  These tests build those kernels (the schedule rules
refuse their rings now, so the check is bypassed here) and need ptxas and nvdisasm."""
from __future__ import annotations

import pytest

from nova.codegen import ptxas, sass
from nova.configurator import GemmProblem, configure
from nova.kernels.gemm import emit_hopper, hopper
from nova.kernels.gemm.compile import compile_gemm
from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
from nova.hwmodel import get_target

pytestmark = pytest.mark.skipif(not (ptxas.available() and sass.available()), reason="needs ptxas and nvdisasm")

H100 = get_target("h100")
# (problem, warpgroup tile N, epilogue, ring stages): wrong or an illegal address on the H100 as sums
MEASURED_WRONG = [
    (GemmProblem(300, 200, 256, "bf16", trans_b=True, batch=17), 64, "tma_store", 8),
    (GemmProblem(4000, 4004, 64, "bf16", trans_b=True), 192, "registers", 2),
    (GemmProblem(1023, 1025, 40, "bf16", bias=True, activation="gelu"), 64, "registers", 2),
]


def unchecked_pingpong(p, n, epilogue, stages):
    return wgmma_schedule(p, H100, operand_plan(p), 2, n, 1, stages, 8, epilogue=epilogue, pingpong=1)


@pytest.mark.parametrize("p, n, epilogue, stages", MEASURED_WRONG, ids=lambda v: getattr(v, "describe", lambda: v)())
def test_the_check_finds_the_measured_wrong_kernels_and_the_masked_fields_clear_them(monkeypatch, p, n, epilogue,
                                                                                     stages):
    monkeypatch.setattr(emit_hopper, "check_supported", lambda *a: None)
    monkeypatch.setattr(hopper, "pingpong_blocker", lambda *a, **k: None)
    s = unchecked_pingpong(p, n, epilogue, stages)
    for masked, hazardous in ((False, True), (True, False)):
        binary, _ = ptxas.assemble(_ptx(p, s, masked), "sm_90a", kernel=emit_hopper.KERNEL_NAME)
        assert bool(sass.descriptor_hazards(sass.disassemble(binary))) == hazardous, (p.describe(), masked)
    artifact = compile_gemm(p, s)            # the compile reads the SASS back and takes the masked fields
    assert artifact.meta["descriptors"] == "masked fields" and artifact.resources["descriptor_hazards"] == []


def _ptx(p, s, masked: bool) -> str:
    from nova.codegen.lower import to_ptx
    return to_ptx(emit_hopper.build_hopper_module(p, s, masked_descriptors=masked), "sm_90a")


def test_a_clean_kernel_keeps_the_sum():
    """Where ptxas writes every descriptor word the GEMM keeps the sum (the SASS it was timed on)."""
    p = GemmProblem(4096, 4096, 4096, "bf16")
    artifact = compile_gemm(p, configure(p, "h200").schedule)
    assert artifact.meta["descriptors"] == "sum" and artifact.resources["descriptor_hazards"] == []


def test_hazards_name_the_unwritten_register():
    line = "        /*0a40*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16].tnspB, RZ, !UPT ;"
    sass_text = "\n".join([
        "        /*0100*/                   USETMAXREG.TRY_ALLOC.CTAPOOL 0xe8 ;",
        "        /*0110*/                   UIADD3 UR16, UR4, 0x40, URZ ;",
        "        /*0120*/                   UMOV UR17, 0x40000040 ;",
        "        /*0130*/                   UIADD3 UR18, UR24, 0x10200, URZ ;",
        line])
    assert sass.descriptor_hazards(sass_text) == ["HGMMA descriptor register UR19 never written"]
    assert sass.descriptor_hazards(sass_text.replace("UIADD3 UR18", "UIADD3.64 UR18")) == []


def test_a_failing_nvdisasm_is_one_clear_error(monkeypatch):
    """nvdisasm present but failing: the compile names the kernel and the cause in one line."""
    from nova.codegen import CodegenError

    def broken(cubin):
        raise RuntimeError("nvdisasm failed: exit status 1")
    monkeypatch.setattr(sass, "disassemble", broken)
    p = GemmProblem(1024, 1024, 1024, "bf16")
    with pytest.raises(CodegenError, match="reading back .* SASS failed: nvdisasm failed") as err:
        compile_gemm(p, configure(p, "h200").schedule)
    assert "\n" not in str(err.value)
