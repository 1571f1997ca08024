"""Checked CUDA driver calls through ``cuda.bindings.driver``: device, context, module load, launch.

Why the *primary* context: torch and cupy use it too, so their device pointers are valid in ours and
our kernels can run on their streams.  Nothing here touches CUDA at import time, so
``import nova.runtime`` works on a machine without a GPU, a driver or cuda-python; the first call
that needs the driver raises ``NoGPUError`` there.

Every driver call goes through ``check(result, doing)``: a failure becomes a ``NovaRuntimeError``
that says what was being done, to which kernel and shape, and the CUDA error name and text.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import threading
from dataclasses import dataclass, field

NO_GPU_HINT = "Nova can still configure and compile without one — see `nova precompile`"
_DEFAULT_SMEM_LIMIT = 48 * 1024        # dynamic smem above this needs the opt-in attribute
_JIT_LOG_BYTES = 1 << 14


class NovaRuntimeError(RuntimeError):
    """A CUDA driver call (or a runtime precondition) failed; the message says what and where."""


class NoGPUError(NovaRuntimeError):
    """No usable NVIDIA GPU: cuda-python missing, driver library missing, or no device visible."""

    def __init__(self, reason: str):
        super().__init__(f"no NVIDIA GPU/driver found: {reason}; {NO_GPU_HINT}")


# --------------------------------------------------------------------------- driver bootstrap
_cu = None
_init_lock = threading.RLock()


MEMSETS = {4: "cuMemsetD32Async", 2: "cuMemsetD16Async", 1: "cuMemsetD8Async"}   # element bytes -> driver call


class _HotPath:
    """``cuLaunchKernelEx``, ``cuCtxGetCurrent`` and ``cuMemset{D32,D16,D8}Async`` called through ctypes
    on libcuda itself.

    cuda-bindings wraps every argument in Python objects (~several us per launch); the launch hot
    path needs these calls (a split-K launch zeroes C first), so Nova binds them directly once.  The
    first two are called without ``argtypes`` on purpose: every argument is a prebuilt ctypes object
    (see ``LaunchSlot``), which ctypes passes as is, while ``argtypes`` would convert each one again on
    every call.  The memsets take Python ints, so they have ``argtypes`` (an int without them is passed
    as a 32-bit C int).  ``None`` fields (an empty ``memsets``) mean "use cuda-bindings" (no libcuda,
    e.g. tests with a fake driver; ``launch_ex`` also without ``cuLaunchKernelEx``, i.e. a driver older
    than CUDA 12.0)."""

    def __init__(self, lib=None):
        self.launch_ex = self.ctx_get_current = None
        self.memsets = {}                        # element bytes -> cuMemsetD32/D16/D8Async
        self._out = threading.local()            # per thread: cuCtxGetCurrent's output and a pointer to it
        if lib is None:
            return
        self.launch_ex = getattr(lib, "cuLaunchKernelEx", None)   # (config*, CUfunction, void** params, void** extra)
        self.ctx_get_current = lib.cuCtxGetCurrent                # (CUcontext*)
        for fn in (self.launch_ex, self.ctx_get_current):
            if fn is not None:
                fn.restype = ctypes.c_int
        value = {4: ctypes.c_uint, 2: ctypes.c_ushort, 1: ctypes.c_ubyte}
        for elem_bytes, name in MEMSETS.items():
            fn = getattr(lib, name, None)
            if fn is not None:               # (CUdeviceptr, value, count, CUstream): argtypes, as ints are 32-bit
                fn.restype = ctypes.c_int
                fn.argtypes = (ctypes.c_uint64, value[elem_bytes], ctypes.c_size_t, ctypes.c_void_p)
                self.memsets[elem_bytes] = fn

    @classmethod
    def from_libcuda(cls) -> _HotPath:
        try:
            return cls(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            return cls()

    def current_context(self) -> int:
        """The calling thread's current ``CUcontext`` as an int (0: none).  The output buffer is per
        thread: ctypes releases the GIL during the call, so a shared one could be overwritten."""
        try:
            ctx, ref = self._out.buf
        except AttributeError:                  # this thread's first query
            ctx = ctypes.c_void_p()
            ref = ctypes.pointer(ctx)
            self._out.buf = (ctx, ref)
        err = self.ctx_get_current(ref)
        if err:
            raise NovaRuntimeError(f"querying the current context: CUDA error {err}")
        return ctx.value or 0


_hot = _HotPath()              # replaced by the libcuda-backed one when the driver initialises


def cuda():
    """The initialised ``cuda.bindings.driver`` module (``cuInit`` done once per process)."""
    global _cu
    if _cu is not None:
        return _cu
    with _init_lock:
        if _cu is not None:
            return _cu
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise NoGPUError(f"cuda-python is not installed ({e})") from None
        try:
            (err,) = driver.cuInit(0)
        except Exception as e:  # libcuda.so not found: cuda.pathfinder raises its own error type
            raise NoGPUError(f"the CUDA driver library could not be loaded ({e})") from None
        if err != driver.CUresult.CUDA_SUCCESS:
            raise NoGPUError(f"cuInit failed: {error_text(err, driver)}")
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            raise NoGPUError("the driver sees no CUDA device (check CUDA_VISIBLE_DEVICES)")
        global _hot
        _hot = _HotPath.from_libcuda()
        _cu = driver
        return _cu


def launches_through_ctypes() -> bool:
    """Whether launches call libcuda's ``cuLaunchKernelEx`` through ctypes (the fast path, once the
    driver is initialised) rather than through cuda-bindings."""
    return _hot.launch_ex is not None


def gpu_available() -> bool:
    """True when the driver initialises and at least one device is visible."""
    try:
        cuda()
        return True
    except NoGPUError:
        return False


def error_text(err, cu=None) -> str:
    """``"CUDA_ERROR_INVALID_VALUE: invalid argument"`` for a ``CUresult``."""
    cu = cu or _cu
    try:
        name = cu.cuGetErrorName(err)[1]
        desc = cu.cuGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        return f"{name}: {desc}"
    except Exception:
        return f"CUresult {int(err)}"


# CUDA_ERROR_STREAM_CAPTURE_* (900-908): an allocation or copy while a stream is being captured.
CAPTURE_HINT = ("; a stream is being captured into a CUDA graph, and this call needed a resource Nova "
                "creates on first use (a per-stream workspace or a tensor map for a new pointer): call "
                "nova.matmul once with the same tensors on the capture stream before capturing")


def check(result, doing: str):
    """Raise ``NovaRuntimeError("<doing>: <CUDA error>")`` on failure; return the call's outputs."""
    err = result[0] if isinstance(result, tuple) else result
    if err != _cu.CUresult.CUDA_SUCCESS:
        hint = CAPTURE_HINT if 900 <= int(err) <= 908 else ""
        raise NovaRuntimeError(f"{doing}: {error_text(err)}{hint}")
    if not isinstance(result, tuple) or len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


# --------------------------------------------------------------------------- devices
@dataclass
class Device:
    """One CUDA device with its retained primary context (kept for the life of the process)."""
    ordinal: int
    handle: object
    name: str
    cc: tuple[int, int]
    smem_optin: int                     # max dynamic smem per block with the opt-in attribute
    context: object = field(repr=False)

    @functools.cached_property
    def context_handle(self) -> int:
        return int(self.context)

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def make_current(self):
        """Bind our primary context to the calling thread unless it already is (torch's usually is).

        Returns the other context that was current (to hand to ``restore_context``), else None.
        The usual case costs one ctypes call (``cuCtxGetCurrent``) and an int comparison."""
        if _hot.ctx_get_current is not None and _hot.current_context() == self.context_handle:
            return None
        cu = _cu
        current = check(cu.cuCtxGetCurrent(), f"querying the current context on {self.name}")
        if current is not None and int(current) == int(self.context):
            return None
        check(cu.cuCtxSetCurrent(self.context), f"making the primary context of {self.name} current")
        return current if current is not None and int(current) != 0 else None


def restore_context(previous) -> None:
    """Put back the context ``Device.make_current`` replaced (another device's, e.g. torch's current one)."""
    if previous is not None:
        check(_cu.cuCtxSetCurrent(previous), "restoring the caller's CUDA context")


_devices: dict[int, Device] = {}


def get_device(ordinal: int | None = None) -> Device:
    """Device ``ordinal``; ``None`` means the device of the thread's current context, else device 0."""
    cu = cuda()
    if ordinal is None:
        ctx = check(cu.cuCtxGetCurrent(), "querying the current context")
        has_ctx = ctx is not None and int(ctx) != 0
        ordinal = int(check(cu.cuCtxGetDevice(), "querying the current device")) if has_ctx else 0
    dev = _devices.get(ordinal)
    if dev is not None:
        return dev
    with _init_lock:
        if ordinal not in _devices:
            _devices[ordinal] = _open_device(cu, ordinal)
        return _devices[ordinal]


def _open_device(cu, ordinal: int) -> Device:
    count = check(cu.cuDeviceGetCount(), "counting CUDA devices")
    if not 0 <= ordinal < count:
        raise NovaRuntimeError(f"CUDA device {ordinal} does not exist ({count} visible)")
    handle = check(cu.cuDeviceGet(ordinal), f"getting CUDA device {ordinal}")
    raw = check(cu.cuDeviceGetName(256, handle), f"reading the name of CUDA device {ordinal}")
    name = raw.split(b"\x00")[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    A = cu.CUdevice_attribute

    def attr(a):
        return int(check(cu.cuDeviceGetAttribute(a, handle), f"reading {a.name} of {name}"))

    cc = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    optin = attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    ctx = check(cu.cuDevicePrimaryCtxRetain(handle), f"retaining the primary context of {name}")
    return Device(ordinal, handle, name, cc, optin, ctx)


def arch_cc(arch: str) -> tuple[int, int, bool]:
    """``"sm_90a"`` -> ``(9, 0, True)``; ``"sm_86"`` -> ``(8, 6, False)``; ``"sm_100"`` -> ``(10, 0, False)``."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", arch.strip())
    if not m:
        raise ValueError(f"not a CUDA architecture name: {arch!r} (expected e.g. 'sm_90')")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


# --------------------------------------------------------------------------- kernels
class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h, CUDA 12.0+): geometry and stream of one ``cuLaunchKernelEx``."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


class LaunchSlot:
    """One thread's launch buffers for one kernel, built once and refilled on every launch:
    ``values[i]`` holds pointer argument i, ``params[i]`` points at it (the ``kernelParams`` array),
    ``config`` holds the geometry and the stream, ``args`` are ``cuLaunchKernelEx``'s arguments.

    Why per thread: a launch fills the buffers, then calls the driver, which copies them before it
    returns; ctypes releases the GIL during the call, so another thread launching the same kernel
    could refill a shared buffer in between.  Not re-entrant within a thread: a signal handler or a
    finalizer that launches the same kernel between the fill and the call would overwrite it (not
    worth a lock on every launch)."""
    __slots__ = ("values", "params", "config", "args")

    def __init__(self, kernel: LoadedKernel, n: int):
        self.values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.values)
        self.params = (ctypes.c_void_p * n)(*range(base, base + 8 * n, 8))
        self.config = LaunchConfig(*kernel.grid, *kernel.block, kernel.smem_bytes, None, None, 0)
        self.args = (ctypes.c_void_p(ctypes.addressof(self.config)), ctypes.c_void_p(kernel.function_handle),
                     ctypes.c_void_p(ctypes.addressof(self.params)), None)


@dataclass
class LoadedKernel:
    """A ``CUfunction`` ready to launch, with its launch geometry and a description for errors."""
    function: object = field(repr=False)
    module: object = field(repr=False)
    device: Device
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    what: str                                   # e.g. "gemm 4096x4096x4096 tf32 NN -> f32"
    loaded_from: str                            # "cubin" | "ptx"
    jit_log: str = ""
    launch_slots: threading.local = field(default_factory=threading.local, repr=False, compare=False)  # per thread

    @functools.cached_property
    def function_handle(self) -> int:
        """The raw ``CUfunction`` pointer (for the ctypes launch path)."""
        return int(self.function)

    def geometry(self) -> str:
        g, b = self.grid, self.block
        block = f"{b[0]}" if b[1:] == (1, 1) else f"{b[0]}x{b[1]}x{b[2]}"
        return f"grid {g[0]}x{g[1]}x{g[2]}, block {block}, smem {self.smem_bytes / 1024:.0f} KB"

    def launch(self, pointers, stream: int = 0) -> None:
        """Launch with bare 64-bit pointer arguments, asynchronously on ``stream`` (0 = legacy default).

        Hot path: refill this thread's ``LaunchSlot`` and make one ``cuLaunchKernelEx`` ctypes call."""
        try:
            slot = self.launch_slots.slot
            slot.values[:] = pointers
        except (AttributeError, ValueError):    # this thread's first launch, or another argument count
            slot = self.launch_slots.slot = LaunchSlot(self, len(pointers))
            slot.values[:] = pointers
        slot.config.hStream = stream
        if _hot.launch_ex is not None:
            err = _hot.launch_ex(*slot.args)
        else:
            cu = _cu
            g, b = self.grid, self.block
            (err,) = cu.cuLaunchKernel(self.function, g[0], g[1], g[2], b[0], b[1], b[2], self.smem_bytes,
                                       cu.CUstream(stream), ctypes.addressof(slot.params), 0)
        if err:
            raise NovaRuntimeError(f"launching {self.what} ({self.geometry()}) on {self.device.name}: "
                                   f"{error_text(_cu.CUresult(int(err)))}")


_kernels: dict[tuple[int, str], LoadedKernel] = {}


def load_kernel(artifact, device: Device, what: str, key: str | None = None) -> LoadedKernel:
    """Load ``artifact`` (a ``KernelArtifact``) into ``device``'s primary context, once per process.

    Uses the cubin when its arch matches the device exactly, else JIT-compiles the PTX (the JIT
    error log is part of the error).  Sets the dynamic-smem opt-in attribute above 48 KB.
    """
    key = key or hashlib.sha256(artifact.ptx.encode() + (artifact.cubin or b"")).hexdigest()
    cached = _kernels.get((device.ordinal, key))
    if cached is not None:
        return cached
    cu = cuda()
    major, minor, arch_specific = arch_cc(artifact.arch)
    if (major, minor) > device.cc or (arch_specific and (major, minor) != device.cc):
        raise NovaRuntimeError(
            f"loading {what}: the kernel was generated for {artifact.arch} but {device.name} is {device.arch}; "
            f"configure for this GPU's target (NOVA_TARGET or target=...)")
    smem = int(artifact.smem_bytes)
    if smem > device.smem_optin:
        raise NovaRuntimeError(
            f"loading {what}: the kernel needs {smem} B ({smem / 1024:.1f} KB) of dynamic shared memory but "
            f"{device.name} allows at most {device.smem_optin} B per block; configure for this GPU's target")
    previous = device.make_current()
    try:
        use_cubin = artifact.cubin is not None and (major, minor) == device.cc
        image = artifact.cubin if use_cubin else artifact.ptx.encode()
        module, jit_log = _load_module(cu, image, f"loading {what} from {'cubin' if use_cubin else 'PTX'} "
                                                   f"({artifact.arch}) on {device.name}")
        function = check(cu.cuModuleGetFunction(module, artifact.name.encode()),
                         f"finding kernel {artifact.name!r} of {what} in its module")
        if smem > _DEFAULT_SMEM_LIMIT:
            check(cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        smem),
                  f"allowing {smem} B of dynamic shared memory for {what} on {device.name}")
    finally:
        restore_context(previous)
    kernel = LoadedKernel(function, module, device, artifact.name, tuple(artifact.grid), tuple(artifact.block),
                          smem, what, "cubin" if use_cubin else "ptx", jit_log)
    _kernels[(device.ordinal, key)] = kernel
    return kernel


def _load_module(cu, image: bytes, doing: str):
    """``cuModuleLoadDataEx`` with JIT error/info logs; returns (module, info log)."""
    buf = ctypes.create_string_buffer(image)             # NUL-terminated (PTX needs it), kept alive here
    err_log = b"\x00" * _JIT_LOG_BYTES                    # cuda.bindings wants bytes; the driver writes into them
    info_log = b"\x00" * _JIT_LOG_BYTES
    O = cu.CUjit_option
    opts = [O.CU_JIT_ERROR_LOG_BUFFER, O.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            O.CU_JIT_INFO_LOG_BUFFER, O.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
    try:
        result = cu.cuModuleLoadDataEx(ctypes.addressof(buf), len(opts), opts,
                                       [err_log, _JIT_LOG_BYTES, info_log, _JIT_LOG_BYTES])
    except Exception:                                    # option marshalling differs across cuda-bindings versions
        result = cu.cuModuleLoadData(ctypes.addressof(buf))
        err_log = info_log = b""
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        log = _c_string(err_log)
        raise NovaRuntimeError(f"{doing}: {error_text(result[0])}" + (f"\nJIT error log:\n{log}" if log else ""))
    return result[1], _c_string(info_log)


def _c_string(buf: bytes) -> str:
    return bytes(buf).split(b"\x00")[0].decode(errors="replace").strip()


def memset_async(ptr: int, count: int, elem_bytes: int, stream: int, doing: str) -> None:
    """Zero ``count`` elements of ``elem_bytes`` (4, 2 or 1) at ``ptr``, asynchronously on ``stream``:
    libcuda's ``cuMemset*Async`` through ctypes where the driver is loaded (split-K's zeroing of C on
    an eager call's path), else through cuda-bindings."""
    fn = _hot.memsets.get(elem_bytes)
    if fn is not None:
        err = fn(ptr, 0, count, stream)
        if err:
            check(_cu.CUresult(int(err)), doing)
        return
    cu = _cu
    fn = getattr(cu, MEMSETS[elem_bytes])
    check(fn(cu.CUdeviceptr(ptr), 0, count, cu.CUstream(stream)), doing)


def copy_async(dst: int, src: int, nbytes: int, to_host: bool, stream: int, doing: str) -> None:
    """Copy ``nbytes`` from device memory to page-locked host memory (``to_host``) or back,
    asynchronously on ``stream``: one driver memcpy, which a CUDA graph captures as a copy node (no
    bookkeeping of the caching host allocator, which stream capture does not take everywhere)."""
    cu = cuda()
    if to_host:
        check(cu.cuMemcpyDtoHAsync(dst, cu.CUdeviceptr(src), nbytes, cu.CUstream(stream)), doing)
    else:
        check(cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(dst), src, nbytes, cu.CUstream(stream)), doing)


def synchronize(doing: str = "waiting for the GPU") -> None:
    """``cuCtxSynchronize`` on the current context (tests and benchmarks; matmul itself is async)."""
    check(cuda().cuCtxSynchronize(), doing)
