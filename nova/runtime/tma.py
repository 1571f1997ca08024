"""Hopper launches: TMA tensor maps, operand-prep workspaces, and the wgmma kernel.

A Hopper GEMM artifact (``nova/kernels/gemm/emit_hopper.py``) takes ``(tmap_a*, tmap_b*, C*[, bias*])``,
or ``(tmap_a*, tmap_b*, tmap_c*[, bias*])`` with the TMA-store epilogue (``HopperPlan.epilogue``):
pointers to 128-byte ``CUtensorMap`` objects in *device* memory (MLIR's convention for
``!nvgpu.tensormap.descriptor``).  What the maps describe (each operand's tensor, box and element
type; C's box ``HopperPlan.box_c`` over the ``[M, N]`` output of the artifact's problem) and which
operands are prepped is the schedule's ``HopperPlan``; a batched operand (``OperandRole.batch`` > 1)
gets a 3-D map, batch outermost with its batch stride (C's from the problem's ``batch`` and
``batch_stride_c``); the prep kernels travel in the artifact
(``meta["prep_kernels"]``).  This module

* encodes tensor maps with ``cuTensorMapEncodeTiled`` through ctypes into a 64-byte aligned host
  buffer (the object cuda-bindings returns need not be aligned) and copies them to the device,
  cached per (device, pointer, shape, box, type): repeated calls on the same buffers cost a dict
  lookup, not an encode;
* runs the operand-prep kernels (transpose to K-major / pad K / round to TF32) into a workspace,
  stream-ordered before the GEMM: the caller's (``run(..., workspace=)``: the executor places one per
  launch in its arena, ``workspace_layout`` sizes it) or, without one, a per-stream buffer allocated
  once with ``cuMemAlloc``;
* launches the GEMM, and for a split-K workspace schedule (``Schedule.split_workspace``) the GEMM
  writes its slices' FP32 partials into the workspace's ``[split_k * M, N]`` partials and the
  reduction kernel (``meta["reduce_kernel"]``) adds them into C with the epilogue; a stream-K
  schedule (``Schedule.stream_k``) takes C and a ``[slots * M, N]`` workspace
  (``Schedule.stream_k_plan(M, N, K).slots``): it stores the tiles of one segment in C, the split
  tiles' partials in the workspace, and the reduction kernel adds those.

A kernel in thread-block clusters (``Schedule.cluster_m`` x ``cluster_n``) carries its cluster shape
in its PTX (``.reqnctapercluster``): it is launched like any other, on the artifact's grid (the
plan's CTA count, whole clusters), with no launch attribute, so CUDA-graph capture is unchanged.

Nothing here imports MLIR or touches CUDA at import time.
"""
from __future__ import annotations

import ctypes
import threading

from nova import options
from nova.dtypes import ELEMENT_TYPES
from nova.runtime import driver
from nova.runtime.memo import memoized

# CUtensorMapDataType (nova/dtypes.py) / swizzle / L2 promotion values (cuda.h)
DATA_TYPES = {n: e.tensor_map for n, e in ELEMENT_TYPES.items() if e.tensor_map is not None}
ELEMENT_BYTES = {n: e.bytes for n, e in ELEMENT_TYPES.items()}
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_128B, L2_PROMOTION_256B = 2, 3
LINE_BYTES = 128            # an L2 line: a tensor map promotes 256 B only where its rows start on one
OOB_FILL_ZERO = 0             # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero

_lock = threading.RLock()
_libcuda = None
_maps: dict[tuple, int] = {}
_keep: list = []              # device allocations that live as long as the process


def _encode_fn():
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.cuTensorMapEncodeTiled
        f.restype = ctypes.c_int
        P64, P32 = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, P64, P64, P32, P32,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _libcuda = f
    return _libcuda


def encode_tiled_2d(ptr: int, dtype: str, rows: int, cols: int, box_rows: int, box_cols: int,
                    swizzle: int = 128, batch: int = 1, batch_stride: int = 0) -> bytes:
    """The 128 bytes of a ``CUtensorMap`` for a row-major ``[rows, cols]`` tensor at ``ptr``
    (row stride ``cols`` elements), box ``[box_rows, box_cols]``, out-of-bounds reads as zero.
    ``batch`` > 1: a 3-D map of ``batch`` such matrices ``batch_stride`` elements apart (box
    ``[1, box_rows, box_cols]``); TMA needs that stride, like the rows, a multiple of 16 bytes."""
    eb = ELEMENT_BYTES[dtype]
    if (cols * eb) % 16 or ptr % 16 or (batch > 1 and batch_stride * eb % 16):
        raise driver.NovaRuntimeError(f"TMA needs 16-byte aligned rows, batch stride and base: "
                                      f"{batch}x{rows}x{cols} {dtype} (batch stride {batch_stride}) at {ptr:#x}")
    dims, strides, box = (cols, rows), (cols * eb,), (box_cols, box_rows)
    if batch > 1:
        dims, strides, box = dims + (batch,), strides + (batch_stride * eb,), box + (1,)
    shape = f"{batch}x{rows}x{cols}" if batch > 1 else f"{rows}x{cols}"
    return _encode(ptr, dtype, dims, strides, box, swizzle, f"{shape} {dtype}, box {box_rows}x{box_cols}",
                   l2_promotion(ptr, strides))


def encode_tiled(ptr: int, dtype: str, dims: tuple, strides: tuple, box: tuple, swizzle: int = 128) -> bytes:
    """The 128 bytes of a ``CUtensorMap`` of any rank: ``dims`` innermost first (the innermost contiguous),
    ``strides`` the byte strides of dims[1:], ``box`` the box extents; out-of-bounds reads as zero."""
    if ptr % 16 or any(x % 16 for x in strides):
        raise driver.NovaRuntimeError(f"TMA needs a 16-byte aligned base and strides: dims {dims} byte strides "
                                      f"{strides} {dtype} at {ptr:#x}")
    return _encode(ptr, dtype, dims, strides, box, swizzle, f"dims {dims}, byte strides {strides} {dtype}, box {box}")


def l2_promotion(ptr: int | None = None, strides: tuple = ()) -> int:
    """The L2 promotion (CUtensorMapL2promotion) of a tensor map at ``ptr`` with byte ``strides``: 256 B
    where the base and every stride are multiples of 128 B (a box row is one 128-byte line and the
    promoted 256 bytes hold its neighbour, the next box along the row), else 128 B (a misaligned row
    spans two lines, and 256-byte promotion fetched up to 512 bytes for it: BF16 3000^3 ran 112.6 us
    with 256 B and 97.7 with 128 B on the H200, bench/results/h200-2026-12-01/h/call8); ``ptr`` None: 256 B (the attention
    kernels' maps, measured so).  ``NOVA_TMA_L2_PROMOTION`` = 0 (none), 1 (64 B), 2 (128 B) or 3 (256 B)
    sets every map's (experiments).  Read when a map is encoded."""
    forced = options.current().tma_l2_promotion
    if forced is not None:
        return forced
    if ptr is None or (ptr % LINE_BYTES == 0 and all(s % LINE_BYTES == 0 for s in strides)):
        return L2_PROMOTION_256B
    return L2_PROMOTION_128B


def _encode(ptr: int, dtype: str, dims: tuple, strides: tuple, box: tuple, swizzle: int, what: str,
            promotion: int | None = None) -> bytes:
    """cuTensorMapEncodeTiled into a 64-byte aligned buffer (the driver requires it); ``what`` describes
    the map in the error; ``promotion`` its L2 promotion (None: ``l2_promotion()``)."""
    raw = (ctypes.c_uint8 * (128 + 64))()
    addr = ctypes.addressof(raw)
    aligned = addr + (-addr % 64)
    a64 = lambda *xs: (ctypes.c_uint64 * len(xs))(*xs)
    a32 = lambda *xs: (ctypes.c_uint32 * len(xs))(*xs)
    err = _encode_fn()(aligned, DATA_TYPES[dtype], len(dims), ptr, a64(*dims), a64(*strides), a32(*box),
                       a32(*(1,) * len(dims)), 0, SWIZZLE[swizzle],
                       l2_promotion() if promotion is None else promotion, OOB_FILL_ZERO)
    if err != 0:
        raise driver.NovaRuntimeError(f"cuTensorMapEncodeTiled({what}) failed: CUresult {err}")
    return ctypes.string_at(aligned, 128)


def _to_device(device, blob: bytes) -> int:
    """Device pointer to a fresh 128-byte copy of an encoded tensor map (on ``device``'s context)."""
    cu = driver.cuda()
    previous = device.make_current()
    try:
        dptr = int(driver.check(cu.cuMemAlloc(128), "allocating a tensor map"))
        buf = ctypes.create_string_buffer(blob, 128)
        driver.check(cu.cuMemcpyHtoD(dptr, ctypes.addressof(buf), 128), "copying a tensor map to the device")
    finally:
        driver.restore_context(previous)
    return dptr


def attention_tensor_map(device, ptr: int, dtype: str, shape: tuple, strides: tuple, box_rows: int,
                         box_cols: int) -> int:
    """Device pointer to a cached 4-D ``CUtensorMap`` of a ``[B, H, T, D]`` attention operand with
    element ``strides`` (sB, sH, sT) (the head dim contiguous): dims (D, T, H, B), box
    ``[1, 1, box_rows, box_cols]``, 128-byte swizzle (the Hopper forward, nova/kernels/attention/build_hopper.py)."""
    key = ("attn", device.ordinal, ptr, dtype, tuple(shape), tuple(strides), box_rows, box_cols)
    eb = ELEMENT_BYTES[dtype]
    b, h, t, d = shape
    sb, sh, st = strides

    def make():
        blob = encode_tiled(ptr, dtype, (d, t, h, b), (st * eb, sh * eb, sb * eb), (box_cols, box_rows, 1, 1))
        return _to_device(device, blob)
    return memoized(_maps, _lock, key, make)


def device_tensor_map(device, ptr: int, dtype: str, rows: int, cols: int, box_rows: int, box_cols: int,
                      batch: int = 1, batch_stride: int = 0) -> int:
    """Device pointer to a cached ``CUtensorMap`` describing ``ptr`` (3-D with ``batch`` > 1)."""
    key = (device.ordinal, ptr, dtype, rows, cols, box_rows, box_cols, batch, batch_stride)

    def make():
        blob = encode_tiled_2d(ptr, dtype, rows, cols, box_rows, box_cols, batch=batch, batch_stride=batch_stride)
        return _to_device(device, blob)
    return memoized(_maps, _lock, key, make)


WORKSPACE_ALIGN = 256       # bytes: where each buffer of a GEMM's workspace starts (TMA needs 16; an L2 line 128)


def workspace_bytes(role, elem_bytes: int) -> int:
    """Bytes of an operand-prep workspace: every matrix the pass writes, packed [batch, rows, cols]."""
    return role.rows * role.cols * role.prep.batch * elem_bytes


def workspace_layout(schedule, M: int, N: int, K: int) -> tuple[dict[str, tuple[int, int]], int]:
    """``({buffer: (byte offset, bytes)}, total bytes)`` of one launch's workspace of a Hopper GEMM with
    ``schedule`` on an M x N x K problem: the operand-prep copies ``"a"``, ``"b"`` (each operand the
    schedule preps: ``workspace_bytes``) and the FP32 partials ``"w"`` of a split-K workspace or
    stream-K schedule (``slots x M x N x 4``, slots = ``split_k`` or ``stream_k_plan(M, N, K).slots``),
    each starting on a ``WORKSPACE_ALIGN`` boundary; ``({}, 0)`` for an mma.sync schedule.  The buffers
    are written and read within the launch only, so one launch's workspace may lie over bytes that
    hold nothing live while it runs (the executor places it in its arena).  A skinny schedule's
    K-slice partials are not a launch workspace: their ticket counters must start at zero, so
    ``nova/runtime/skinny.py`` keeps them per stream (``outside_arena.skinny_workspaces``)."""
    if schedule.kernel == "skinny" or schedule.hopper is None:
        return {}, 0
    operands = schedule.hopper.operands
    eb = ELEMENT_BYTES[operands.tensor_map_type]
    sizes = {op: workspace_bytes(operands.role(op), eb) for op in "ab" if operands.role(op).prep is not None}
    if schedule.split_workspace or schedule.stream_k:
        slots = schedule.stream_k_plan(M, N, K).slots if schedule.stream_k else schedule.split_k
        sizes["w"] = slots * M * N * 4
    layout, offset = {}, 0
    for name, nbytes in sizes.items():
        layout[name] = (offset, nbytes)
        offset += -(-nbytes // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    return layout, offset


class HopperGemm:
    """A loaded Hopper GEMM: prep kernels, workspaces, the wgmma kernel and the split-K reduction
    kernel of one artifact, whose tensor maps and workspaces follow the schedule."""

    def __init__(self, artifact, schedule, device, what: str, key: str | None = None, tmap_f32_type: str | None = None):
        from nova.codegen.artifact import KernelArtifact
        self.device, self.what = device, what
        self.plan = schedule.hopper
        size = schedule.cluster_m * schedule.cluster_n
        if artifact.grid[0] % size:
            raise driver.NovaRuntimeError(f"{what}: a grid of {artifact.grid[0]} CTAs is not whole clusters of "
                                          f"{size} (stale cache?)")
        self.main = driver.load_kernel(artifact, device, what, key)
        self.preps = {op: driver.load_kernel(KernelArtifact.from_dict(d), device, f"{what} [prep {op}]",
                                             None if key is None else f"{key}:prep_{op}")
                      for op, d in artifact.meta.get("prep_kernels", {}).items()}
        reduce = artifact.meta.get("reduce_kernel")
        self.reduce = None if reduce is None else driver.load_kernel(
            KernelArtifact.from_dict(reduce), device, f"{what} [split-K reduction]", None if key is None else f"{key}:reduce")
        reduces = schedule.split_workspace or schedule.stream_k
        if (self.reduce is not None) != reduces:
            raise driver.NovaRuntimeError(f"{what}: the schedule {'adds' if reduces else 'does not add'} "
                                          f"its K slices in a workspace but the artifact "
                                          f"{'has no' if self.reduce is None else 'has a'} reduction kernel (stale cache?)")
        # the split-K workspace and the TMA store of C need C's shape (compile_hopper records the problem)
        problem = artifact.meta.get("problem", {})
        needed = ({"M", "N"} | ({"K"} if schedule.stream_k else set()) if self.reduce is not None else set()) | ({"M", "N", "out_dtype"} if self.plan.tma_store else set())
        if self.plan.tma_store and problem.get("batch", 1) > 1:
            needed |= {"batch_stride_c"}
        if not needed <= problem.keys():
            raise driver.NovaRuntimeError(f"{what}: the schedule {'adds K slices in a workspace' if self.reduce else 'stores C by TMA'} "
                                          "but the artifact does not say C's shape (meta['problem']; stale cache?)")
        # one launch's workspace: the prep copies and the split-K partials (workspace_layout)
        self.layout, self.workspace_bytes = workspace_layout(schedule, problem.get("M", 0), problem.get("N", 0),
                                                             problem.get("K", 0))
        if set(self.layout) - {"w"} != set(self.preps):
            raise driver.NovaRuntimeError(f"{what}: the schedule preps operands {sorted(set(self.layout) - {'w'})} but "
                                          f"the artifact has prep kernels for {sorted(self.preps)} (stale cache?)")
        self.stream_k = schedule.stream_k           # the GEMM takes C and the workspace
        # the TMA-store epilogue writes C through a tensor map: C [M, N] of the output type, C's box
        self.c_map = None
        if self.plan.tma_store:
            if tuple(artifact.params[2:3]) != ("tmap_c",):
                raise driver.NovaRuntimeError(f"{what}: the schedule stores C by TMA but the kernel takes "
                                              f"{artifact.params} (stale cache?)")
            box = self.plan.box_c
            batch = problem.get("batch", 1)           # batched: C's 3-D map, batch outermost
            self.c_map = (problem["out_dtype"], problem["M"], problem["N"], box.rows, box.cols) + \
                ((batch, problem["batch_stride_c"]) if batch > 1 else ())
        # a pre-activation output P stored by TMA too (the last parameter): C's map at P's pointer
        self.p_map = artifact.params[-1] == "tmap_p"
        if self.p_map and not self.plan.tma_store:
            raise driver.NovaRuntimeError(f"{what}: the kernel takes P's tensor map but the schedule does not "
                                          "store C by TMA (stale cache?)")
        # TF32 round-to-nearest: CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 makes the TMA unit round FP32 to
        # nearest while copying (measured); ``tmap_f32_type`` overrides it (experiments only)
        self.map_type = tmap_f32_type or self.plan.operands.tensor_map_type
        self.workspaces: dict[int, dict[str, int]] = {}     # stream -> operand ("w": the partials) -> device buffer
        self.allocations: dict[int, int] = {}              # stream -> the cuMemAlloc'd base of its workspace
        self.maps: dict[str, dict[int, int]] = {"a": {}, "b": {}, "c": {}, "p": {}}   # operand -> its pointer -> device tensor map
        self.stream_plans: dict[int, tuple] = {}            # stream -> stream_plan(stream)
        self.placed_plans: dict[int, tuple] = {}            # a caller's workspace pointer -> its plan

    def workspace(self, stream: int) -> dict[str, int]:
        """The prep buffers (by operand) and the split-K partials (``"w"``) of ``stream``, in one
        ``cuMemAlloc`` of ``workspace_bytes``: one per stream, so calls of the same problem on two
        streams never overwrite each other's workspaces (calls on one stream are ordered).  Only
        calls without a workspace of their own take it."""
        ws = self.workspaces.get(stream)
        if ws is not None:
            return ws
        if not self.layout:
            return self.workspaces.setdefault(stream, {})
        cu = driver.cuda()
        previous = self.device.make_current()
        try:
            base = int(driver.check(cu.cuMemAlloc(self.workspace_bytes),
                                    f"allocating the workspace of {self.what} ({self.workspace_bytes / 2**20:.1f} MiB)"))
            _keep.append(base)
        finally:
            driver.restore_context(previous)
        self.allocations[stream] = base
        return self.workspaces.setdefault(stream, self.carve(base))

    def carve(self, base: int) -> dict[str, int]:
        """The workspace's buffers by name at ``base`` (``workspace_layout``'s offsets)."""
        return {op: base + offset for op, (offset, _) in self.layout.items()}

    def release(self) -> None:
        """Free every stream's workspace now (the caller synchronises first) and forget the
        stream plans that point into them; a later call allocates afresh.  For callers that load
        many kernels, e.g. the oracle's candidates: otherwise the workspaces live as long as the process."""
        if not self.allocations:
            self.workspaces.clear()
            self.stream_plans.clear()
            return
        cu = driver.cuda()
        previous = self.device.make_current()
        try:
            for base in self.allocations.values():
                driver.check(cu.cuMemFree(base), f"freeing the workspace of {self.what}")
                _keep.remove(base)
            self.allocations.clear()
            self.workspaces.clear()
            self.stream_plans.clear()
        finally:
            driver.restore_context(previous)

    def tensor_map(self, op: str, ptr: int) -> int:
        """The device tensor map of operand ``op`` ("a", "b", or "c" / "p": the TMA-store epilogue's
        outputs, C and the pre-activation P, one map shape) at ``ptr``.  Memoised here by pointer
        alone (the shape, box and type are this kernel's): one int-keyed lookup per call instead of
        building ``device_tensor_map``'s key, which shares the maps process-wide."""
        hit = self.maps[op].get(ptr)
        if hit is None:
            if op in ("c", "p"):
                hit = device_tensor_map(self.device, ptr, *self.c_map)
            else:
                o, box = self.plan.operands.role(op), self.plan.box(op)
                batched = (o.batch, o.batch_stride) if o.batch > 1 else ()      # a 3-D map
                hit = device_tensor_map(self.device, ptr, self.map_type, o.rows, o.cols, box.rows, box.cols, *batched)
            self.maps[op][ptr] = hit
        return hit

    def stream_plan(self, stream: int) -> tuple[tuple, tuple, int | None]:
        """``(preps, maps, partials)`` of ``stream``: the prep launches as (kernel, operand index,
        workspace), the tensor maps of [a, b] that are fixed on this stream (a prepped operand is
        read from the stream's workspace, which never moves), None where the map follows the
        caller's pointer, and the split-K partials' workspace (None without one)."""
        plan = self.stream_plans.get(stream)
        if plan is None:
            ws = self.workspace(stream) if self.preps or self.reduce is not None else {}
            plan = self.stream_plans.setdefault(stream, self._plan(ws))
        return plan

    def placed_plan(self, workspace: int) -> tuple[tuple, tuple, int | None]:
        """``stream_plan``'s ``(preps, maps, partials)`` over a caller's workspace at ``workspace``
        (``workspace_bytes`` bytes, ``workspace_layout``), memoised by its pointer."""
        plan = self.placed_plans.get(workspace)
        if plan is None:
            plan = self.placed_plans.setdefault(workspace, self._plan(self.carve(workspace)))
        return plan

    def _plan(self, ws: dict[str, int]) -> tuple[tuple, tuple, int | None]:
        preps = tuple((kernel, "ab".index(op), ws[op]) for op, kernel in self.preps.items())
        maps = tuple(self.tensor_map(op, ws[op]) if op in ws else None for op in "ab")
        return preps, maps, ws.get("w")

    def main_args(self, a_ptr: int, b_ptr: int, c_ptr: int, epilogue: tuple, maps: tuple) -> tuple:
        """The GEMM kernel's arguments ``(tmap_a, tmap_b, C, *epilogue)`` (``epilogue``: the pointers of
        the problem's ``epilogue_operands``; with a split-K workspace, ``c_ptr`` is the workspace and
        the epilogue's operands go to the reduction; stream-K appends the workspace and then them in
        ``run``; with the TMA-store epilogue, C's tensor map, and P's in place of its pointer, the
        last); ``maps`` from ``stream_plan``."""
        args = (maps[0] or self.tensor_map("a", a_ptr), maps[1] or self.tensor_map("b", b_ptr),
                c_ptr if self.c_map is None else self.tensor_map("c", c_ptr))
        if self.p_map and epilogue:
            return args + tuple(epilogue[:-1]) + (self.tensor_map("p", epilogue[-1]),)
        return args + tuple(epilogue)

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, epilogue: tuple = (), stream: int = 0,
            skip_prep: bool = False, workspace: int | None = None) -> None:
        """Enqueue the prep kernels (if any), the GEMM and the split-K reduction (if any) on
        ``stream``: per call, one plan lookup (the stream's, or the caller's ``workspace`` pointer's:
        ``workspace_bytes`` bytes of device memory the launch may overwrite), the prep launches, a
        tensor-map lookup per unprepped operand and the launches (``skip_prep``: benchmarks of the
        GEMM alone)."""
        preps, maps, partials = self.stream_plan(stream) if workspace is None or not self.layout else \
            self.placed_plan(workspace)
        if not skip_prep:
            for kernel, op, workspace in preps:
                kernel.launch(((a_ptr, b_ptr)[op], workspace), stream)
        if partials is None:
            self.main.launch(self.main_args(a_ptr, b_ptr, c_ptr, epilogue, maps), stream)
            return
        if self.stream_k:
            self.main.launch(self.main_args(a_ptr, b_ptr, c_ptr, (), maps) + (partials,) + tuple(epilogue), stream)
        else:
            self.main.launch(self.main_args(a_ptr, b_ptr, partials, (), maps), stream)
        self.reduce.launch((partials, c_ptr) + tuple(epilogue), stream)
