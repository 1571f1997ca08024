"""User-facing GEMM: ``matmul(a, b)`` on framework tensors and ``launch_gemm(problem, pointers...)``.

Flow on the first call for a (problem, target, device): resolve the target (``NOVA_TARGET``, else
the device name matched to a preset, else ``hwmodel.from_device()``), ``configure`` a schedule,
look the structural key up in the kernel cache (compile on a miss unless offline), load the
``CUfunction``.  The result is memoised per process, so later calls skip the configurator (sympy),
hashing and disk entirely.  Calls on plain torch tensors go further: a signature cache keyed on
dtypes, shapes, strides, devices and options (``signature``) skips matmul's checks as well, so a
repeated call costs a few attribute reads, one dict lookup, the alignment check and the launch.
"""
from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass, field

from nova import dtypes, options
from nova.kernels.gemm.problem import GemmProblem
from nova.runtime import driver, tensors
from nova.kernels.gemm.family import get_or_compile
from nova.runtime.cache import KernelCache, summary_line
from nova.runtime.driver import Device, LoadedKernel, NovaRuntimeError
from nova.runtime.memo import memoized
from nova.runtime.tma import WORKSPACE_ALIGN

# Device name (cuDeviceGetName) -> hwmodel preset.  Variants with other SM counts fall through to
# from_device(): "RTX 3060 Ti", "RTX 4090 D", "GH200".
DEVICE_PRESETS = (
    (re.compile(r"(?<![A-Z0-9])H200(?![0-9])", re.I), "h200"),
    (re.compile(r"(?<![A-Z0-9])H100(?![0-9])", re.I), "h100"),
    (re.compile(r"(?<![A-Z0-9])A100(?![0-9])", re.I), "a100"),
    (re.compile(r"RTX\s*4090(?!\s*D\b)(?![0-9])", re.I), "rtx4090"),
    (re.compile(r"RTX\s*3060(?!\s*Ti\b)(?![0-9])", re.I), "rtx3060"),
)


def preset_for_device_name(name: str) -> str | None:
    """``"NVIDIA H200"`` -> ``"h200"``; None when no preset describes this GPU."""
    for pattern, preset in DEVICE_PRESETS:
        if pattern.search(name):
            return preset
    return None


# Indirections to the layers above (imported lazily; tests replace them).
def _get_target(name_or_model):
    from nova.hwmodel import get_target
    return get_target(name_or_model)


def _from_device(ordinal: int):
    from nova.hwmodel import from_device
    return from_device(ordinal)


def configure_schedule(problem: GemmProblem, target, eager: bool = False):
    """The configurator's schedule for ``problem`` on ``target``: the one the cache key hashes.
    ``nova precompile`` and the runtime both call this, so their keys agree.  ``eager``: the kernel of
    a call from Python (host time per launch counted, ``configure(eager=True)``); else the device
    pick (a compiled step's launches, a captured graph)."""
    from nova.configurator import configure
    return configure(problem, target, eager=eager).schedule


def precompile_gemms(problems, target, cache, log=print, label: str = "", eager: bool = True) -> dict:
    """Configure and compile ``problems`` for ``target`` into ``cache`` (what ``nova precompile``
    does for a shape list and for a whole step); one line per kernel through ``log``.  ``eager``
    (the default): also the kernel an eager call picks where it differs from the device pick (a
    shape list's problems are ``nova.matmul`` calls, eager or captured); a compiled step's launches
    take the device pick only (``eager=False``).  A problem that fails is reported and counted
    (``NOVA_DEBUG=1`` raises it) and the batch goes on; a missing MLIR stops it.  Returns the counts:
    compiled, cached, failed."""
    from nova.configurator import memoized as configured_once
    from nova.runtime.cache import precompile_each

    def one(item):
        problem, eager_call = item
        _, key, status = get_or_compile(problem, configure_schedule(problem, target, eager=eager_call), target,
                                        cache, offline=False)
        return key, status
    with configured_once():           # each problem derived once, though its picks are compared, then built
        items = []
        for problem in problems:
            items.append((problem, False))
            if eager and _eager_differs(problem, target):
                items.append((problem, True))
        return precompile_each(items, one, lambda item: summary_line(item[0], target) + " [eager call]" * item[1],
                               log, label)


def _eager_differs(problem: GemmProblem, target) -> bool:
    """Whether an eager call of ``problem`` runs another kernel than the device pick (False where the
    problem does not configure: the device pick's line reports why)."""
    try:
        return configure_schedule(problem, target, eager=True) != configure_schedule(problem, target)
    except Exception:       # reported by the device pick's own line in precompile_gemms
        return False


# --------------------------------------------------------------------------- target resolution
def resolve_target(target=None, device: Device | None = None):
    """The ``GPUModel`` to configure for: ``target`` (preset name or model) if given, else
    ``$NOVA_TARGET``, else the preset matching the device's name, else ``hwmodel.from_device()``."""
    if target is not None:
        return _get_target(target)
    configured = options.current().target
    if configured:
        return _get_target(configured)
    device = device or driver.get_device()
    preset = preset_for_device_name(device.name)
    return _get_target(preset) if preset else _from_device(device.ordinal)


def default_deterministic(opts: options.Options) -> bool:
    """Whether a GEMM that does not say must be deterministic (bitwise the same run to run):
    ``NOVA_DETERMINISTIC``, or ``torch.use_deterministic_algorithms(True)`` when torch is imported."""
    return opts.deterministic or torch_deterministic()


def torch_deterministic() -> bool:
    """``torch.are_deterministic_algorithms_enabled()``, False before torch is imported."""
    enabled = getattr(sys.modules.get("torch"), "are_deterministic_algorithms_enabled", None)
    return enabled is not None and enabled()


_targets: dict[tuple, object] = {}


def _runtime_target(target, device: Device):
    """``resolve_target`` memoised (``NOVA_TARGET`` is part of the memo key, so changing it works)."""
    if target is not None and not isinstance(target, str):
        return target
    memo = (target, options.current().target, device.ordinal)
    model = _targets.get(memo)
    if model is None:
        model = _targets[memo] = resolve_target(target, device)
    return model


# --------------------------------------------------------------------------- resolved kernels
@dataclass
class ResolvedKernel:
    """A loaded kernel for one problem on one device, with what a launch needs to know."""
    problem: GemmProblem
    target: object
    schedule: object
    key: str
    status: str                      # "cached" | "compiled" (how the artifact was obtained)
    kernel: LoadedKernel
    slots: tuple[str, ...]           # kernel argument order, lower-case: ("a", "b", "c", *epilogue operands)
    zero_output: bool
    hopper: object = None            # nova.runtime.tma.HopperGemm for wgmma artifacts (tensor-map ABI)
    skinny: object = None            # nova.runtime.skinny.SkinnyGemm for the skinny kernel (and its workspace)
    alignment: tuple[int, ...] = field(init=False, repr=False)   # bytes A, B, C, bias, R, P must be aligned to
    epilogue_given: tuple[bool, ...] = field(init=False, repr=False)   # which of bias, R, P run takes

    def __post_init__(self):
        self.alignment = tuple(v * e for _, v, e in self.vector_accesses())
        p = self.problem
        self.epilogue_given = (p.bias, p.residual, p.preactivation)

    def vector_accesses(self) -> tuple[tuple[str, int, int], ...]:
        """(argument, vector elements, element bytes) of the kernel's pointer arguments: the mma.sync
        kernel's cp.async/store widths; the Hopper kernel's TMA (16-byte bases: A and B checked when
        their maps are encoded, C by ``vector_c`` = 16 bytes under the TMA-store epilogue) and
        epilogue stores (it reads the bias one element at a time); the skinny kernel's vector loads of B
        and of A's staging (``a_vec``; C and the bias element by element).  R and P are read and written as C is (its vector; the
        TMA-store epilogue never has them)."""
        s, p = self.schedule, self.problem
        if self.skinny is not None:
            return (("A", s.a_vec, p.in_bytes), ("B", s.vec, p.in_bytes), ("C", 1, p.out_bytes),
                    ("bias", 1, dtypes.element(p.bias_dtype).bytes))
        bias_vector = 1 if self.hopper is not None else s.vector_c
        return (("A", s.vector_a, p.in_bytes), ("B", s.vector_b, p.in_bytes), ("C", s.vector_c, p.out_bytes),
                ("bias", bias_vector, dtypes.element(p.bias_dtype).bytes), ("residual", s.vector_c, p.out_bytes),
                ("preactivation", s.vector_c, p.out_bytes))

    def check_alignment(self, *pointers) -> None:
        """Raise the ValueError of the first pointer the kernel's vector accesses cannot use."""
        tma_c = self.hopper is not None and self.schedule.hopper.tma_store
        for (name, vector, elem_bytes), ptr in zip(self.vector_accesses(), pointers):
            if ptr is not None:
                access = "the TMA store of C (its tensor map's base)" if tma_c and name == "C" else None
                tensors.check_alignment(name, ptr, vector, elem_bytes, access)

    @property
    def workspace_bytes(self) -> int:
        """Device bytes one launch may use as its workspace (``nova.runtime.tma.workspace_layout``; 0: none)."""
        return self.hopper.workspace_bytes if self.hopper is not None else 0

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int | None = None, stream: int = 0,
            workspace: int | None = None, residual_ptr: int | None = None, preactivation_ptr: int | None = None) -> None:
        """Enqueue (zero C if split-K needs it, then) the kernel on ``stream``; no synchronisation.
        Per call: one modulo per pointer (a sliced view may be misaligned), the context check, the launch(es).
        The mma.sync kernel's arguments are (a, b, c[, bias]) in that order (``slots``, checked at load).
        ``workspace``: the address of ``workspace_bytes`` bytes the launch may overwrite (else a Hopper
        kernel uses its per-stream buffer).  ``residual_ptr`` and ``preactivation_ptr``: R and P of a
        problem that has them (laid out as C)."""
        p = self.problem
        pointers = (bias_ptr, residual_ptr, preactivation_ptr)
        if (bias_ptr is not None, residual_ptr is not None, preactivation_ptr is not None) != self.epilogue_given:
            got = [name for name, ptr in zip(("bias", "residual", "preactivation"), pointers) if ptr is not None]
            raise ValueError(f"{p.describe()} takes {', '.join(p.epilogue_operands) or 'no epilogue operand'}: "
                             f"got {', '.join(got) or 'none'}")
        epilogue = tuple(ptr for ptr in pointers if ptr is not None)
        hopper = self.hopper
        al = self.alignment
        if a_ptr % al[0] or b_ptr % al[1] or c_ptr % al[2] or (bias_ptr is not None and bias_ptr % al[3]) or \
                (residual_ptr is not None and residual_ptr % al[4]) or \
                (preactivation_ptr is not None and preactivation_ptr % al[5]):
            self.check_alignment(a_ptr, b_ptr, c_ptr, bias_ptr, residual_ptr, preactivation_ptr)
        previous = self.kernel.device.make_current()
        try:
            if self.zero_output:      # split-K slices add into C (both kernel families)
                driver.memset_async(c_ptr, p.M * p.N, p.out_bytes, stream,
                                    f"zeroing the output of {p.describe()} before its split-K launch")
            if hopper is not None and workspace is not None:    # Hopper: prep passes + tensor maps + wgmma kernel
                hopper.run(a_ptr, b_ptr, c_ptr, epilogue, stream, workspace=workspace)
            elif hopper is not None:
                hopper.run(a_ptr, b_ptr, c_ptr, epilogue, stream)
            elif self.skinny is not None:     # the skinny kernel (its K slices' workspace)
                self.skinny.run(a_ptr, b_ptr, c_ptr, epilogue, stream)
            else:
                self.kernel.launch((a_ptr, b_ptr, c_ptr) + epilogue, stream)
        finally:
            if previous is not None:
                driver.restore_context(previous)


_kernels: dict[tuple, ResolvedKernel] = {}
_problems: dict[tuple, GemmProblem] = {}      # matmul's argument tuple -> validated GemmProblem
_lock = threading.RLock()


def resolve_kernel(problem: GemmProblem, target=None, device: Device | None = None,
                   cache: KernelCache | None = None, eager: bool = False) -> ResolvedKernel:
    """Configure, fetch or compile, and load ``problem``'s kernel (``eager``: an eager call's pick,
    ``configure_schedule``); memoised per process."""
    device = device or driver.get_device()
    model = _runtime_target(target, device)
    memo = (problem, model.name, model.arch, device.ordinal, eager)

    def make():
        schedule = configure_schedule(problem, model, eager)
        artifact, key, status = get_or_compile(problem, schedule, model, cache)
        return load_resolved(problem, model, schedule, artifact, key, status, device)
    return memoized(_kernels, _lock, memo, make)


def load_resolved(problem: GemmProblem, model, schedule, artifact, key: str, status: str,
                  device: Device) -> ResolvedKernel:
    """Load ``artifact`` onto ``device`` as a ``ResolvedKernel``: a Hopper schedule's artifact
    (tensor-map ABI ``(tmap_a*, tmap_b*, C*[, bias*])``) through ``nova.runtime.tma.HopperGemm``, a
    skinny one through ``nova.runtime.skinny.SkinnyGemm``, an mma.sync one after checking that it
    takes ``(a, b, c, *problem.epilogue_operands)``."""
    slots = tuple(p.lower() for p in artifact.params)
    if schedule.kernel == "skinny":
        from nova.runtime.skinny import SkinnyGemm
        expected = ("a", "b", "c") + (("bias",) if problem.bias else ()) + \
            (("w", "t") if artifact.meta.get("workspace_bytes") else ())
        if slots != expected:
            raise NovaRuntimeError(f"kernel ABI mismatch for {summary_line(problem, model)}: the skinny artifact takes "
                                   f"{artifact.params}, the runtime passes {expected} (stale cache? bump the skinny "
                                   "family's ABI)")
        skinny = SkinnyGemm(artifact, device, problem.describe(), key)
        return ResolvedKernel(problem, model, schedule, key, status, skinny.main, slots, False, skinny=skinny)
    if schedule.hopper is not None:
        from nova.runtime.tma import HopperGemm
        hop = HopperGemm(artifact, schedule, device, problem.describe(), key)
        return ResolvedKernel(problem, model, schedule, key, status, hop.main, slots, bool(artifact.zero_output), hop)
    expected = ("a", "b", "c") + problem.epilogue_operands
    if slots != expected:
        raise NovaRuntimeError(f"kernel ABI mismatch for {summary_line(problem, model)}: the artifact takes "
                               f"{artifact.params}, the runtime passes {expected} (stale cache? bump the GEMM family's ABI)")
    kernel = driver.load_kernel(artifact, device, problem.describe(), key)
    return ResolvedKernel(problem, model, schedule, key, status, kernel, slots, bool(artifact.zero_output))


def reset() -> None:
    """Forget memoised targets, kernels and call signatures (after changing NOVA_CACHE_DIR, NOVA_TARGET,
    NOVA_DETERMINISTIC or offline mode in a running process)."""
    global _torch_types
    with _lock:
        _kernels.clear()
        _targets.clear()
        _problems.clear()
        _plans.clear()
        _torch_types = frozenset()


# --------------------------------------------------------------------------- signature cache
@dataclass(frozen=True, slots=True)
class Plan:
    """What a repeated ``matmul`` call signature needs per call, decided once by the general path."""
    resolved: ResolvedKernel
    empty: object                    # () -> a new output tensor (shape, dtype and device bound)
    stream: object                   # () -> the framework's current stream on the tensors' device


_plans: dict[tuple, Plan] = {}
_torch_types: frozenset = frozenset()


def plain_torch_types() -> frozenset:
    """``torch.Tensor`` and ``torch.nn.Parameter`` (empty before torch is imported): exact types
    only, since a subclass may redefine the attributes a signature reads."""
    global _torch_types
    if not _torch_types and "torch" in sys.modules:
        torch = sys.modules["torch"]
        _torch_types = frozenset((torch.Tensor, torch.nn.Parameter))
    return _torch_types


def signature(a, b, out, bias, activation, target, tf32_fast, deterministic=False, workspace=None,
              residual=None, preactivation=None, round_through=False, activation_grad=False,
              eager=True) -> tuple | None:
    """The signature-cache key of a ``matmul`` call on plain torch tensors; None for anything else.

    It holds every input of matmul's checks and kernel choice except the data pointers: each
    tensor's dtype, shape, strides and device (``get_device()``, -1 off the GPU: such a call fails,
    so it is never cached) and the call's options (``deterministic``: a bool, or ("default", torch's
    flag) when unstated; a workspace by its bytes, device and alignment, checked once against the kernel's
    need).  Environment options are read when a signature is first seen.  Pointers
    change from call to call; ``ResolvedKernel.run`` checks their alignment every time."""
    fast = plain_torch_types()
    if type(a) not in fast or type(b) not in fast or type(activation) is not str or \
            not (target is None or type(target) is str):
        return None
    o = c = w = None                 # out's, bias's and workspace's metadata; False: another kind of object
    if out is not None:
        o = (out.dtype, out.shape, out.stride(), out.get_device()) if type(out) in fast else False
    if bias is not None:
        c = (bias.dtype, bias.shape, bias.stride(), bias.get_device()) if type(bias) in fast else False
    extra = tuple(None if t is None else (t.dtype, t.shape, t.stride(), t.get_device()) if type(t) in fast else False
                  for t in (residual, preactivation))
    if False in extra:
        return None
    if workspace is not None:
        w = (workspace.nbytes, workspace.get_device(), workspace.is_contiguous(),
             workspace.data_ptr() % WORKSPACE_ALIGN == 0) if type(workspace) in fast else False
    if o is False or c is False or w is False or (w is not None and not (w[2] and w[3])):
        return None
    return (a.dtype, a.shape, a.stride(), a.get_device(), b.dtype, b.shape, b.stride(), b.get_device(),
            o, c, w, activation, target, bool(tf32_fast), deterministic, bool(round_through),
            bool(activation_grad), bool(eager)) + extra


# --------------------------------------------------------------------------- entry points
def launch_gemm(problem: GemmProblem, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int | None = None,
                stream: int = 0, *, target=None, device: int | None = None, residual_ptr: int | None = None,
                preactivation_ptr: int | None = None, eager: bool = True) -> ResolvedKernel:
    """Low level: run ``problem`` on raw device pointers (layouts as ``problem`` states), async on
    ``stream`` (0 = legacy default stream); ``eager`` as ``matmul``'s.  Returns the resolved kernel
    (for inspection)."""
    resolved = resolve_kernel(problem, target, driver.get_device(device), eager=eager)
    resolved.run(int(a_ptr), int(b_ptr), int(c_ptr), None if bias_ptr is None else int(bias_ptr), int(stream),
                 residual_ptr=None if residual_ptr is None else int(residual_ptr),
                 preactivation_ptr=None if preactivation_ptr is None else int(preactivation_ptr))
    return resolved


def matmul(a, b, *, out=None, bias=None, activation: str = "none", target=None, tf32_fast: bool = False,
           deterministic: bool | None = None, workspace=None, residual=None, preactivation=None,
           round_through: bool = False, activation_grad: bool = False, eager: bool = True):
    """``act(a @ b + bias) + residual`` with a Nova kernel; returns ``out`` (allocated like ``a`` when None).

    ``residual``: a matrix of ``out``'s shape, type and strides added after the activation (a
    residual connection: no add kernel, no intermediate result).  ``preactivation``: a matrix of
    ``out``'s shape, type and strides the kernel also writes ``a @ b + bias`` into (kept for the
    activation's backward); it needs an activation.  ``round_through=True`` (16-bit ``a`` and ``b``,
    an f32 ``out``): the result is rounded to the inputs' type before it is widened into ``out``
    (the bits of the 16-bit matmul followed by ``.float()``, in one kernel; ``residual`` then f32).
    ``activation_grad=True`` (with ``activation="gelu"`` and ``residual`` the saved pre-activation X):
    ``out = (a @ b + bias) * gelu'(X)``, the GELU's backward of the product (an MLP's dgrad GEMM).

    ``eager`` (default True): the call is one of many from Python, so its host time counts: where the
    device's fastest kernel launches two or three kernels (operand preps) and runs shorter than their
    host time, a single-launch kernel may be picked instead (``nova.kernels.gemm.eager``).  Pass
    ``eager=False`` for calls captured into a CUDA graph and replayed: the kernel is then picked by
    device time alone (a compiled step's launches are).

    ``tf32_fast=True`` (float32 inputs only) lets the tensor cores truncate FP32 to TF32 instead of
    rounding to nearest: no rounding work, ~2.6x larger error (7.7e-4 vs 2.9e-4 relative); opt-in.
    ``deterministic=True`` asks for the same bits on every run: a split-K kernel then adds its K
    slices in a fixed order (a workspace and a reduction kernel) instead of with FP32 atomics.  None
    (the default) follows ``NOVA_DETERMINISTIC`` and ``torch.use_deterministic_algorithms``.
    ``a`` is [M, K], ``b`` is [K, N]: torch tensors, cupy arrays, or objects with
    ``__cuda_array_interface__``/``__dlpack__``.  float32 runs on TF32 tensor cores; bfloat16 and
    float16 likewise.  A transposed view (``x.T`` of a contiguous matrix) is read in place.
    Batched (``torch.bmm``/``torch.matmul`` semantics): ``a`` [B, M, K] or [M, K], ``b`` [B, K, N]
    or [K, N] (a 2-D operand or a batch of one is broadcast), ``out`` [B, M, N]; each matrix
    row-major or transposed, the batch dimension any stride (one launch; ``batched_problem``).
    Runs on the framework's current stream (torch, cupy) or the legacy default stream; no sync.
    ``workspace``: a contiguous device buffer of at least ``resolve_kernel(problem).workspace_bytes``
    bytes, ``WORKSPACE_ALIGN``-aligned, that the launch may overwrite (its operand preps and split-K
    partials; the executor passes one from its arena); without it a Hopper kernel keeps one buffer per
    stream, allocated on first use.

    Repeated calls on plain torch tensors with the same dtypes, shapes, strides, devices and options
    skip the checks and the kernel lookup below (``signature``): they read the data pointers, check
    their alignment, allocate ``out`` if needed, read the current stream and launch.
    """
    # an unstated ``deterministic`` keys the signature on torch's flag; the options are read below, once
    # per signature (``reset()`` after changing NOVA_TARGET or NOVA_DETERMINISTIC in a running process)
    stated = bool(deterministic) if deterministic is not None else ("default", torch_deterministic())
    key = signature(a, b, out, bias, activation, target, tf32_fast, stated, workspace, residual, preactivation,
                    round_through, activation_grad, eager)
    plan = _plans.get(key) if key is not None else None
    if plan is not None:
        if out is None:
            out = plan.empty()
        plan.resolved.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), None if bias is None else bias.data_ptr(),
                          plan.stream(), None if workspace is None else workspace.data_ptr(),
                          None if residual is None else residual.data_ptr(),
                          None if preactivation is None else preactivation.data_ptr())
        return out

    if deterministic is None:
        deterministic = default_deterministic(options.current())
    ta, tb = tensors.describe(a, "a"), tensors.describe(b, "b")
    to = tensors.describe(out, "out") if out is not None else None
    if len(ta.shape) == 2 and len(tb.shape) == 2:
        M, K, trans_a = tensors.gemm_operand(ta, "[M, K]")
        K_b, N, trans_b = tensors.gemm_operand(tb, "[K, N]")
        if K != K_b:
            raise ValueError(f"inner dimensions differ: a is [M, K] = {list(ta.shape)}, b is [K, N] = {list(tb.shape)}")
        batch, out_shape = (), (M, N)
    else:
        (M, N, K, trans_a, trans_b, *batch), out_shape = batched_problem(ta, tb, to)
    dtype = tensors.gemm_dtype(ta, tb)
    if ta.device is not None and tb.device is not None and ta.device != tb.device:
        raise ValueError(f"a is on cuda:{ta.device} but b is on cuda:{tb.device}")
    out_dtype = to.storage if to is not None and to.storage in dtypes.OUT_STORAGES else None
    rounding = "truncate" if tf32_fast and dtype == "tf32" else "rna"
    fields = (M, N, K, dtype, trans_a, trans_b, bias is not None, activation, out_dtype, rounding, bool(deterministic),
              *batch)
    epilogue = (residual is not None, preactivation is not None, dtypes.MODES[dtype].storage if round_through else None,
                bool(activation_grad))
    problem = _problems.get(fields + epilogue)
    if problem is None:
        problem = _problems.setdefault(fields + epilogue, GemmProblem(
            *fields, residual=epilogue[0], preactivation=epilogue[1], round_through=epilogue[2],
            activation_grad=epilogue[3]))
    if to is not None:
        tensors.check_output(to, M, N, problem.out_dtype, batched=len(out_shape) == 3)
    tbias = tensors.describe(bias, "bias") if bias is not None else None
    if tbias is not None:
        tensors.check_bias(tbias, N, problem.bias_dtype)

    if to is None:
        out = tensors.empty(ta, out_shape, problem.out_dtype)
        to = tensors.describe(out, "out")
    like_out = [tensors.check_like_output(tensors.describe(t, name), to) if t is not None else None
                for name, t in (("residual", residual), ("preactivation", preactivation))]     # before the kernel
    resolved = resolve_kernel(problem, target, driver.get_device(ta.device if ta.device is not None else tb.device),
                              eager=bool(eager))
    ws = None
    if workspace is not None:
        ws = tensors.check_workspace(tensors.describe(workspace, "workspace"), workspace, resolved.workspace_bytes,
                                     ta.device, WORKSPACE_ALIGN, problem.describe())
    stream = tensors.stream_source(ta)
    # alignment of A, B, C, bias, R and P is checked in ResolvedKernel.run, on every call
    resolved.run(ta.ptr, tb.ptr, to.ptr, tbias.ptr if tbias is not None else None, stream(), ws,
                 *(t.ptr if t is not None else None for t in like_out))
    if key is not None:            # validated and launched: this signature takes the short path from now on
        _plans[key] = Plan(resolved, tensors.allocator(ta, out_shape, problem.out_dtype), stream)
    return out


def batched_problem(ta, tb, to) -> tuple[tuple, tuple]:
    """``((M, N, K, trans_a, trans_b[, batch, stride_a, stride_b, stride_c]), out_shape)`` of a
    matmul with a 3-D operand (``tensors.batched_operand``: 2-D or a batch of one is broadcast,
    stride 0).  C is [batch, M, N] (``out``'s batch stride, else packed).  ``GemmProblem`` normalises
    a batch of one, or packed A and C against one B, to the unbatched problem."""
    batch_a, M, K, trans_a, stride_a = tensors.batched_operand(ta, "[M, K]")
    batch_b, K_b, N, trans_b, stride_b = tensors.batched_operand(tb, "[K, N]")
    if K != K_b:
        raise ValueError(f"inner dimensions differ: a is [.., M, K] = {list(ta.shape)}, b is [.., K, N] = "
                         f"{list(tb.shape)}")
    batch = tensors.batch_count(batch_a, batch_b, ta, tb)
    stride_c = tensors.batched_output_stride(to, batch, M, N) if to is not None else M * N
    if batch == 1:
        return (M, N, K, trans_a, trans_b), (1, M, N)
    return (M, N, K, trans_a, trans_b, batch, stride_a, stride_b, stride_c), (batch, M, N)
