"""nova.codegen.nvgpu: the sm_90 building blocks every Hopper builder emits through."""
from __future__ import annotations

import pytest

from nova.codegen import nvgpu
from nova.codegen.builder import Ir


def fields(descriptor: int) -> dict:
    """The fields of a wgmma matrix descriptor, decoded by the PTX ISA's bit positions."""
    return {"start": (descriptor & 0x3FFF) << 4, "lbo": ((descriptor >> 16) & 0x3FFF) << 4,
            "sbo": ((descriptor >> 32) & 0x3FFF) << 4, "base_offset": (descriptor >> 49) & 0x7,
            "swizzle": descriptor >> 62}


@pytest.mark.parametrize("lbo", [nvgpu.KMAJOR_LEADING_BYTE_OFFSET, 64 * nvgpu.SWIZZLE_BYTES, 128 * nvgpu.SWIZZLE_BYTES])
def test_descriptor_high_bits_decode_to_their_fields(lbo):
    start = 0x2_5A40                               # a shared address (16-byte aligned) below 256 KB
    d = nvgpu.descriptor_high_bits(lbo) + (start >> 4)
    assert fields(d) == {"start": start, "lbo": lbo, "sbo": nvgpu.SWIZZLE_ATOM_BYTES, "base_offset": 0, "swizzle": 1}


def test_descriptor_start_keeps_the_fourteen_bit_field():
    ir = Ir()
    assert nvgpu.WgmmaDescriptor.START_MASK == 0x3FFF
    name = nvgpu.descriptor_start(ir, "%aligned", "enc")
    body = ir.text()
    assert name == "%enc14" and "arith.divui %aligned" in body and f"arith.andi %enc, %c{0x3FFF} : index" in body


def test_a_descriptor_is_its_masked_start_or_its_high_bits():
    """Bit fields or'ed by default: ptxas 13.0 compiled ``zext(start) + high`` into a low-word add that
    dropped the high word (swizzle mode and SBO) for a start it could not bound; the sum on request."""
    ir = Ir()
    high = nvgpu.descriptor_high_constant(ir, "hi", nvgpu.KMAJOR_LEADING_BYTE_OFFSET)
    desc = nvgpu.descriptor(ir, "%start", high)
    body = ir.text()
    assert f"arith.andi %start, %c{0x3FFF} : index" in body and f"{desc} = arith.ori %d_i64, {high} : i64" in body
    assert "arith.addi" not in body
    summed = nvgpu.descriptor(ir, "%start2", high, as_fields=False)
    assert f"{summed} = arith.addi %d_i64_1, {high} : i64" in ir.text()


def test_the_hopper_attention_forward_composes_every_descriptor_as_fields():
    """The kernel that read out of range (B1 H4/2 T3105 D64 bf16, 3-deep ring, not persistent): every
    descriptor of its text comes from ``nvgpu.descriptor`` (an ``ori`` of a masked start)."""
    from nova.hwmodel import get_target
    from nova.kernels.attention.build_hopper import build_hopper_fwd
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.problem import AttentionProblem
    p = AttentionProblem(1, 4, 3105, 3105, 64, False, "bf16", kv_heads=2)
    s = configure_attention(p, get_target("h200")).schedule
    assert s.tma and s.fwd.stages == 3 and not s.fwd.persistent
    text = build_hopper_fwd(p, s)
    made = [line for line in text.splitlines() if " = arith." in line and "%desc" in line.split("=")[0]
            and "arith.constant" not in line]
    assert len(made) >= 2 * 4 + 8 and all("arith.ori %d_i64" in line for line in made)


def _descriptors(text: str) -> list[str]:
    """The lines of a module's text that make a wgmma descriptor (not the constants of its high bits)."""
    return [line for line in text.splitlines() if " = arith." in line and "%desc" in line.split("=")[0]
            and "arith.constant" not in line]


def _composed_or_advanced(line: str) -> bool:
    """A descriptor made from its start as fields (``nvgpu.descriptor``: ``ori`` of the masked start and
    the high bits), or one advanced from another descriptor by a k-step (``addi %desc..., offset``):
    never a start added to the high bits."""
    rhs = line.split("=", 1)[1].strip()
    return rhs.startswith("arith.ori %d_i64") or (rhs.startswith("arith.addi %desc") and "%desc_hi" not in rhs)


HOPPER_ATTENTION = [(2, 4, 2, 1000, 1000, 64, True, "bf16"), (1, 8, 8, 777, 777, 128, False, "fp16"),
                    (2, 4, 4, 1024, 1024, 64, True, "tf32"), (1, 4, 2, 3105, 3105, 64, False, "bf16")]


@pytest.mark.parametrize("case", HOPPER_ATTENTION, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}-{}".format(*c))
def test_every_hopper_attention_kernel_composes_its_descriptors_as_fields(case):
    """The forward and the backward's dK/dV and dQ kernels, wherever the configurator puts them on
    wgmma: no descriptor of theirs is an ``add`` ptxas may split (``nvgpu.descriptor``)."""
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import build_module
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.problem import AttentionProblem
    B, H, Hkv, Tq, Tk, D, causal, dtype = case
    p = AttentionProblem(B, H, Tq, Tk, D, causal, dtype, kv_heads=Hkv)
    s = configure_attention(p, get_target("h200")).schedule
    roles = [role for role in ("fwd", "bwd_dkv", "bwd_dq") if s.kernel(role).consumer_warpgroups]
    assert roles, "no wgmma kernel in this case"
    for role in roles:
        made = _descriptors(build_module(p.for_role(role), s, role, None))
        assert made and all(_composed_or_advanced(line) for line in made), role


@pytest.mark.parametrize("M, N, K, dtype, layout", [(4096, 4096, 4096, "bf16", "NN"), (4096, 4096, 4096, "tf32", "NT"),
                                                    (16384, 2048, 512, "tf32", "TN"), (512, 2048, 16384, "bf16", "TN")])
def test_the_hopper_gemm_keeps_its_measured_descriptors(M, N, K, dtype, layout):
    """The GEMMs' ring-slot descriptors stay the sum their SASS was measured with (the mask halves
    how far ptxas unrolls their main loops): every one a start plus the high bits, none left half-made."""
    from nova.hwmodel import get_target
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    from nova.kernels.gemm.problem import GemmProblem
    from nova.runtime.matmul import configure_schedule
    problem = GemmProblem(M, N, K, dtype, trans_a=layout[0] == "T", trans_b=layout[1] == "T")
    s = configure_schedule(problem, get_target("h200"))
    assert s.mma.family == "wgmma"
    made = _descriptors(build_hopper_module(problem, s))
    assert made and all(line.split("=", 1)[1].strip().startswith("arith.addi %d_i64") and "%desc_hi" in line
                        for line in made)


@pytest.mark.parametrize("iteration, stages", [(0, 4), (3, 4), (4, 4), (9, 4), (11, 3)])
def test_slot_phase_of_a_known_iteration(iteration, stages):
    """Compile-time iterations fold: the slot is an int; the parity is computed from the folded round."""
    ir = Ir()
    slot, parity = nvgpu.slot_phase(ir, iteration, stages)
    assert slot == iteration % stages
    assert f"arith.index_cast %c{iteration // stages} : index to i64" in ir.text()
    flipped = nvgpu.slot_phase(ir, iteration, stages, flip=True)[1]
    assert parity.startswith("%par") and flipped.startswith("%par_flip")
    assert "arith.constant true" in ir.text() and f"{flipped} = arith.xori %par_1, %true1 : i1" in ir.text()


def test_emitters_spell_the_dialect_ops():
    ir = Ir()
    nvgpu.setmaxnreg(ir, 240, increase=True)
    nvgpu.setmaxnreg(ir, 24, increase=False)
    nvgpu.named_barrier_sync(ir, "%id", "%n")
    nvgpu.named_barrier_arrive(ir, "%id", "%n")
    nvgpu.wgmma_fence(ir)
    nvgpu.wgmma_commit_group(ir)
    nvgpu.wgmma_wait_group(ir, 1)
    nvgpu.mbarrier_try_wait(ir, "%full", 2, "%par", nvgpu.mbarrier_wait_ticks(ir), nvgpu.mbarrier_group_type(4))
    text = ir.text()
    for line in ("nvvm.setmaxregister increase 240", "nvvm.setmaxregister decrease 24",
                 "nvvm.barrier id = %id number_of_threads = %n", "nvvm.barrier.arrive id = %id number_of_threads = %n",
                 "nvvm.wgmma.fence.aligned", "nvvm.wgmma.commit.group.sync.aligned", "nvvm.wgmma.wait.group.sync.aligned 1",
                 f"nvgpu.mbarrier.try_wait.parity %full[%c2], %par, %c{nvgpu.MBARRIER_WAIT_TICKS} : "
                 "!nvgpu.mbarrier.group<memorySpace = #smem, num_barriers = 4>"):
        assert line in text, line


def test_wgmma_attributes_scale_d():
    one, zero = nvgpu.wgmma_attributes(64, 16, "bf16"), nvgpu.wgmma_attributes(64, 16, "bf16", scale_d="zero")
    assert "shape = #nvvm.shape<m = 64, n = 64, k = 16>" in one and "wgmma_scale_out<one>" in one
    assert zero == one.replace("wgmma_scale_out<one>", "wgmma_scale_out<zero>")
