"""sm_90 (Hopper) building blocks of the MLIR kernels: the wgmma shared-memory descriptor, the mbarrier
ring, fences, wgmma groups, setmaxnreg and named barriers, emitted through ``nova.codegen.builder.Ir``.

Every Hopper builder (the GEMM's ``emit_hopper``, the attention forward and backward, the
tensor-ceiling probe) writes these the same way; each is written once here.  The spellings are the
``nvgpu``/``nvvm`` dialect ops of upstream MLIR (its NVGPU Python examples build the same kernels).
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.codegen.builder import SMEM, Ir

SM90A = "sm_90a"                  # wgmma, setmaxnreg and the TMA need the architecture-specific target
WARPGROUP_THREADS = 128           # 4 warps issue one wgmma together
SWIZZLE_BYTES = 128               # a 128-byte swizzled row: a TMA box's inner extent, a descriptor's row
SWIZZLE_ATOM_BYTES = 1024         # the 128-byte swizzle's atom (8 rows x 128 B): boxes start on its boundary
MBARRIER_WAIT_TICKS = 10000000    # suspend-time hint of each mbarrier try_wait (then the loop retries)
PROXY_FENCE_ASYNC_SHARED = ("nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, "
                            "space = #nvvm.shared_space<cta>}")


# ---- the wgmma shared-memory descriptor
@dataclass(frozen=True)
class WgmmaDescriptor:
    """The 64-bit matrix descriptor a ``wgmma.mma_async`` reads a shared-memory operand through (PTX ISA,
    "Asynchronous Warpgroup Level Matrix Shared Memory Layout" > "Matrix Descriptor"):

    ====== ============================================================================
    bits   field
    ====== ============================================================================
    0-13   start address >> 4 (shared::cta; 14 bits: ``START_MASK``)
    16-29  leading-dimension byte offset >> 4 (LBO)
    32-45  stride-dimension byte offset >> 4 (SBO)
    49-51  matrix base offset (0: every tile starts on a swizzle-atom boundary)
    62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
    ====== ============================================================================

    Nova's operands are 128-byte swizzled TMA boxes: SBO = 1024 B (the 8-row atom) between 8-row
    groups; LBO unused (16 B) for a K-major operand, the bytes between 128-byte column blocks for an
    MN-major one.  The start address varies per slot and k-step, the rest is a constant: ``high_bits``."""
    leading_byte_offset: int
    stride_byte_offset: int = SWIZZLE_ATOM_BYTES
    swizzle_mode: int = 1                 # 128-byte swizzle

    START_MASK = (1 << 14) - 1            # the start-address field: (shared address >> 4) & 0x3FFF

    def high_bits(self) -> int:
        """Bits 16-63 (LBO, SBO, swizzle mode); the start address is added in the kernel."""
        return ((self.leading_byte_offset >> 4) << 16) | ((self.stride_byte_offset >> 4) << 32) | (self.swizzle_mode << 62)


KMAJOR_LEADING_BYTE_OFFSET = 16           # a K-major operand's LBO: unused by the 128-byte swizzle, 16 B


def descriptor_high_bits(leading_byte_offset: int) -> int:
    """Bits 16-63 of a 128-byte-swizzled descriptor with LBO ``leading_byte_offset`` (``WgmmaDescriptor``)."""
    return WgmmaDescriptor(leading_byte_offset).high_bits()


def descriptor_high_constant(ir: Ir, name: str, leading_byte_offset: int) -> str:
    """The i64 constant of a descriptor's bits 16-63, named ``name``."""
    return ir.let(name, f"arith.constant {descriptor_high_bits(leading_byte_offset)} : i64")


def descriptor_start(ir: Ir, aligned_address, name: str) -> str:
    """``(aligned_address >> 4) & START_MASK`` (index), named ``name`` + ``14``.  The mask keeps the field's
    14 bits: in a cluster launch a CTA's shared::cta addresses carry its rank above the 18 bits a CTA
    spans, which >> 4 would carry into the LBO field; and with it ptxas knows the descriptor's high word
    is the constant (ptxas 13.0 otherwise split the 64-bit add into halves and could leave the high word
    unwritten on one path: out-of-range shared reads on the H200)."""
    encoded = ir.div(aligned_address, 16, name)
    return ir.let(f"{name}14", f"arith.andi {ir.v(encoded)}, {ir.v(WgmmaDescriptor.START_MASK)} : index")


def descriptor(ir: Ir, start, high: str, *, as_fields: bool = True) -> str:
    """A descriptor (i64) from its start field ``start`` (index, address >> 4) and the constant ``high``
    (bits 16-63).  ``as_fields``: ``(start & START_MASK) | high``.  ptxas 13.0 lowered the sum
    ``zext(start) + high`` for a start it could not bound (the Hopper attention forward's V tile at
    D = 64 with a 3-deep ring) to a 32-bit add on the low word that dropped the high word -- swizzle
    mode and SBO 0, an out-of-range shared read (compute-sanitizer, H100); masked and or'ed, every
    descriptor's high word is the constant (an ``or`` alone does not avoid it).  ``as_fields=False``:
    the sum, for a start ptxas bounds (the GEMMs' ring slots; there the mask changes how far ptxas
    unrolls the main loop, whose SASS the GEMM timings were measured and calibrated on)."""
    if not as_fields:
        start64 = ir.let("d_i64", f"arith.index_cast {ir.v(start)} : index to i64")
        return ir.let("desc", f"arith.addi {start64}, {high} : i64")
    field = ir.let("d_start", f"arith.andi {ir.v(start)}, {ir.v(WgmmaDescriptor.START_MASK)} : index")
    start64 = ir.let("d_i64", f"arith.index_cast {field} : index to i64")
    return ir.let("desc", f"arith.ori {start64}, {high} : i64")


def wgmma_attributes(n: int, k: int, operand_type: str, layout_a: str = "row", layout_b: str = "col",
                     scale_d: str = "one") -> str:
    """The attributes of ``nvvm.wgmma.mma_async`` m64nNkK with FP32 accumulators: ``operand_type`` the
    ``#nvvm.wgmma_type`` of A and B, ``layout_a``/``layout_b`` row or col (col for B: K-major),
    ``scale_d`` one (accumulate) or zero (overwrite)."""
    return (f"shape = #nvvm.shape<m = 64, n = {n}, k = {k}>, "
            f"typeA = #nvvm.wgmma_type<{operand_type}>, typeB = #nvvm.wgmma_type<{operand_type}>, "
            f"typeD = #nvvm.wgmma_type<f32>, scaleD = #nvvm.wgmma_scale_out<{scale_d}>, "
            "scaleA = #nvvm.wgmma_scale_in<one>, scaleB = #nvvm.wgmma_scale_in<one>, "
            f"layoutA = #nvvm.mma_layout<{layout_a}>, layoutB = #nvvm.mma_layout<{layout_b}>")


# ---- shared memory
def aligned_dynamic_shared_memory(ir: Ir, align: int) -> tuple[str, str, str]:
    """The dynamic shared memory as an i8 view ``dsm``, its address and its first ``align``-byte
    boundary: ``(dsm, address, aligned_address)`` (indices)."""
    dsm = ir.let("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
    address = ir.let("dsm_addr", f"memref.extract_aligned_pointer_as_index {dsm} : memref<?xi8, {SMEM}> -> index")
    up = ir.add(address, align - 1, "dsm_up")
    return dsm, address, ir.sub(up, ir.rem(up, align, "dsm_rem"), "dsm_aligned")


# ---- the mbarrier ring
def mbarrier_group_type(count: int) -> str:
    """The type of ``count`` mbarriers in shared memory (``nvgpu.mbarrier.create``)."""
    return f"!nvgpu.mbarrier.group<memorySpace = {SMEM}, num_barriers = {count}>"


def slot_phase(ir: Ir, iteration, stages: int, flip: bool = False) -> tuple[str, str]:
    """Ring iteration ``iteration`` -> (its slot ``iteration % stages``, the parity of its round
    ``iteration / stages`` as i1).  A consumer waits on full[slot] for that parity; ``flip``: the
    producer waits on empty[slot] for the other one (the previous round's release; round 0's
    wait passes on the fresh barrier, whose phase of parity 1 counts as completed)."""
    slot = ir.rem(iteration, stages, "slot")
    bit = ir.let("par_i", f"arith.index_cast {ir.v(ir.div(iteration, stages, 'round'))} : index to i64")
    parity = ir.let("par", f"arith.trunci {bit} : i64 to i1")
    if flip:
        parity = ir.let("par_flip", f"arith.xori {parity}, {ir.pure('true1', 'arith.constant true')} : i1")
    return slot, parity


def mbarrier_wait_ticks(ir: Ir) -> str:
    """The index constant ``MBARRIER_WAIT_TICKS``, the suspend-time hint every try_wait passes."""
    return ir.const(MBARRIER_WAIT_TICKS)


def mbarrier_try_wait(ir: Ir, group: str, index, parity: str, ticks: str, group_type: str) -> None:
    """Wait until barrier ``group[index]`` completed the phase of ``parity`` (``mbarrier.try_wait.parity``
    in a loop; ``ticks``: the suspend-time hint of each try, ``mbarrier_wait_ticks``)."""
    ir.emit(f"nvgpu.mbarrier.try_wait.parity {group}[{ir.v(index)}], {parity}, {ticks} : {group_type}")


def fence_mbarrier_init(ir: Ir) -> None:
    """Make the mbarrier inits visible to the async proxy (TMA's complete_tx) and to the cluster."""
    ir.emit("nvvm.fence.mbarrier.init")


def fence_proxy_async_shared(ir: Ir) -> None:
    """Order this thread's generic-proxy shared-memory writes before later async-proxy accesses
    (wgmma reads, TMA stores) of the CTA's shared memory."""
    ir.emit(PROXY_FENCE_ASYNC_SHARED)


# ---- wgmma groups
def wgmma_fence(ir: Ir) -> None:
    """``wgmma.fence``: the registers and shared memory the next wgmmas read are written."""
    ir.emit("nvvm.wgmma.fence.aligned")


def wgmma_commit_group(ir: Ir) -> None:
    """Close the wgmmas issued since the last commit into one group."""
    ir.emit("nvvm.wgmma.commit.group.sync.aligned")


def wgmma_wait_group(ir: Ir, pending: int) -> None:
    """Wait until at most ``pending`` wgmma groups are still in flight."""
    ir.emit(f"nvvm.wgmma.wait.group.sync.aligned {pending}")


# ---- registers and named barriers
def setmaxnreg(ir: Ir, registers: int, increase: bool) -> None:
    """``setmaxnreg.{inc,dec}``: this warpgroup's registers per thread become ``registers``."""
    ir.emit(f"nvvm.setmaxregister {'increase' if increase else 'decrease'} {registers}")


def named_barrier_sync(ir: Ir, barrier_id, threads) -> None:
    """``bar.sync barrier_id, threads``: arrive and wait until ``threads`` threads arrived."""
    ir.emit(f"nvvm.barrier id = {barrier_id} number_of_threads = {threads}")


def named_barrier_arrive(ir: Ir, barrier_id, threads) -> None:
    """``bar.arrive barrier_id, threads``: arrive without waiting."""
    ir.emit(f"nvvm.barrier.arrive id = {barrier_id} number_of_threads = {threads}")
