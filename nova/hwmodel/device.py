"""Build a ``GPUModel`` from the live GPU through cuda-python device attributes.

Counts, capacities, clocks and bus width come from the driver; tensor-core rates per SM per clock
come from the preset of the same compute-capability family (the driver does not report them).
"""
from __future__ import annotations

from dataclasses import replace

from nova.hwmodel.model import GPUModel, Quantity as Q, TargetError

# compute capability -> preset whose per-SM tensor-core rates and features apply
_FAMILY = {(8, 0): "a100", (8, 6): "rtx3060", (8, 7): "rtx3060", (8, 9): "rtx4090", (9, 0): "h100"}


def _no_gpu(reason: str) -> TargetError:
    from nova.hwmodel.presets import PRESETS
    return TargetError(f"no GPU to model ({reason}); use a preset instead: --target {'|'.join(PRESETS)}")


def from_device(ordinal: int = 0) -> GPUModel:
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        raise _no_gpu(f"cuda-python is not installed: {e}") from None
    try:
        (err,) = cu.cuInit(0)
    except Exception as e:  # libcuda.so missing
        raise _no_gpu(f"the CUDA driver could not be loaded: {e}") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise _no_gpu(f"cuInit failed with {err.name}")
    err, count = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or count <= ordinal:
        raise _no_gpu(f"{count if err == cu.CUresult.CUDA_SUCCESS else 0} CUDA devices visible")
    _, dev = cu.cuDeviceGet(ordinal)
    A = cu.CUdevice_attribute

    def attr(name):
        err, v = cu.cuDeviceGetAttribute(getattr(A, name), dev)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise TargetError(f"reading device attribute {name} failed: {err.name}")
        return int(v)

    _, raw_name = cu.cuDeviceGetName(256, dev)
    name = raw_name.split(b"\x00")[0].decode(errors="replace") if isinstance(raw_name, bytes) else str(raw_name)
    cc = (attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"), attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
    return model_from_attributes(name, cc, {
        "sm_count": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        "clock_khz": attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
        "mem_clock_khz": attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
        "bus_width_bits": attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
        "l2_bytes": attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        "smem_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        "smem_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        "regs_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"),
        "max_threads_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
        "max_blocks_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"),
    })


def model_from_attributes(name: str, cc: tuple[int, int], a: dict) -> GPUModel:
    """Pure part of ``from_device`` (testable without a GPU)."""
    from nova.hwmodel.presets import PRESETS
    family = _FAMILY.get(tuple(cc))
    if family is None:
        raise TargetError(f"{name} has compute capability {cc[0]}.{cc[1]}; Nova supports 8.0, 8.6, 8.7, 8.9 and 9.0")
    base = PRESETS[family]
    src = f"cuDeviceGetAttribute on {name}"
    q = dict(base.q)
    # DDR: two transfers per memory clock (the driver reports the memory clock in kHz).
    dram = 2 * a["mem_clock_khz"] * 1e3 * a["bus_width_bits"] / 8
    q.update({
        "sm_count": Q(a["sm_count"], "SMs", src),
        "clock_hz": Q(a["clock_khz"] * 1e3, "Hz", src + " (max SM clock)"),
        "l2_bytes": Q(a["l2_bytes"], "B", src),
        "dram_bw": Q(dram, "B/s", src + ": 2 x memory clock x bus width"),
        "smem_per_sm": Q(a["smem_per_sm"], "B", src),
        "smem_per_block": Q(a["smem_per_block"], "B", src + " (opt-in)"),
        "regs_per_sm": Q(a["regs_per_sm"], "regs", src),
        "max_threads_per_sm": Q(a["max_threads_per_sm"], "threads", src),
        "max_blocks_per_sm": Q(a["max_blocks_per_sm"], "blocks", src),
        "l2_bytes_per_clk": Q(base.l2_bytes_per_clk / base.sm_count * a["sm_count"], "B/clk",
                              f"[EST] per-SM L2 rate of {family} times {a['sm_count']} SMs"),
    })
    arch = f"sm_{cc[0]}{cc[1]}"
    return replace(base, name="device", full_name=name, arch=arch, cc=tuple(cc), q=q)
