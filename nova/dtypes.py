"""The one table of element types: every name, size and code Nova gives an element type.

A row is an element type as the hardware and the generated code name it (PTX/MLIR spelling):
the storage types ``f32``, ``bf16``, ``f16`` (and ``f64``: float64 references, and inputs Nova
recognises to reject them), and ``tf32``, the tensor cores' 19-bit format, which lives in 32-bit
``f32`` words in memory (a TMA tensor map of type ``tf32`` rounds to it).

A GEMM's ``dtype`` (``GemmProblem.dtype``) names a tensor-core *mode*: ``tf32``, ``bf16`` or
``fp16``.  ``MODES[dtype]`` is the element type its tensor cores read; ``.storage`` is what A and
B hold in memory (the default output storage too: torch.matmul's rule).  The names differ for
half precision only (mode ``fp16``, element type ``f16``) and both are part of the kernel cache's
keys, so neither changes.

Everything else in Nova (problem statements, tensor interop, TMA descriptors, the hardware
model's instruction shapes, code generation, the device checks) looks its facts up here.  Nothing
here imports torch, numpy or MLIR: framework dtypes are named by attribute.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

DL_FLOAT, DL_BFLOAT = 2, 4                  # DLPack DLDataTypeCode


@dataclass(frozen=True)
class ElementType:
    name: str                              # "f32", "tf32", "bf16", "f16", "f64"
    bytes: int                             # bytes per element in memory
    storage: str                           # the storage type holding it ("tf32" lives in "f32" words)
    torch: str | None = None               # torch dtype attribute (torch.float32); None: not a storage type
    numpy: str | None = None               # str() of the numpy/cupy dtype
    cai: str | None = None                 # __cuda_array_interface__ typestr without byte order ("f4")
    dlpack: tuple[int, int] | None = None  # (DLDataTypeCode, bits)
    tensor_map: int | None = None          # CUtensorMapDataType (cuda.h)
    mode: str | None = None                # the GEMM dtype (tensor-core mode) whose instructions read this type
    mma_k: int | None = None               # K of one mma.sync / wgmma instruction on it (32 bytes of K)
    accumulator: str | None = None         # the tensor cores' accumulator type in that mode
    tolerance: float | None = None         # mode: relative Frobenius error vs float64 a correct GEMM stays under
    exact_tolerance: float | None = None   # output storage: error vs the exact product of the rounded inputs
                                           # (accumulation and output rounding only; device checks)


ELEMENT_TYPES: dict[str, ElementType] = {e.name: e for e in (
    ElementType("f32", 4, "f32", "float32", "float32", "f4", (DL_FLOAT, 32), tensor_map=7, exact_tolerance=1e-4),
    ElementType("tf32", 4, "f32", tensor_map=11, mode="tf32", mma_k=8, accumulator="f32", tolerance=5e-4),
    ElementType("bf16", 2, "bf16", "bfloat16", "bfloat16", None, (DL_BFLOAT, 16), tensor_map=9,
                mode="bf16", mma_k=16, accumulator="f32", tolerance=1e-2, exact_tolerance=1e-2),
    ElementType("f16", 2, "f16", "float16", "float16", "f2", (DL_FLOAT, 16), tensor_map=6,
                mode="fp16", mma_k=16, accumulator="f32", tolerance=1e-2, exact_tolerance=2e-3),
    ElementType("f64", 8, "f64", "float64", "float64", "f8", (DL_FLOAT, 64)),
)}

# Views of the table (no new facts)
MODES: dict[str, ElementType] = {e.mode: e for e in ELEMENT_TYPES.values() if e.mode}    # tf32, bf16, fp16
OUT_STORAGES: tuple[str, ...] = tuple(dict.fromkeys(e.storage for e in MODES.values()))   # f32, bf16, f16
MODE_OF_STORAGE: dict[str, str] = {e.storage: m for m, e in MODES.items()}                # f32 -> tf32, ...
BY_NUMPY: dict[str, str] = {e.numpy: e.name for e in ELEMENT_TYPES.values() if e.numpy}
BY_CAI: dict[str, str] = {e.cai: e.name for e in ELEMENT_TYPES.values() if e.cai}
BY_DLPACK: dict[tuple[int, int], str] = {e.dlpack: e.name for e in ELEMENT_TYPES.values() if e.dlpack}


def element(name: str) -> ElementType:
    """The row of element type ``name`` ("f32", "tf32", "bf16", "f16", "f64")."""
    return ELEMENT_TYPES[name]


def mode(dtype: str) -> ElementType:
    """The element type a GEMM of ``dtype`` ("tf32", "bf16", "fp16") feeds its tensor cores."""
    return MODES[dtype]


def torch_dtype(torch, name: str):
    """The torch dtype holding element type or GEMM mode ``name``: ``torch.float32`` for "f32" and
    "tf32", ``torch.bfloat16`` for "bf16", ``torch.float16`` for "f16" and "fp16"."""
    e = ELEMENT_TYPES.get(name) or MODES[name]
    return getattr(torch, ELEMENT_TYPES[e.storage].torch)


@lru_cache(maxsize=None)
def by_torch(torch) -> dict:
    """``{torch.float32: "f32", ...}`` for the storage types torch has (built once per torch module)."""
    return {getattr(torch, e.torch): e.name for e in ELEMENT_TYPES.values() if e.torch and hasattr(torch, e.torch)}
