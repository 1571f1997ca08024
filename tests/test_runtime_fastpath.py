"""CPU tests of the host fast path: matmul's signature cache (with a fake torch module), the
per-thread launch buffers of ``LoadedKernel.launch`` and the context check (with a fake libcuda
made of ctypes callbacks, so the real ctypes calls run), and ``HopperGemm.run``'s memoised maps."""
# ruff: noqa: F811  (the fixtures of test_runtime_cache are imported here; tests take them as arguments)
from __future__ import annotations

import ctypes
import sys
import threading
import time
import types

import pytest

from nova.kernels.gemm import family as gemm_family

import nova
from nova.runtime import cache as cache_mod, driver, matmul as mm, tensors, tma
from test_runtime_cache import (FakeArray, fake_device, fake_gpu, fake_stack, make_artifact, make_schedule,  # noqa: F401
                                online_and_fresh)


# --------------------------------------------------------------------------- a fake torch
class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


class FakeTensor:
    """The attributes of a CUDA torch.Tensor that Nova reads; ``device_index`` -1 is a CPU tensor."""

    def __init__(self, shape, dtype, ptr, strides=None, device_index=0):
        self.shape, self.dtype, self.ptr, self.device_index = tuple(shape), dtype, ptr, device_index
        self.strides = strides or tensors.c_strides(self.shape)

    is_cuda = property(lambda self: self.device_index >= 0)
    device = property(lambda self: types.SimpleNamespace(index=self.device_index if self.is_cuda else None,
                                                         type="cuda" if self.is_cuda else "cpu"))

    def stride(self):
        return self.strides

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self.device_index


@pytest.fixture
def torch(monkeypatch):
    """``sys.modules["torch"]``: tensors, Parameter, empty() (fresh aligned pointers) and the raw stream."""
    fake = types.ModuleType("torch")
    fake.float32, fake.bfloat16, fake.float16, fake.float64 = (FakeDtype(n) for n in
                                                               ("float32", "bfloat16", "float16", "float64"))
    fake.Tensor = FakeTensor
    fake.nn = types.SimpleNamespace(Parameter=type("Parameter", (FakeTensor,), {}))
    fake.next_ptr, fake.stream = 0x900000, 0
    fake.allocations = []

    def empty(shape, dtype, device):
        fake.next_ptr += 0x100000
        fake.allocations.append((shape, dtype, device.index))
        return FakeTensor(shape, dtype, fake.next_ptr, device_index=device.index)
    fake.empty = empty
    fake._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: fake.stream)
    monkeypatch.setitem(sys.modules, "torch", fake)
    mm.reset()
    return fake


def launches():
    """Every (pointers, stream) launched so far, over all fake kernels."""
    return [x for r in mm._kernels.values() for x in r.kernel.launches]


def general_path_error(call):
    """The message the general path raises for ``call`` (signature cache empty)."""
    mm._plans.clear()
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


# --------------------------------------------------------------------------- signature cache
def test_hit_skips_validation_and_reads_pointers_and_stream_per_call(fake_stack, torch, monkeypatch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    out = FakeTensor((64, 48), torch.float32, 0x30000)
    assert nova.matmul(a, b, out=out) is out
    c0 = nova.matmul(a, b)                                  # another signature: no out
    assert len(mm._plans) == 2 and len(fake_stack.configured) == 1
    monkeypatch.setattr(tensors, "describe", lambda *a: pytest.fail("a signature hit described a tensor"))
    a2, out2 = FakeTensor((64, 32), torch.float32, 0x50000), FakeTensor((64, 48), torch.float32, 0x60000)
    torch.stream = 0x77
    assert nova.matmul(a2, b, out=out2) is out2
    c = nova.matmul(a2, b)                                  # allocated on the hit path, like the general path
    assert (c.shape, c.dtype, c.device_index) == ((64, 48), torch.float32, 0) and c.ptr != c0.ptr
    assert torch.allocations == [((64, 48), torch.float32, 0)] * 2
    assert launches() == [((0x10000, 0x20000, 0x30000), 0), ((0x10000, 0x20000, c0.ptr), 0),
                                    ((0x50000, 0x20000, 0x60000), 0x77), ((0x50000, 0x20000, c.ptr), 0x77)]
    assert len(fake_stack.configured) == 1 and len(mm._plans) == 2


def test_hit_rechecks_alignment_with_the_general_paths_message(fake_stack, torch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    out = FakeTensor((64, 48), torch.float32, 0x30000)
    nova.matmul(a, b, out=out)
    bad = FakeTensor((64, 32), torch.float32, 0x10004)                        # a sliced view: same signature
    with pytest.raises(ValueError) as info:
        nova.matmul(bad, b, out=out)
    assert len(mm._plans) == 1                                                 # it was a hit...
    assert (ValueError, str(info.value)) == general_path_error(lambda: nova.matmul(bad, b, out=out))  # ...same error
    assert "A: device pointer 0x10004 is not 16-byte aligned" in str(info.value)
    nova.matmul(a, b, out=out)
    misaligned_out = FakeTensor((64, 48), torch.float32, 0x30004)
    with pytest.raises(ValueError, match="C: device pointer 0x30004 is not 8-byte aligned"):
        nova.matmul(a, b, out=misaligned_out)


def test_changed_strides_dtype_or_device_take_the_general_path(fake_stack, torch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    nova.matmul(a, b)
    bt = FakeTensor((32, 48), torch.float32, 0x20000, strides=(1, 32))     # the transpose of a [48, 32] matrix
    nova.matmul(a, bt)
    assert [p.trans_b for p in fake_stack.configured] == [False, True]
    cases = [
        lambda: nova.matmul(a, FakeTensor((32, 48), torch.float32, 0x20000, strides=(96, 2))),   # neither layout
        lambda: nova.matmul(a, FakeTensor((32, 48), torch.bfloat16, 0x20000)),                  # mixed dtypes
        lambda: nova.matmul(a, FakeTensor((32, 48), torch.float32, 0x20000, device_index=-1)),  # on the CPU
        lambda: nova.matmul(a, FakeTensor((32, 48), torch.float32, 0x20000, device_index=1)),   # other GPU
        lambda: nova.matmul(a, b, out=FakeTensor((64, 48), torch.float64, 0x30000)),            # wrong out dtype
        lambda: nova.matmul(a, b, bias=FakeTensor((47,), torch.float32, 0x40000)),              # wrong bias length
    ]
    patterns = ["neither row-major", "different element types", "not on a CUDA GPU", "a is on cuda:0 but b is on cuda:1",
                "expected element type f32", "length N=48"]
    for call, pattern in zip(cases, patterns):
        for _ in range(2):                                                  # a failed call is never cached
            with pytest.raises((ValueError, TypeError), match=pattern):
                call()
    assert len(mm._plans) == 2


def test_parameters_hit_subclasses_and_other_objects_do_not(fake_stack, torch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), torch.nn.Parameter((32, 48), torch.float32, 0x20000)
    nova.matmul(a, b)
    assert len(mm._plans) == 1
    Sub = type("Sub", (FakeTensor,), {})
    nova.matmul(Sub((64, 32), torch.float32, 0x10000), b)                 # works, through the general path
    assert mm.signature(Sub((1, 1), torch.float32, 0), b, None, None, "none", None, False) is None
    assert mm.signature(a, b, None, None, "none", types.SimpleNamespace(name="h200"), False) is None  # a model
    assert len(mm._plans) == 1


def test_bias_and_options_are_part_of_the_signature(fake_stack, torch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    bias = FakeTensor((48,), torch.float32, 0x40000)
    nova.matmul(a, b, bias=bias, activation="relu")
    nova.matmul(a, b, bias=bias, activation="relu")
    nova.matmul(a, b, bias=bias, activation="gelu")
    nova.matmul(a, b, tf32_fast=True)
    got = [(p.bias, p.activation, p.tf32_rounding) for p in fake_stack.configured]
    assert got == [(True, "relu", "rna"), (True, "gelu", "rna"), (False, "none", "truncate")]
    assert [ptrs[3] for ptrs, _ in launches() if len(ptrs) == 4] == [0x40000] * 3


# --------------------------------------------------------------------------- batched matmul
def test_batched_operands_state_one_batched_problem(fake_stack, torch):
    """3-D operands (torch.bmm/matmul semantics): each matrix row-major or transposed, the batch
    dimension's stride read as the problem's batch stride (a 2-D operand or a batch of one is
    broadcast), the output allocated [B, M, N]; one launch on the base pointers."""
    from nova.kernels.gemm.problem import GemmProblem
    f32 = torch.float32
    a, b = FakeTensor((3, 64, 32), f32, 0x100000), FakeTensor((3, 32, 48), f32, 0x200000)
    c = nova.matmul(a, b)
    assert c.shape == (3, 64, 48) and torch.allocations == [((3, 64, 48), f32, 0)]
    a_t = FakeTensor((3, 64, 32), f32, 0x100000, strides=(4096, 1, 64))      # each matrix stored [K, M]
    w = FakeTensor((32, 48), f32, 0x200000)
    out = FakeTensor((3, 64, 48), f32, 0x300000, strides=(64 * 48 + 64, 48, 1))   # padded between matrices
    nova.matmul(a_t, w, out=out)
    nova.matmul(FakeTensor((64, 32), f32, 0x100000), b)                      # a broadcast over b's batch
    nova.matmul(a, w)                                                        # packed a, one w: one flat GEMM
    nova.matmul(FakeTensor((1, 64, 32), f32, 0x100000), FakeTensor((1, 32, 48), f32, 0x200000))
    assert fake_stack.configured == [
        GemmProblem(64, 48, 32, "tf32", batch=3),
        GemmProblem(64, 48, 32, "tf32", True, batch=3, batch_stride_a=4096, batch_stride_b=0,
                    batch_stride_c=64 * 48 + 64),
        GemmProblem(64, 48, 32, "tf32", batch=3, batch_stride_a=0),
        GemmProblem(192, 48, 32, "tf32"),
        GemmProblem(64, 48, 32, "tf32")]
    assert launches()[1] == ((0x100000, 0x200000, 0x300000), 0)
    nova.matmul(a, b)                                                        # a signature hit allocates [B, M, N]
    assert torch.allocations[-1] == ((3, 64, 48), f32, 0) and len(fake_stack.configured) == 5


@pytest.mark.parametrize("shapes,out,error", [
    (((3, 8, 4), (5, 4, 6)), None, "batch sizes differ: a .* holds 3 matrices, b .* 5"),
    (((3, 8, 4), (3, 5, 6)), None, r"inner dimensions differ: a is \[.., M, K\] = \[3, 8, 4\]"),
    (((2, 3, 8, 4), (4, 6)), None, r"a: expected a 2-D matrix \[M, K\] or a 3-D batch \[batch, M, K\]"),
    (((3, 8, 4), (3, 4, 6)), (3, 6, 8), r"out .*: expected shape \[3, 8, 6\]"),
    (((3, 8, 4), (3, 4, 6)), (8, 6), r"out .*: expected shape \[3, 8, 6\]"),
])
def test_batched_shape_errors_are_one_line(fake_stack, torch, shapes, out, error):
    f32 = torch.float32
    a, b = (FakeTensor(s, f32, 0x100000 * (i + 1)) for i, s in enumerate(shapes))
    kw = {} if out is None else {"out": FakeTensor(out, f32, 0x300000)}
    with pytest.raises(ValueError, match=error):
        nova.matmul(a, b, **kw)
    overlapping = FakeTensor((3, 8, 6), f32, 0x300000, strides=(40, 6, 1))
    with pytest.raises(ValueError, match=r"batch stride 40 \(elements\) makes its \[8, 6\] matrices overlap"):
        nova.matmul(FakeTensor((3, 8, 4), f32, 0x100000), FakeTensor((3, 4, 6), f32, 0x200000), out=overlapping)


def test_nova_target_change_and_reset(fake_stack, torch, monkeypatch):
    """The options are read when a call signature is first seen; reset() makes matmul read them again."""
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    nova.matmul(a, b)
    monkeypatch.setenv("NOVA_TARGET", "h100")
    nova.matmul(a, b)                                         # a known signature: its kernel, no new lookup
    assert [r.target.name for r in mm._kernels.values()] == ["h200"] and len(fake_stack.loads) == 1
    nova.matmul(FakeTensor((64, 32), torch.float32, 0x30000), FakeTensor((32, 64), torch.float32, 0x40000))
    assert sorted(r.target.name for r in mm._kernels.values()) == ["h100", "h200"]     # a new one reads them
    mm.reset()                                                # e.g. after changing NOVA_CACHE_DIR
    assert not mm._plans
    nova.matmul(a, b)
    assert [r.target.name for r in mm._kernels.values()] == ["h100"] and len(mm._plans) == 1


def test_a_known_signature_reads_no_environment(fake_stack, torch, monkeypatch):
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    nova.matmul(a, b)

    def unread():
        raise AssertionError("the signature cache's path read the options")
    monkeypatch.setattr(nova.options, "current", unread)
    nova.matmul(a, b)
    with pytest.raises(AssertionError, match="read the options"):
        nova.matmul(a, b, deterministic=True)                 # another signature: the general path


# --------------------------------------------------------------------------- launch buffers, fake libcuda
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
CTX_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


@pytest.fixture
def fake_libcuda(monkeypatch):
    """``driver._hot`` bound to ctypes callbacks: the driver reads CUlaunchConfig and kernelParams
    when called (as cuLaunchKernelEx does: it copies them before returning)."""
    state = types.SimpleNamespace(launches=[], result=0, nargs=3, delay=0.0, context=0x1234)

    def launch_ex(config, function, params, extra):
        if state.delay:
            time.sleep(state.delay)          # widen the window between the caller's fill and this copy
        c = driver.LaunchConfig.from_address(config)
        argv = (ctypes.c_void_p * state.nargs).from_address(params)
        state.launches.append({
            "thread": threading.get_ident(), "function": function, "extra": extra, "stream": c.hStream or 0,
            "geometry": (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ, c.sharedMemBytes),
            "attrs": (c.attrs, c.numAttrs), "args": tuple(ctypes.c_uint64.from_address(p).value for p in argv)})
        return state.result

    def ctx_get(out):
        ctypes.c_void_p.from_address(out).value = state.context
        return 0

    keep = (LAUNCH_EX(launch_ex), CTX_GET(ctx_get))
    monkeypatch.setattr(driver, "_hot", driver._HotPath(types.SimpleNamespace(cuLaunchKernelEx=keep[0],
                                                                              cuCtxGetCurrent=keep[1])))
    monkeypatch.setattr(driver, "_cu", types.SimpleNamespace(   # only error_text may reach cuda-bindings
        CUresult=lambda v: v, cuGetErrorName=lambda e: (0, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (0, b"invalid argument")))
    state.keep = keep
    return state


def loaded_kernel(device=None):
    return driver.LoadedKernel(0x66, None, device or fake_device(), "nova_gemm", (64, 2, 1), (384, 1, 1), 99840,
                               "gemm 64x64x64 tf32 NN -> f32", "cubin")


def test_memset_goes_through_libcuda_with_64_bit_pointers(monkeypatch):
    """split-K's zeroing of C on the hot path: cuMemset{D32,D16,D8}Async bound with argtypes (an int
    passed without them would be cut to a 32-bit C int) and called with the full 64-bit pointer and
    count, the stream as a pointer (0: the legacy stream), an error reported as the driver's."""
    calls = []
    plain = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    funcs = {name: plain(lambda ptr, value, count, stream, name=name: calls.append((name, ptr, value, count, stream))
                         or (len(calls) == 3))
             for name in ("cuMemsetD32Async", "cuMemsetD16Async", "cuMemsetD8Async")}
    hot = driver._HotPath(types.SimpleNamespace(cuCtxGetCurrent=None, **funcs))
    widths = {4: ctypes.c_uint, 2: ctypes.c_ushort, 1: ctypes.c_ubyte}
    for elem_bytes, value in widths.items():
        assert hot.memsets[elem_bytes].argtypes == (ctypes.c_uint64, value, ctypes.c_size_t, ctypes.c_void_p)
    class CUresult(int):
        CUDA_SUCCESS = 0
    monkeypatch.setattr(driver, "_hot", hot)
    monkeypatch.setattr(driver, "_cu", types.SimpleNamespace(
        CUresult=CUresult, cuGetErrorName=lambda e: (0, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (0, b"invalid argument")))
    driver.memset_async(0x7F12_3456_7800, 5 << 32, 4, 7, "zeroing C")
    driver.memset_async(0x1000, 16, 2, 0, "zeroing C")
    assert calls == [("cuMemsetD32Async", 0x7F12_3456_7800, None, 5 << 32, 7),
                     ("cuMemsetD16Async", 0x1000, None, 16, None)]
    with pytest.raises(driver.NovaRuntimeError, match="^zeroing C: CUDA_ERROR_INVALID_VALUE: invalid argument$"):
        driver.memset_async(0x2000, 8, 1, 0, "zeroing C")
    assert calls[-1] == ("cuMemsetD8Async", 0x2000, None, 8, None)


def test_launch_fills_kernel_params_and_config(fake_libcuda):
    k = loaded_kernel()
    k.launch([0x1000, 0x2000, 0x3000], stream=7)
    k.launch((0xA000, 0xB000, 0xC000), 0)
    first, second = fake_libcuda.launches
    assert first == {"thread": threading.get_ident(), "function": 0x66, "extra": None, "stream": 7,
                     "geometry": (64, 2, 1, 384, 1, 1, 99840), "attrs": (None, 0), "args": (0x1000, 0x2000, 0x3000)}
    assert (second["args"], second["stream"]) == ((0xA000, 0xB000, 0xC000), 0)
    slot = k.launch_slots.slot
    fake_libcuda.nargs = 2
    k.launch([0x5000, 0x6000], 3)                             # another argument count: a new slot
    assert fake_libcuda.launches[-1]["args"] == (0x5000, 0x6000) and k.launch_slots.slot is not slot
    fake_libcuda.result = 1
    with pytest.raises(driver.NovaRuntimeError) as info:
        k.launch([1, 2])
    assert str(info.value) == ("launching gemm 64x64x64 tf32 NN -> f32 (grid 64x2x1, block 384, smem 98 KB) on "
                               "NVIDIA H200: CUDA_ERROR_INVALID_VALUE: invalid argument")


def test_threads_never_share_launch_buffers(fake_libcuda):
    """Each thread's launches reach the driver with its own pointers, although ctypes lets another
    thread run between a thread's fill and the driver's copy (the delay makes that likely)."""
    k, n_threads, n = loaded_kernel(), 4, 25
    fake_libcuda.delay = 0.0005
    thread_no = {}

    def work(t):
        thread_no[threading.get_ident()] = t
        for i in range(n):
            k.launch([t << 32 | i, t, i], stream=t)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(1, n_threads + 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    got = sorted((thread_no[r["thread"]], r["args"], r["stream"]) for r in fake_libcuda.launches)
    assert got == [(t, (t << 32 | i, t, i), t) for t in range(1, n_threads + 1) for i in range(n)]


def test_make_current_is_one_ctypes_call_when_already_current(fake_libcuda, monkeypatch):
    dev = driver.Device(0, None, "NVIDIA H200", (9, 0), 232448, context=0x1234)
    assert dev.make_current() is None                         # _cu has no cuCtxGetCurrent: not reached
    fake_libcuda.context = 0x9999                             # another context: the general path takes over
    with pytest.raises(AttributeError, match="cuCtxGetCurrent"):
        dev.make_current()


def test_resolved_kernel_launches_through_ctypes(fake_stack, torch, fake_libcuda, monkeypatch):
    """matmul -> ResolvedKernel.run -> LoadedKernel.launch -> the driver, on a signature hit."""
    dev = fake_stack.device
    dev.context = 0x1234
    monkeypatch.delattr(dev, "make_current")                  # the real one, with the fake cuCtxGetCurrent
    monkeypatch.setattr(driver, "load_kernel", lambda art, d, what, key=None: loaded_kernel(d))
    monkeypatch.setattr(driver, "memset_async", lambda *a: None)
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)
    out = FakeTensor((64, 48), torch.float32, 0x30000)
    nova.matmul(a, b, out=out)
    torch.stream = 0x55
    nova.matmul(FakeTensor((64, 32), torch.float32, 0x70000), b, out=out)
    assert [(r["args"], r["stream"]) for r in fake_libcuda.launches] == [
        ((0x10000, 0x20000, 0x30000), 0), ((0x70000, 0x20000, 0x30000), 0x55)]


# --------------------------------------------------------------------------- Hopper launches
def hopper_schedule(a, b, map_type="tf32", prep=(), box_c=None, **changes):
    """A schedule with a Hopper plan whose operands ``a``/``b`` = (rows, cols, box_rows, box_cols) are
    K-major tensors read in one box per stage; the operands in ``prep`` go through a pad pass;
    ``box_c`` (rows, cols): the TMA-store epilogue with that box of C."""
    from nova.kernels.gemm.schedule import HopperPlan, OperandPlan, OperandPrep, OperandRole, SmemRing, TmaBox

    def role(op, rows, cols):
        return OperandRole("k", rows, cols, "smem", OperandPrep(False, False, (rows, cols), (rows, cols)) if op in prep else None)
    plan = HopperPlan(OperandPlan(role("a", *a[:2]), role("b", *b[:2]), False, map_type),
                      TmaBox(a[3], a[2], 1), TmaBox(b[3], b[2], 1), producer_regs=56, consumer_regs=232,
                      ring=SmemRing(1024, 128 * 128, 64 * 128, 0 if box_c is None else 32768), ctas=1,
                      epilogue="registers" if box_c is None else "tma_store",
                      box_c=None if box_c is None else TmaBox(box_c[1], box_c[0], 1))
    return make_schedule(hopper=plan, **changes)


def test_hopper_run_preps_b_and_memoises_tensor_maps(fake_gpu, monkeypatch):
    encoded = []

    def fake_map(device, ptr, dtype, rows, cols, box_rows, box_cols):
        encoded.append((ptr, dtype, rows, cols, box_rows, box_cols))
        return ptr + 0x8
    monkeypatch.setattr(tma, "device_tensor_map", fake_map)
    art = make_artifact(params=("tmap_a", "tmap_b", "C"))
    art.meta["prep_kernels"] = {"b": make_artifact(params=("src", "dst")).to_dict()}
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), prep="b")
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NN -> f32")
    hop.workspaces[5] = {"b": 0xB0000}                        # what workspace(5) would allocate
    for a_ptr in (0x10000, 0x10000, 0x11000):
        hop.run(a_ptr, 0x20000, 0x30000, (), 5)
    hop.run(0x10000, 0x20000, 0x30000, (0x40000,), 5, skip_prep=True)
    assert hop.preps["b"].launches == [((0x20000, 0xB0000), 5)] * 3
    assert hop.main.launches == [((0x10008, 0xB0008, 0x30000), 5), ((0x10008, 0xB0008, 0x30000), 5),
                                 ((0x11008, 0xB0008, 0x30000), 5), ((0x10008, 0xB0008, 0x30000, 0x40000), 5)]
    assert encoded == [(0xB0000, "tf32", 48, 32, 64, 32), (0x10000, "tf32", 64, 32, 128, 32),
                       (0x11000, "tf32", 64, 32, 128, 32)]                     # B's: once per stream
    hop.workspaces[6] = {"b": 0xC0000}                        # another stream: its own workspace and map
    hop.run(0x10000, 0x20000, 0x30000, (), 6)
    assert hop.preps["b"].launches[-1] == ((0x20000, 0xC0000), 6)
    assert hop.main.launches[-1] == ((0x10008, 0xC0008, 0x30000), 6)


def test_hopper_tma_store_passes_cs_tensor_map_memoised_per_pointer(fake_gpu, monkeypatch):
    """The TMA-store epilogue (``HopperPlan.epilogue``): the kernel's third argument is C's tensor map
    (the output type, [M, N], the schedule's box), encoded once per C pointer like A's and B's; an
    artifact whose kernel takes a plain C is refused."""
    encoded = []

    def fake_map(device, ptr, dtype, rows, cols, box_rows, box_cols):
        encoded.append((ptr, dtype, rows, cols, box_rows, box_cols))
        return ptr + 0x8
    monkeypatch.setattr(tma, "device_tensor_map", fake_map)
    art = make_artifact(params=("tmap_a", "tmap_b", "tmap_c", "bias"))
    art.meta.update(problem={"M": 64, "N": 48, "K": 32, "out_dtype": "f32"}, prep_kernels={})
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), box_c=(64, 32), vector_c=4)
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NT +bias -> f32")
    for c_ptr in (0x30000, 0x30000, 0x31000):
        hop.run(0x10000, 0x20000, c_ptr, (0x40000,), 5)
    assert hop.main.launches == [((0x10008, 0x20008, 0x30008, 0x40000), 5)] * 2 + [((0x10008, 0x20008, 0x31008, 0x40000), 5)]
    assert encoded == [(0x10000, "tf32", 64, 32, 128, 32), (0x20000, "tf32", 48, 32, 64, 32),
                       (0x30000, "f32", 64, 48, 64, 32), (0x31000, "f32", 64, 48, 64, 32)]   # C's: once per pointer
    stale = make_artifact(params=("tmap_a", "tmap_b", "C", "bias"))
    stale.meta.update(art.meta)
    with pytest.raises(driver.NovaRuntimeError, match="stores C by TMA but the kernel takes"):
        tma.HopperGemm(stale, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NT +bias -> f32")


def test_hopper_tma_store_passes_ps_tensor_map_in_place_of_its_pointer(fake_gpu, monkeypatch):
    """With a pre-activation output the TMA-store kernel's last parameter is P's tensor map (``tmap_p``:
    C's shape, type and box at P's pointer), memoised per pointer as C's; R stays a pointer.  A
    schedule without the TMA store whose kernel takes P's map is refused (stale cache)."""
    encoded = []

    def fake_map(device, ptr, dtype, rows, cols, box_rows, box_cols):
        encoded.append((ptr, dtype, rows, cols, box_rows, box_cols))
        return ptr + 0x8
    monkeypatch.setattr(tma, "device_tensor_map", fake_map)
    art = make_artifact(params=("tmap_a", "tmap_b", "tmap_c", "bias", "residual", "tmap_p"))
    art.meta.update(problem={"M": 64, "N": 48, "K": 32, "out_dtype": "f32"}, prep_kernels={})
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), box_c=(64, 32), vector_c=4)
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NT +bias+gelu+preact+residual -> f32")
    for p_ptr in (0x60000, 0x60000, 0x61000):
        hop.run(0x10000, 0x20000, 0x30000, (0x40000, 0x50000, p_ptr), 5)
    assert [args for args, _ in hop.main.launches] == [(0x10008, 0x20008, 0x30008, 0x40000, 0x50000, 0x60008)] * 2 + \
        [(0x10008, 0x20008, 0x30008, 0x40000, 0x50000, 0x61008)]
    assert encoded[-2:] == [(0x60000, "f32", 64, 48, 64, 32), (0x61000, "f32", 64, 48, 64, 32)]
    with pytest.raises(driver.NovaRuntimeError, match="takes P's tensor map but the schedule does not store C by TMA"):
        tma.HopperGemm(make_artifact(params=("tmap_a", "tmap_b", "C", "tmap_p")),
                       hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32)), fake_gpu.device, "gemm")


def test_hopper_tma_store_checks_c_base_alignment(fake_stack, monkeypatch):
    """A TMA-store schedule needs C's base 16-byte aligned (``vector_c`` = 16 bytes of elements): a
    C that is only 8-byte aligned is refused with a one-line error naming the TMA store, before any
    launch."""
    launched = []
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    monkeypatch.setattr(tma.HopperGemm, "run", lambda self, *a: launched.append(a))
    monkeypatch.setattr(mm, "configure_schedule", lambda p, t, eager=False: hopper_schedule(
        (64, 32, 64, 32), (48, 32, 64, 32), box_c=(64, 32), vector_a=1, vector_b=1, vector_c=4))

    def hopper_artifact(p, s, t):
        art = make_artifact(params=("tmap_a", "tmap_b", "tmap_c"))
        art.meta.update(problem=p.to_dict(), prep_kernels={})
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)
    a, b = FakeArray((64, 32), ptr=0x10000), FakeArray((32, 48), ptr=0x20000)
    with pytest.raises(ValueError, match=r"C: device pointer 0x30008 is not 16-byte aligned, which the TMA store of C"):
        nova.matmul(a, b, out=FakeArray((64, 48), ptr=0x30008), target="h200")
    assert launched == []
    nova.matmul(a, b, out=FakeArray((64, 48), ptr=0x30010), target="h200")
    assert len(launched) == 1

def test_hopper_split_k_zeroes_the_output_before_the_gemm(fake_stack, monkeypatch):
    """A Hopper artifact with zero_output (split-K: FP32 atomics into C) gets C zeroed first, on the
    same stream, like the mma.sync kernels."""
    events = []
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    monkeypatch.setattr(driver, "memset_async", lambda ptr, n, eb, stream, why: events.append(("zero", ptr, n, stream)))
    run = tma.HopperGemm.run
    monkeypatch.setattr(tma.HopperGemm, "run", lambda self, *a: events.append(("gemm",) + a[:3]) or run(self, *a))
    monkeypatch.setattr(mm, "configure_schedule", lambda p, t, eager=False: hopper_schedule((64, 32, 64, 32), (48, 32, 64, 32),
                                                                               split_k=2, vector_c=1))

    def hopper_artifact(p, s, t):
        art = make_artifact(zero_output=True, params=("tmap_a", "tmap_b", "C"))
        art.meta["prep_kernels"] = {}
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)
    a, b, out = FakeArray((64, 32), ptr=0x10000), FakeArray((32, 48), ptr=0x20000), FakeArray((64, 48), ptr=0x30000)
    nova.matmul(a, b, out=out, target="h200")
    assert events == [("zero", 0x30000, 64 * 48, 0), ("gemm", 0x10000, 0x20000, 0x30000)]
    [resolved] = mm._kernels.values()
    assert resolved.hopper.main.launches == [((0x10008, 0x20008, 0x30000), 0)]


def test_hopper_checks_c_alignment_of_its_wide_stores(fake_stack, monkeypatch):
    """The Hopper epilogue stores 16-bit outputs 4 elements (8 bytes) at a time (``vector_c``): a C
    that is only 4-byte aligned (a sliced view) is refused with a clear error before any launch."""
    launched = []
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    monkeypatch.setattr(tma.HopperGemm, "run", lambda self, *a: launched.append(a))
    # the Hopper rules' choice for a 16-bit output with N % 4 == 0 (output_vector): 4 elements per store
    monkeypatch.setattr(mm, "configure_schedule", lambda p, t, eager=False: hopper_schedule(
        (64, 32, 64, 64), (32, 48, 64, 64), "bf16", vector_a=1, vector_b=1, vector_c=4))

    def hopper_artifact(p, s, t):
        art = make_artifact(params=("tmap_a", "tmap_b", "C"))
        art.meta["prep_kernels"] = {}
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)
    a, b = FakeArray((64, 32), "<f2", ptr=0x10000), FakeArray((32, 48), "<f2", ptr=0x20000)
    with pytest.raises(ValueError, match="C: device pointer 0x30004 is not 8-byte aligned"):
        nova.matmul(a, b, out=FakeArray((64, 48), "<f2", ptr=0x30004), target="h200")
    assert launched == []
    nova.matmul(a, b, out=FakeArray((64, 48), "<f2", ptr=0x30008), target="h200")
    assert len(launched) == 1


def test_hopper_release_frees_workspaces_and_forgets_stream_plans(fake_gpu, monkeypatch):
    """``HopperGemm.release`` (the oracle frees each candidate's prep buffers after timing): every
    stream's workspace is freed, and the next call allocates a new one instead of prepping into the
    freed buffer through a stale stream plan."""
    freed, next_ptr = [], iter((0xB0000, 0xD0000))
    fake_cu = types.SimpleNamespace(cuMemAlloc=lambda n: (0, next(next_ptr)),
                                    cuMemFree=lambda ptr: freed.append(ptr) or (0,))
    monkeypatch.setattr(driver, "cuda", lambda: fake_cu)
    monkeypatch.setattr(driver, "check", lambda result, doing: result[1] if len(result) > 1 else None)
    monkeypatch.setattr(driver, "restore_context", lambda previous: None)
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    art = make_artifact(params=("tmap_a", "tmap_b", "C"))
    art.meta["prep_kernels"] = {"b": make_artifact(params=("src", "dst")).to_dict()}
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), prep="b")
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NN -> f32")
    hop.run(0x10000, 0x20000, 0x30000, (), 5)
    hop.release()
    assert freed == [0xB0000] and hop.workspaces == {}
    hop.run(0x10000, 0x20000, 0x30000, (), 5)
    assert hop.preps["b"].launches == [((0x20000, 0xB0000), 5), ((0x20000, 0xD0000), 5)]
    assert hop.main.launches[-1] == ((0x10008, 0xD0008, 0x30000), 5)


def _fake_workspace_driver(monkeypatch) -> list:
    """A driver whose cuMemAlloc records each workspace size (returned list) and hands out 0xE0000,
    and tensor maps at the operand's pointer + 8: for the workspace schedules' launch tests."""
    allocated = []
    fake_cu = types.SimpleNamespace(cuMemAlloc=lambda n: allocated.append(n) or (0, 0xE0000))
    monkeypatch.setattr(driver, "cuda", lambda: fake_cu)
    monkeypatch.setattr(driver, "check", lambda result, doing: result[1] if len(result) > 1 else None)
    monkeypatch.setattr(driver, "restore_context", lambda previous: None)
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    return allocated


def test_hopper_split_k_workspace_runs_the_gemm_then_the_reduction(fake_gpu, monkeypatch):
    """A split-K workspace schedule: the GEMM writes its FP32 partials into the stream's
    [split_k * M, N] workspace (never C, no bias), then the reduction kernel reads them and writes C
    with the bias; nothing zeroes C.  An artifact without its reduction kernel is refused."""
    allocated = _fake_workspace_driver(monkeypatch)
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), split_k=4, split_reduction="workspace", vector_c=4)
    art = make_artifact(params=("tmap_a", "tmap_b", "W"))
    art.meta.update(problem={"M": 64, "N": 48, "K": 32}, prep_kernels={},
                    reduce_kernel=make_artifact(params=("W", "C", "bias")).to_dict())
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 bf16 NN +bias -> bf16")
    hop.run(0x10000, 0x20000, 0x30000, (0x40000,), 5)
    hop.run(0x10000, 0x20000, 0x31000, (0x40000,), 5)
    assert allocated == [4 * 64 * 48 * 4]                     # one workspace per stream, split x M x N x f32
    assert hop.main.launches == [((0x10008, 0x20008, 0xE0000), 5)] * 2
    assert hop.reduce.launches == [((0xE0000, 0x30000, 0x40000), 5), ((0xE0000, 0x31000, 0x40000), 5)]
    del art.meta["reduce_kernel"]
    with pytest.raises(driver.NovaRuntimeError, match="no reduction kernel"):
        tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 bf16 NN +bias -> bf16")


def test_hopper_stream_k_runs_the_gemm_into_c_and_the_workspace_then_the_reduction(fake_gpu, monkeypatch):
    """A stream-K schedule: the GEMM takes (tmap_a, tmap_b, C, W, bias) (whole tiles into C, split
    tiles' partials into the stream's [slots * M, N] workspace), then the reduction kernel (W, C,
    bias); the workspace's slots are the walk's (``Schedule.stream_k_plan``)."""
    import dataclasses
    allocated = _fake_workspace_driver(monkeypatch)
    schedule = hopper_schedule((256, 3200, 128, 32), (128, 3200, 128, 32), stream_k_tiles=2)
    schedule = dataclasses.replace(schedule, hopper=dataclasses.replace(schedule.hopper, ctas=5))
    assert schedule.stream_k_plan(256, 128, 3200).slots == 3          # 2 tiles x 100 K tiles on 5 CTAs
    art = make_artifact(params=("tmap_a", "tmap_b", "C", "W", "bias"))
    art.meta.update(problem={"M": 256, "N": 128, "K": 3200}, prep_kernels={},
                    reduce_kernel=make_artifact(params=("W", "C", "bias")).to_dict())
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 256x128x3200 bf16 NN +bias -> bf16")
    hop.run(0x10000, 0x20000, 0x30000, (0x40000,), 5)
    assert allocated == [3 * 256 * 128 * 4]
    assert hop.main.launches == [((0x10008, 0x20008, 0x30000, 0xE0000, 0x40000), 5)]
    assert hop.reduce.launches == [((0xE0000, 0x30000, 0x40000), 5)]
    del art.meta["reduce_kernel"]
    with pytest.raises(driver.NovaRuntimeError, match="no reduction kernel"):
        tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 256x128x3200 bf16 NN +bias -> bf16")


def test_hopper_cluster_kernel_launches_whole_clusters(fake_gpu):
    """A kernel in thread-block clusters carries its shape in its PTX (.reqnctapercluster) and is
    launched as any other; its artifact's grid must be whole clusters (a stale one is refused)."""
    import dataclasses
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), cluster_m=2)
    art = make_artifact(params=("tmap_a", "tmap_b", "C"))
    art.meta["prep_kernels"] = {}
    tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NN -> f32")    # 64 CTAs: 32 clusters
    odd = dataclasses.replace(art, grid=(63, 1, 1))
    with pytest.raises(driver.NovaRuntimeError, match="not whole clusters of 2"):
        tma.HopperGemm(odd, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NN -> f32")


# --------------------------------------------------------------------------- a caller's workspace
def test_workspace_layout_aligns_the_preps_and_the_partials():
    """One launch's workspace: each prepped operand's copy, then the split-K partials (split x M x N
    x f32), each on a 256-byte boundary; none for an mma.sync schedule."""
    schedule = hopper_schedule((64, 30, 128, 32), (48, 30, 64, 32), prep="ab", split_k=4, split_reduction="workspace")
    layout, total = tma.workspace_layout(schedule, 64, 48, 30)
    a_bytes, b_bytes, w_bytes = 64 * 30 * 4, 48 * 30 * 4, 4 * 64 * 48 * 4
    b_at = -(-a_bytes // 256) * 256
    w_at = b_at + -(-b_bytes // 256) * 256
    assert layout == {"a": (0, a_bytes), "b": (b_at, b_bytes), "w": (w_at, w_bytes)}
    assert total == w_at + -(-w_bytes // 256) * 256 and all(off % tma.WORKSPACE_ALIGN == 0 for off, _ in layout.values())
    assert tma.workspace_layout(make_schedule(), 64, 48, 30) == ({}, 0)


def test_hopper_runs_in_a_callers_workspace_without_allocating(fake_gpu, monkeypatch):
    """With ``workspace=`` the prep copies and the partials lie at the layout's offsets of the caller's
    buffer (one plan per buffer, no cuMemAlloc); without it one cuMemAlloc of the whole workspace per
    stream, carved the same way."""
    allocated = _fake_workspace_driver(monkeypatch)
    schedule = hopper_schedule((64, 32, 128, 32), (48, 32, 64, 32), prep="b", split_k=4, split_reduction="workspace",
                               vector_c=4)
    art = make_artifact(params=("tmap_a", "tmap_b", "W"))
    art.meta.update(problem={"M": 64, "N": 48, "K": 32}, prep_kernels={"b": make_artifact(params=("src", "dst")).to_dict()},
                    reduce_kernel=make_artifact(params=("W", "C", "bias")).to_dict())
    hop = tma.HopperGemm(art, schedule, fake_gpu.device, "gemm 64x48x32 tf32 NN +bias -> f32")
    layout, total = tma.workspace_layout(schedule, 64, 48, 32)
    assert (hop.layout, hop.workspace_bytes) == (layout, total)
    w_at = layout["w"][0]
    for base in (0xA00000, 0xA00000, 0xB00000):
        hop.run(0x10000, 0x20000, 0x30000, (0x40000,), 5, workspace=base)
    assert allocated == [] and set(hop.placed_plans) == {0xA00000, 0xB00000}
    assert hop.preps["b"].launches == [((0x20000, 0xA00000), 5)] * 2 + [((0x20000, 0xB00000), 5)]
    assert hop.main.launches[-1] == ((0x10008, 0xB00008, 0xB00000 + w_at), 5)
    assert hop.reduce.launches[-1] == ((0xB00000 + w_at, 0x30000, 0x40000), 5)
    hop.run(0x10000, 0x20000, 0x30000, (0x40000,), 6)                         # no workspace: the stream's own
    assert allocated == [total]
    assert hop.preps["b"].launches[-1] == ((0x20000, 0xE0000), 6)
    assert hop.reduce.launches[-1] == ((0xE0000 + w_at, 0x30000, 0x40000), 6)


def test_matmul_takes_a_workspace_of_the_kernels_size(fake_stack, monkeypatch):
    """``nova.matmul(..., workspace=)``: checked once against the kernel's ``workspace_bytes`` (too small,
    misaligned: one-line ValueError, nothing launched), then handed to the Hopper launch."""
    runs = []
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)
    monkeypatch.setattr(tma.HopperGemm, "run", lambda self, *a, **kw: runs.append((a, kw)))
    monkeypatch.setattr(mm, "configure_schedule", lambda p, t, eager=False: hopper_schedule(
        (64, 32, 64, 32), (48, 32, 64, 32), prep="b", split_k=2, split_reduction="workspace", vector_c=4))

    def hopper_artifact(p, s, t):
        art = make_artifact(params=("tmap_a", "tmap_b", "W"))
        art.meta.update(problem=p.to_dict(), prep_kernels={"b": make_artifact(params=("src", "dst")).to_dict()},
                        reduce_kernel=make_artifact(params=("W", "C")).to_dict())
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)

    def workspace(nbytes, ptr):
        ws = FakeArray((nbytes,), "|u1", ptr=ptr)
        ws.nbytes = nbytes
        return ws
    a, b, out = FakeArray((64, 32), ptr=0x10000), FakeArray((32, 48), ptr=0x20000), FakeArray((64, 48), ptr=0x30000)
    nova.matmul(a, b, out=out, target="h200")
    [resolved] = mm._kernels.values()
    need = resolved.workspace_bytes
    assert need == tma.workspace_layout(mm.configure_schedule(None, None), 64, 48, 32)[1] > 0
    with pytest.raises(ValueError, match=f"workspace: {need - 1} bytes, the kernel of .* needs {need}"):
        nova.matmul(a, b, out=out, target="h200", workspace=workspace(need - 1, 0xA00000))
    with pytest.raises(ValueError, match="workspace: device pointer 0xa00080 is not 256-byte aligned"):
        nova.matmul(a, b, out=out, target="h200", workspace=workspace(need, 0xA00080))
    assert len(runs) == 1
    nova.matmul(a, b, out=out, target="h200", workspace=workspace(need, 0xA00000))
    assert runs == [((0x10000, 0x20000, 0x30000, (), 0), {}),
                    ((0x10000, 0x20000, 0x30000, (), 0), {"workspace": 0xA00000})]


def test_a_workspace_enters_the_signature_by_size_not_by_address(torch):
    """Signature hits skip the workspace check, so a workspace's bytes (and that it is contiguous and
    256-byte aligned) are part of the key; its address is not."""
    a, b = FakeTensor((64, 32), torch.float32, 0x10000), FakeTensor((32, 48), torch.float32, 0x20000)

    def workspace(nbytes, ptr, contiguous=True):
        ws = FakeTensor((nbytes // 4,), torch.float32, ptr)
        ws.nbytes, ws.is_contiguous = nbytes, (lambda: contiguous)
        return ws
    key = mm.signature(a, b, None, None, "none", None, False, False, workspace(4096, 0xA00000))
    assert key == mm.signature(a, b, None, None, "none", None, False, False, workspace(4096, 0xB00000))
    assert key != mm.signature(a, b, None, None, "none", None, False, False, workspace(2048, 0xA00000))
    assert key != mm.signature(a, b, None, None, "none", None, False, False)
    assert mm.signature(a, b, None, None, "none", None, False, False, workspace(4096, 0xA00010)) is None
    assert mm.signature(a, b, None, None, "none", None, False, False, workspace(4096, 0xA00000, False)) is None


def test_a_residual_laid_out_unlike_the_output_is_refused_before_any_kernel_is_looked_up(fake_stack, torch):
    """Bad input is one line whatever the kernel cache holds: the residual's layout is checked before
    the kernel is resolved (offline, a missing kernel used to be reported instead)."""
    f32 = torch.float32
    a, b = FakeTensor((64, 32), f32, 0x100000), FakeTensor((32, 48), f32, 0x200000)
    residual = FakeTensor((64, 48), f32, 0x300000, strides=(1, 64))          # the output's shape, transposed
    before = len(fake_stack.configured)
    with pytest.raises(ValueError, match="residual.*must match the output"):
        nova.matmul(a, b, residual=residual)
    assert len(fake_stack.configured) == before
