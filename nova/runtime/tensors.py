"""Tensor interop: turn torch tensors, cupy arrays, ``__cuda_array_interface__`` (v2/v3) or
``__dlpack__`` objects into a ``TensorInfo`` (pointer, shape, strides, element type), validate it
for a GEMM operand, allocate outputs in the caller's framework and find the caller's stream.

Nothing here imports torch or cupy: an object is recognised as theirs only if the framework is
already in ``sys.modules``.  Every violation is a ``ValueError`` (shape, layout, placement,
alignment) or ``TypeError`` (kind of object, element type) naming the tensor and what is expected.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from dataclasses import dataclass

from nova import dtypes

_DL_CUDA, _DL_CUDA_MANAGED, _DL_CPU, _DL_CUDA_HOST = 2, 13, 1, 3


@dataclass(slots=True)
class TensorInfo:
    name: str                        # the argument's name in messages: "a", "b", "out", "bias"
    ptr: int                         # device address of element [0, 0]
    shape: tuple[int, ...]
    strides: tuple[int, ...]         # in elements
    storage: str                     # "f32" | "bf16" | "f16" | another name (rejected later)
    framework: str                   # "torch" | "cupy" | "cai" | "dlpack"
    device: int | None               # CUDA ordinal; None = unknown (the current device)
    keepalive: object = None         # the object (and DLPack capsule) backing ``ptr``

    def __str__(self) -> str:
        return f"{self.name} (shape {list(self.shape)}, {self.storage}, {self.framework})"


def describe(obj, name: str) -> TensorInfo:
    """Read ``obj``'s pointer/shape/strides/dtype without copying; reject host memory."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name, torch)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return _from_cupy(obj, name)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, name)
    if isinstance(obj, int) and not isinstance(obj, bool):
        raise TypeError(f"{name}: a raw device pointer carries no shape; use "
                        f"nova.runtime.matmul.launch_gemm(problem, a_ptr, b_ptr, c_ptr) for pointers")
    raise TypeError(f"{name}: cannot use a {type(obj).__module__}.{type(obj).__qualname__} as a GPU matrix; "
                    f"pass a torch tensor, a cupy array, or an object with __cuda_array_interface__ or __dlpack__")


def _from_torch(t, name, torch) -> TensorInfo:
    if not t.is_cuda:
        raise ValueError(f"{name}: tensor of shape {list(t.shape)} is on {t.device}, not on a CUDA GPU; "
                         f"move it with .cuda()")
    storage = dtypes.by_torch(torch).get(t.dtype) or str(t.dtype).removeprefix("torch.")
    return TensorInfo(name, t.data_ptr(), tuple(t.shape), tuple(t.stride()), storage, "torch", t.device.index, t)


def _from_cupy(a, name) -> TensorInfo:
    storage = dtypes.BY_NUMPY.get(str(a.dtype), str(a.dtype))
    item = a.dtype.itemsize
    return TensorInfo(name, a.data.ptr, tuple(a.shape), tuple(s // item for s in a.strides), storage, "cupy",
                      a.device.id, a)


def _from_cai(obj, name) -> TensorInfo:
    cai = obj.__cuda_array_interface__
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr = int(cai["data"][0])
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise TypeError(f"{name}: malformed __cuda_array_interface__ ({e!r})") from None
    if cai.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    storage = dtypes.BY_CAI.get(typestr[1:]) if typestr[:1] in "<|=" else None
    if storage is None and "bfloat16" in str(cai.get("descr", "")):
        storage = "bf16"
    storage = storage or f"typestr {typestr!r}"
    item = dtypes.ELEMENT_TYPES[storage].bytes if storage in dtypes.ELEMENT_TYPES else _typestr_bytes(typestr)
    if cai.get("strides") is None:
        strides = c_strides(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % item for s in byte_strides):
            raise ValueError(f"{name}: byte strides {list(byte_strides)} are not multiples of the "
                             f"{item}-byte element size")
        strides = tuple(s // item for s in byte_strides)
    return TensorInfo(name, ptr, shape, strides, storage, "cai", None, obj)


def _typestr_bytes(typestr: str) -> int:
    try:
        return max(1, int(typestr[2:]))
    except ValueError:
        return 1


# ---- DLPack: read the DLManagedTensor behind the capsule (no copy, no ownership transfer)
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def read_dlpack_capsule(capsule) -> dict:
    """Fields of an unconsumed ``"dltensor"`` capsule (the producer keeps ownership; we only read)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))   # DLManagedTensor starts with its DLTensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else c_strides(shape)
    return {"ptr": (t.data or 0) + t.byte_offset, "shape": shape, "strides": strides,
            "device": (t.device.device_type, t.device.device_id),
            "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes)}


def _from_dlpack(obj, name) -> TensorInfo:
    dev_type, dev_id = obj.__dlpack_device__()
    if int(dev_type) not in (_DL_CUDA, _DL_CUDA_MANAGED):
        where = {_DL_CPU: "the CPU", _DL_CUDA_HOST: "pinned host memory"}.get(int(dev_type), f"DLPack device {dev_type}")
        raise ValueError(f"{name}: {type(obj).__name__} is on {where}, not on a CUDA GPU")
    try:
        capsule = obj.__dlpack__(stream=1)      # 1: we launch on (or after) the legacy default stream
    except TypeError:
        capsule = obj.__dlpack__()
    d = read_dlpack_capsule(capsule)
    code, bits, lanes = d["dtype"]
    storage = dtypes.BY_DLPACK.get((code, bits)) if lanes == 1 else None
    storage = storage or f"DLPack dtype (code {code}, {bits} bits, {lanes} lanes)"
    return TensorInfo(name, d["ptr"], d["shape"], d["strides"], storage, "dlpack", int(dev_id), (obj, capsule))


def c_strides(shape) -> tuple[int, ...]:
    """Row-major (C-order) strides of ``shape``, in elements."""
    if len(shape) == 2:
        return (shape[1], 1)
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


# --------------------------------------------------------------------------- validation
def is_c_contiguous(shape, strides) -> bool:
    """Row-major dense; the stride of a size-1 dimension does not matter."""
    if len(shape) == 2:
        return (shape[1] == 1 or strides[1] == 1) and (shape[0] == 1 or strides[0] == shape[1])
    return all(n == 1 or s == e for n, s, e in zip(shape, strides, c_strides(shape)))


def gemm_operand(t: TensorInfo, expected: str) -> tuple[int, int, bool]:
    """``(rows, cols, transposed)`` of a 2-D operand.  ``transposed`` means ``t`` is the transpose of
    a C-contiguous matrix (column-major): the kernel reads it with trans_a/trans_b, no copy."""
    if len(t.shape) != 2:
        raise ValueError(f"{t.name}: expected a 2-D matrix {expected}, got shape {list(t.shape)} ({t.storage})")
    rows, cols = t.shape
    if is_c_contiguous(t.shape, t.strides):
        return rows, cols, False
    if is_c_contiguous((cols, rows), t.strides[::-1]):
        return rows, cols, True
    raise ValueError(f"{t.name}: shape {list(t.shape)} with strides {list(t.strides)} (elements) is neither "
                     f"row-major nor the transpose of a row-major matrix; make it contiguous first")


def batched_operand(t: TensorInfo, expected: str) -> tuple[int, int, int, bool, int]:
    """``(matrices, rows, cols, transposed, batch_stride)`` of a 2-D operand (1 matrix, stride 0) or
    of a 3-D batch ``[batch, rows, cols]`` of matrices each row-major or transposed (``gemm_operand``'s
    rule), ``batch_stride`` elements apart (0 for a batch of one)."""
    if len(t.shape) == 2:
        return (1, *gemm_operand(t, expected), 0)
    if len(t.shape) != 3:
        raise ValueError(f"{t.name}: expected a 2-D matrix {expected} or a 3-D batch [batch, {expected[1:-1]}], "
                         f"got shape {list(t.shape)} ({t.storage})")
    matrix = TensorInfo(t.name, t.ptr, t.shape[1:], t.strides[1:], t.storage, t.framework, t.device)
    rows, cols, transposed = gemm_operand(matrix, expected)
    stride = t.strides[0] if t.shape[0] > 1 else 0
    if stride < 0:
        raise ValueError(f"{t.name}: negative batch stride {stride} (elements); make it contiguous first")
    return t.shape[0], rows, cols, transposed, stride


def batch_count(a: int, b: int, a_info: TensorInfo, b_info: TensorInfo) -> int:
    """The batch of ``a`` and ``b`` matrices (torch.matmul's broadcasting: equal, or one of them 1)."""
    if a != b and 1 not in (a, b):
        raise ValueError(f"batch sizes differ: {a_info} holds {a} matrices, {b_info} {b} (equal, or one of them 1 "
                         "to broadcast)")
    return max(a, b)


def batched_output_stride(out: TensorInfo, batch: int, M: int, N: int) -> int:
    """Check the shape and layout of a batched output ``[batch, M, N]`` (each matrix row-major; its
    element type is ``check_output``'s) and return its batch stride (elements; M*N for a batch of one)."""
    if tuple(out.shape) != (batch, M, N):
        raise ValueError(f"{out}: expected shape [{batch}, {M}, {N}]")
    if not is_c_contiguous(out.shape[1:], out.strides[1:]):
        raise ValueError(f"{out}: each [{M}, {N}] matrix must be row-major contiguous, got strides {list(out.strides)}")
    stride = out.strides[0] if batch > 1 else M * N
    if stride < M * N:
        raise ValueError(f"{out}: batch stride {stride} (elements) makes its [{M}, {N}] matrices overlap")
    return stride


def gemm_dtype(a: TensorInfo, b: TensorInfo) -> str:
    """The GemmProblem dtype for inputs ``a`` and ``b`` (float32 -> tf32, bfloat16 -> bf16, float16 -> fp16)."""
    for t in (a, b):
        if t.storage not in dtypes.MODE_OF_STORAGE:
            raise TypeError(f"{t}: unsupported element type; Nova GEMM inputs are float32 (TF32 tensor cores), "
                            f"bfloat16 or float16")
    if a.storage != b.storage:
        raise TypeError(f"{a} and {b} have different element types; convert one of them")
    return dtypes.MODE_OF_STORAGE[a.storage]


def check_output(out: TensorInfo, M: int, N: int, out_dtype: str, batched: bool = False) -> None:
    """A 2-D output [M, N], row-major, of ``out_dtype``; ``batched``: only its element type (the shape
    and layout of a [batch, M, N] output are ``batched_output_stride``'s)."""
    if not batched and tuple(out.shape) != (M, N):
        raise ValueError(f"{out}: expected shape [{M}, {N}]")
    if out.storage != out_dtype:
        raise TypeError(f"{out}: expected element type {out_dtype}")
    if not batched and not is_c_contiguous(out.shape, out.strides):
        raise ValueError(f"{out}: must be row-major contiguous, got strides {list(out.strides)}")


def check_like_output(t: TensorInfo, out: TensorInfo) -> TensorInfo:
    """``t`` (a residual or pre-activation matrix) has ``out``'s shape, element type, strides and
    device: the epilogue reads and writes it where it stores C.  Returns ``t``."""
    if tuple(t.shape) != tuple(out.shape) or t.storage != out.storage or tuple(t.strides) != tuple(out.strides):
        raise ValueError(f"{t}: must match the output {out} (shape, element type and strides)")
    if t.device is not None and out.device is not None and t.device != out.device:
        raise ValueError(f"{t} is on cuda:{t.device} but the output is on cuda:{out.device}")
    return t


def check_bias(bias: TensorInfo, N: int, storage: str) -> None:
    if tuple(bias.shape) != (N,):
        raise ValueError(f"{bias}: expected a 1-D vector of length N={N}")
    if bias.storage != storage:
        raise TypeError(f"{bias}: expected element type {storage}")
    if N > 1 and bias.strides[0] != 1:
        raise ValueError(f"{bias}: must be contiguous, got stride {bias.strides[0]}")


def check_workspace(ws: TensorInfo, obj, needed: int, device: int | None, align: int, what: str) -> int:
    """The address of a caller's GEMM workspace ``ws`` (``obj``: the object it describes, whose
    ``nbytes`` is its size), after checking that it is contiguous device memory on ``device`` of at
    least ``needed`` bytes starting on an ``align``-byte boundary (ValueError naming the problem)."""
    nbytes = getattr(obj, "nbytes", None)
    if not is_c_contiguous(ws.shape, ws.strides) or nbytes is None:
        raise ValueError(f"workspace: {ws} must be one contiguous buffer with a size (nbytes)")
    if device is not None and ws.device is not None and ws.device != device:
        raise ValueError(f"workspace: on cuda:{ws.device}, the operands on cuda:{device}")
    if nbytes < needed:
        raise ValueError(f"workspace: {nbytes} bytes, the kernel of {what} needs {needed} "
                         f"(nova.runtime.tma.workspace_layout)")
    if ws.ptr % align:
        raise ValueError(f"workspace: device pointer {ws.ptr:#x} is not {align}-byte aligned")
    return ws.ptr


def check_alignment(name: str, ptr: int, vector: int, elem_bytes: int, access: str | None = None) -> None:
    """Vector loads/stores of ``vector`` elements need ``ptr`` aligned to ``vector * elem_bytes`` bytes
    (``access`` names them in the error, default "this kernel's N-element vector accesses")."""
    align = vector * elem_bytes
    if align > 1 and ptr % align:
        access = access or f"this kernel's {vector}-element vector accesses"
        raise ValueError(f"{name}: device pointer {ptr:#x} is not {align}-byte aligned, which {access} need "
                         "(a sliced view?); pass an aligned copy")


# --------------------------------------------------------------------------- framework services
# Each service comes as a function that returns a callable: matmul's signature cache keeps the
# callable, so a repeated call neither re-decides the framework nor rebuilds the arguments.
def stream_source(t: TensorInfo):
    """``() -> int``: the framework's current stream on ``t``'s device; 0 (legacy default stream) otherwise.
    The callable holds no reference to ``t``'s array (a cached one must not keep it alive)."""
    device = t.device
    if t.framework == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)    # ~10x cheaper than current_stream()
        if raw is None:
            return lambda: torch.cuda.current_stream(device).cuda_stream
        if device is None:
            return lambda: raw(torch.cuda.current_device())
        return functools.partial(raw, device)
    if t.framework == "cupy":
        cuda = sys.modules["cupy"].cuda
        return lambda: cuda.get_current_stream().ptr
    return lambda: 0


def allocator(like: TensorInfo, shape: tuple[int, ...], storage: str):
    """``() -> array``: a new uninitialised GPU array of ``shape`` in ``like``'s framework and
    device (holding no reference to ``like``'s array)."""
    if like.framework == "torch":
        torch = sys.modules["torch"]
        dt = dtypes.torch_dtype(torch, storage)
        return functools.partial(torch.empty, shape, dtype=dt, device=like.keepalive.device)
    if like.framework == "cupy":
        cupy = sys.modules["cupy"]
        if storage == "bf16":
            raise TypeError(f"cupy has no bfloat16 arrays; pass out=... for a bf16 result of {like}")
        dt, device = getattr(cupy, dtypes.element(storage).numpy), like.device

        def empty():
            with cupy.cuda.Device(device):
                return cupy.empty(shape, dtype=dt)
        return empty
    raise TypeError(f"Nova can allocate outputs only for torch and cupy inputs; pass out=... "
                    f"(a {storage} array of shape {list(shape)}) for {like}")


def empty(like: TensorInfo, shape: tuple[int, ...], storage: str):
    """A new uninitialised GPU array in ``like``'s framework and device."""
    return allocator(like, shape, storage)()
