"""CPU tests of the runtime: cache key, on-disk cache (atomicity, concurrency, corruption), offline
mode, target resolution, tensor validation and the matmul host path with a fake driver."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import pickle
import random
import subprocess
import sys
import time
import types
import warnings

import pytest
from hypothesis import given, settings, strategies as st

import nova
from nova.codegen.artifact import KernelArtifact
from nova.kernels.gemm.problem import GemmProblem
from nova.configurator.step import MmaInstr
from nova.kernels.gemm.schedule import Schedule
from nova.runtime import cache as cache_mod
from nova.runtime import driver, matmul as mm, tensors
from nova.kernels import family
from nova.kernels.gemm import family as gemm_family
from nova.kernels.gemm.family import get_or_compile, kernel_key, key_payload
from nova.runtime.cache import (CacheCorruptionWarning, CompilerUnavailableError, KernelCache, NotPrecompiledError,
                                canonical_json, summary_line)

H200 = types.SimpleNamespace(name="h200", arch="sm_90")


def make_schedule(**changes) -> Schedule:
    s = Schedule(arch="sm_90", mma=MmaInstr("mma.sync", 16, 8, 8, "tf32"), block_m=128, block_n=128, block_k=32,
                 warps_m=2, warps_n=2, stages=3, smem_layout="pad", smem_pad_a=4, smem_pad_b=8, smem_bytes=99840,
                 vector_a=4, vector_b=4, vector_c=2, split_k=1, group_m=8, regs_per_thread=128, blocks_per_sm=1)
    return dataclasses.replace(s, **changes)


def make_artifact(ptx: str = "// ptx\n", cubin: bytes | None = b"\x7fELF\x00\x01", zero_output=False,
                  params=("A", "B", "C")) -> KernelArtifact:
    return KernelArtifact(name="nova_gemm", arch="sm_90", ptx=ptx, grid=(64, 1, 1), block=(128, 1, 1),
                          smem_bytes=99840, params=params, zero_output=zero_output, cubin=cubin,
                          resources={"registers": 128}, meta={"note": "test"})


@pytest.fixture
def cache(tmp_path):
    return KernelCache(tmp_path / "cache")


@pytest.fixture(autouse=True)
def online_and_fresh(monkeypatch):
    monkeypatch.delenv("NOVA_OFFLINE", raising=False)
    monkeypatch.delenv("NOVA_TARGET", raising=False)
    cache_mod.set_offline(None)
    mm.reset()
    yield
    cache_mod.set_offline(None)
    mm.reset()


# --------------------------------------------------------------------------- structural key
problems = st.builds(GemmProblem, M=st.integers(1, 1 << 16), N=st.integers(1, 1 << 16), K=st.integers(1, 1 << 16),
                     dtype=st.sampled_from(["tf32", "bf16", "fp16"]), trans_a=st.booleans(), trans_b=st.booleans(),
                     bias=st.booleans(), activation=st.sampled_from(["none", "relu", "gelu", "silu"]))
schedules = st.builds(make_schedule, block_m=st.sampled_from([32, 64, 128, 256]), stages=st.integers(1, 6),
                      split_k=st.integers(1, 8), vector_c=st.sampled_from([1, 2, 4]))


@given(problems, schedules)
@settings(max_examples=60, deadline=None)
def test_key_is_structural(problem, schedule):
    twin_p = GemmProblem(**problem.to_dict())
    twin_s = Schedule.from_dict(json.loads(json.dumps(schedule.to_dict())))
    assert twin_p is not problem and twin_s is not schedule
    assert kernel_key(problem, schedule, H200) == kernel_key(twin_p, twin_s, types.SimpleNamespace(**vars(H200)))
    assert len(kernel_key(problem, schedule, H200)) == 64


def _shuffled(d):
    if isinstance(d, dict):
        items = list(d.items())
        random.shuffle(items)
        return {k: _shuffled(v) for k, v in items}
    return d


@given(problems, schedules, st.randoms())
@settings(max_examples=40, deadline=None)
def test_key_ignores_dict_order(problem, schedule, rnd):
    random.seed(rnd.random())
    a = key_payload(problem.to_dict(), schedule.to_dict(), "h200", "sm_90")
    b = key_payload(_shuffled(problem.to_dict()), _shuffled(schedule.to_dict()), "h200", "sm_90")
    assert canonical_json(a) == canonical_json(b)
    assert " " not in canonical_json(a)


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    raise AssertionError(value)


@given(st.sampled_from([f.name for f in dataclasses.fields(Schedule) if f.name != "mma"] + ["mma.m", "mma.family"]))
@settings(max_examples=60, deadline=None)
def test_any_schedule_field_changes_the_key(field):
    s = make_schedule()
    p = GemmProblem(256, 256, 256)
    if field == "hopper":
        from nova.configurator import configure
        changed = dataclasses.replace(s, hopper=configure(p, "h200").schedule.hopper)
    elif field.startswith("mma."):
        sub = field.split(".")[1]
        changed = dataclasses.replace(s, mma=dataclasses.replace(s.mma, **{sub: _changed(getattr(s.mma, sub))}))
    else:
        changed = dataclasses.replace(s, **{field: _changed(getattr(s, field))})
    assert kernel_key(p, changed, H200) != kernel_key(p, s, H200)


def test_the_hopper_plan_is_in_the_key(monkeypatch):
    """Two GPUs that differ only in their SM count get different persistent grids, so different keys
    (cooperative consumers: with 114 SMs the model would take ping-pong tiles, a different plan)."""
    monkeypatch.setenv("NOVA_PINGPONG", "0")
    from nova.configurator import configure
    from nova.hwmodel import Quantity, get_target
    p = GemmProblem(4096, 4096, 4096)
    s = configure(p, "h200").schedule
    fewer_sms = dataclasses.replace(s, hopper=dataclasses.replace(s.hopper, ctas=114))
    assert kernel_key(p, fewer_sms, H200) != kernel_key(p, s, H200)
    h200 = get_target("h200")
    h114 = dataclasses.replace(h200, q={**h200.q, "sm_count": Quantity(114, "SMs", "test")})
    assert configure(p, h114).schedule.hopper == fewer_sms.hopper


@given(st.sampled_from(["M", "N", "K", "dtype", "trans_a", "trans_b", "bias", "activation", "out_dtype"]))
@settings(max_examples=30, deadline=None)
def test_any_problem_field_changes_the_key(field):
    p = GemmProblem(256, 256, 256, "bf16")
    new = {"dtype": "fp16", "activation": "relu", "out_dtype": "f32"}.get(field)
    changed = dataclasses.replace(p, **{field: new if new is not None else _changed(getattr(p, field))})
    assert kernel_key(changed, make_schedule(), H200) != kernel_key(p, make_schedule(), H200)


def test_target_version_and_toolchain_change_the_key(monkeypatch):
    p, s = GemmProblem(64, 64, 64), make_schedule()
    base = kernel_key(p, s, H200)
    assert kernel_key(p, s, types.SimpleNamespace(name="h100", arch="sm_90")) != base
    assert kernel_key(p, s, types.SimpleNamespace(name="h200", arch="sm_90a")) != base
    with monkeypatch.context() as m:
        bump_abi(m, "gemm")
        assert kernel_key(p, s, H200) != base
    with monkeypatch.context() as m:
        m.setattr(family, "CODEGEN_TOOLCHAIN", "other==1")
        assert kernel_key(p, s, H200) != base
    with monkeypatch.context() as m:
        m.setattr(family, "__version__", "99.0")
        assert kernel_key(p, s, H200) != base
    assert kernel_key(p, s, H200) == base


def test_summary_line():
    assert summary_line(GemmProblem(4096, 4096, 4096), H200) == "gemm 4096x4096x4096 tf32 NN -> f32 on h200 (sm_90)"


# --------------------------------------------------------------------------- on-disk cache
def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("NOVA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert KernelCache().root == tmp_path / "xdg" / "nova"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert KernelCache().root == tmp_path / "home" / ".cache" / "nova"
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "explicit"))
    assert KernelCache().root == tmp_path / "explicit"


def test_put_get_roundtrip_and_layout(cache):
    key = "ab" + "0" * 62
    art = make_artifact()
    path = cache.put(key, art, "gemm summary")
    assert path == cache.root / "kernels" / "ab" / f"{key}.json"
    entry = json.loads(path.read_text())
    assert entry["key"] == key and entry["summary"] == "gemm summary" and len(entry["sha256"]) == 64
    assert cache.get(key) == art
    assert cache.get("cd" + "0" * 62) is None
    assert [e.key for e in cache.entries()] == [key] and cache.entries()[0].valid
    assert not list(path.parent.glob("*.tmp"))
    assert cache.clear() == 1 and cache.get(key) is None and cache.entries() == []


def _writer(root, key, n, tag):
    c = KernelCache(root)
    for i in range(n):
        c.put(key, make_artifact(ptx=f"// {tag} {i}\n" + "x" * 20000), f"writer {tag}")


def _reader(root, key, deadline, q):
    c = KernelCache(root)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # any corruption warning fails the reader
        try:
            while time.time() < deadline:
                if c.get(key) is not None:
                    seen += 1
        except Exception as e:                 # pragma: no cover - reported to the parent
            q.put(f"reader saw a bad entry: {e}")
            return
    q.put(seen)


def test_concurrent_writers_and_reader(tmp_path):
    root, key = str(tmp_path / "c"), "ee" + "1" * 62
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(root, key, 40, t)) for t in range(3)]
    reader = ctx.Process(target=_reader, args=(root, key, time.time() + 3, q))
    for p in writers + [reader]:
        p.start()
    for p in writers + [reader]:
        p.join(30)
        assert p.exitcode == 0
    result = q.get(timeout=5)
    assert isinstance(result, int), result
    assert KernelCache(root).get(key).ptx.startswith("// ")
    assert not list((tmp_path / "c").rglob("*.tmp"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "wrong_key", "missing_field"])
def test_corrupt_entry_warns_once_is_deleted_and_rebuilt(cache, damage):
    key = "aa" + "2" * 62
    path = cache.put(key, make_artifact(), "s")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        i = data.index(b'"ptx":"') + 8
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff" * 10)
    elif damage == "wrong_key":
        other = cache.put("bb" + "3" * 62, make_artifact(), "other")
        path.write_bytes(other.read_bytes())
    else:
        entry = json.loads(data)
        del entry["grid"]
        entry["sha256"] = cache_mod._digest(entry)
        path.write_text(json.dumps(entry))
    with pytest.warns(CacheCorruptionWarning, match=str(path.name)) as record:
        assert cache.get(key) is None
    assert len(record) == 1
    assert not path.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get(key) is None          # second look: no second warning
    cache.put(key, make_artifact(), "s")
    assert cache.get(key) == make_artifact()


def test_corrupt_entry_listed_as_invalid(cache):
    key = "ac" + "4" * 62
    cache.put(key, make_artifact(), "s").write_text("{")
    [entry] = cache.entries()
    assert not entry.valid


# --------------------------------------------------------------------------- offline / online
def test_offline_miss_message(cache, monkeypatch):
    cache_mod.set_offline(True)
    p = GemmProblem(1000, 1000, 1000)
    with pytest.raises(NotPrecompiledError) as info:
        get_or_compile(p, make_schedule(), H200, cache)
    key = kernel_key(p, make_schedule(), H200)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == (f"not precompiled: gemm 1000x1000x1000 tf32 NN -> f32 on h200 (sm_90) (key {key[:8]}…) in "
                   f"{cache.root}; on a machine with MLIR run: nova precompile gemm --shapes 1000x1000x1000 "
                   f"--target h200 --dtype tf32 and carry the cache directory (recorded in {cache.misses_dir}: "
                   f"`nova precompile misses --cache-dir {cache.root}` builds every recorded miss)")
    e = info.value        # the error carries the data; nova.messages wrote the text
    assert (e.problem, e.target, e.key, e.cache_root) == (p, H200, key, cache.root)
    assert str(pickle.loads(pickle.dumps(e))) == msg


def test_offline_env_and_hit(cache, monkeypatch):
    monkeypatch.setenv("NOVA_OFFLINE", "1")
    assert cache_mod.is_offline()
    cache_mod.set_offline(False)
    assert not cache_mod.is_offline()
    cache_mod.set_offline(None)
    p, s = GemmProblem(64, 64, 64, "bf16", trans_b=True, bias=True, activation="relu"), make_schedule()
    with pytest.raises(NotPrecompiledError, match="--dtype bf16 --trans-b --bias --activation relu and carry"):
        get_or_compile(p, s, H200, cache)
    cache.put(kernel_key(p, s, H200), make_artifact(), summary_line(p, H200))
    art, key, status = get_or_compile(p, s, H200, cache)
    assert status == "cached" and art == make_artifact()


def test_online_miss_compiles_and_stores(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(gemm_family, "compile_artifact", lambda p, s, t: calls.append(p) or make_artifact())
    p, s = GemmProblem(32, 32, 32), make_schedule()
    assert get_or_compile(p, s, H200, cache)[2] == "compiled"
    assert get_or_compile(p, s, H200, cache)[2] == "cached"
    assert len(calls) == 1
    assert cache.entries()[0].summary == summary_line(p, H200)


def test_online_without_mlir_suggests_offline(cache, monkeypatch):
    monkeypatch.setattr(cache_mod, "mlir_available", lambda: False)
    with pytest.raises(CompilerUnavailableError, match="NOVA_OFFLINE=1.*nova precompile"):
        get_or_compile(GemmProblem(32, 32, 32), make_schedule(), H200, cache)


# --------------------------------------------------------------------------- target resolution
@pytest.mark.parametrize("name,preset", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 PCIe", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA GeForce RTX 3060", "rtx3060"),
    ("NVIDIA GeForce RTX 3060 Ti", None), ("NVIDIA GeForce RTX 4090 D", None), ("NVIDIA GH200 480GB", None),
    ("NVIDIA GeForce RTX 30600", None), ("Tesla V100-SXM2-16GB", None), ("NVIDIA L4", None),
])
def test_device_name_to_preset(name, preset):
    assert mm.preset_for_device_name(name) == preset


def fake_device(name="NVIDIA H200", cc=(9, 0), ordinal=0):
    return driver.Device(ordinal, None, name, cc, 232448, context=None)


def test_resolve_target_order(monkeypatch):
    pytest.importorskip("nova.hwmodel")
    got = mm.resolve_target(device=fake_device("NVIDIA H200"))
    assert (got.name, got.arch) == ("h200", "sm_90")
    monkeypatch.setenv("NOVA_TARGET", "h100")
    assert mm.resolve_target(device=fake_device("NVIDIA H200")).name == "h100"
    assert mm.resolve_target("a100", device=fake_device("NVIDIA H200")).name == "a100"
    monkeypatch.delenv("NOVA_TARGET")
    monkeypatch.setattr(mm, "_from_device", lambda ordinal: types.SimpleNamespace(name="device", arch="sm_89"))
    assert mm.resolve_target(device=fake_device("NVIDIA L4", (8, 9))).name == "device"


class FakeKernel:
    def __init__(self, device):
        self.device = device
        self.launches = []

    def launch(self, pointers, stream=0):
        self.launches.append((tuple(pointers), stream))


@pytest.fixture
def fake_gpu(monkeypatch):
    """A fake H200: no CUDA calls; kernels record their launches, memsets are recorded."""
    dev = fake_device()
    dev.make_current = lambda: None
    loads, memsets = [], []
    monkeypatch.setattr(driver, "get_device", lambda ordinal=None: dev)
    monkeypatch.setattr(driver, "load_kernel", lambda art, d, what, key=None: loads.append(key) or FakeKernel(d))
    monkeypatch.setattr(driver, "memset_async", lambda *a: memsets.append(a))
    return types.SimpleNamespace(device=dev, loads=loads, memsets=memsets)


def test_precompile_key_equals_runtime_key_on_h200(tmp_path, monkeypatch, fake_gpu):
    """``nova precompile --target h200`` on a host fills the entry an H200 runtime looks up, offline."""
    pytest.importorskip("nova.hwmodel")
    pytest.importorskip("nova.kernels.gemm.configure")
    from nova.cli.main import main
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "carried"))

    def hopper_artifact(p, s, t):                             # the H200's schedule is a Hopper one
        art = make_artifact(cubin=None, params=("tmap_a", "tmap_b", "tmap_c" if s.hopper.tma_store else "C"))
        art.meta["prep_kernels"] = {}
        art.meta["problem"] = p.to_dict()                     # C's shape, which a TMA store of C needs
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)
    assert main(["precompile", "gemm", "--shapes", "200x300x400", "--target", "h200", "--dtype", "tf32"]) == 0
    monkeypatch.setenv("NOVA_OFFLINE", "1")
    monkeypatch.setattr(gemm_family, "compile_artifact", lambda *a: pytest.fail("offline runtime compiled"))
    resolved = mm.resolve_kernel(GemmProblem(200, 300, 400), device=fake_gpu.device)
    assert resolved.status == "cached" and resolved.target.name == "h200"
    assert fake_gpu.loads == [resolved.key]
    assert KernelCache().path_for(resolved.key).exists()


def test_precompile_tf32_fast_keys_equal_runtime_keys(tmp_path, monkeypatch, fake_gpu):
    """``nova precompile --dtype tf32,bf16 --tf32-fast`` builds the BF16 kernel that an offline
    ``nova.matmul(bf16, bf16, tf32_fast=True)`` looks up (tf32_fast means nothing for bf16) and the
    truncating TF32 kernel that ``nova.matmul(f32, f32, tf32_fast=True)`` looks up."""
    pytest.importorskip("nova.kernels.gemm.configure")
    from nova.cli.main import main
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "carried"))
    def hopper_artifact(p, s, t):                             # the H200's schedules are Hopper ones
        art = make_artifact(cubin=None, params=("tmap_a", "tmap_b", "C"))
        art.meta["prep_kernels"] = {}
        return art
    monkeypatch.setattr(gemm_family, "compile_artifact", hopper_artifact)
    from nova.runtime import tma
    monkeypatch.setattr(tma, "device_tensor_map", lambda device, ptr, *shape: ptr + 0x8)   # no libcuda here
    assert main(["precompile", "gemm", "--shapes", "64x48x32", "--target", "h200", "--dtype", "tf32,bf16",
                 "--tf32-fast"]) == 0
    assert len(KernelCache().entries()) == 2
    monkeypatch.setenv("NOVA_OFFLINE", "1")
    monkeypatch.setattr(gemm_family, "compile_artifact", lambda *a: pytest.fail("offline runtime compiled"))
    for typestr, extra, dtype, rounding in (("<V2", {"descr": [("bfloat16", "<V2")]}, "bf16", "rna"),
                                            ("<f4", {}, "tf32", "truncate")):
        a, b = FakeArray((64, 32), typestr, **extra), FakeArray((32, 48), typestr, **extra)
        out = FakeArray((64, 48), typestr, ptr=0x7F0000100000, **extra)
        nova.matmul(a, b, out=out, tf32_fast=True)
        [problem] = [r.problem for r in mm._kernels.values() if r.problem.dtype == dtype]
        assert problem.tf32_rounding == rounding
    assert sorted(fake_gpu.loads) == sorted(e.key for e in KernelCache().entries())


# --------------------------------------------------------------------------- driver without a GPU
def test_import_touches_neither_cuda_nor_mlir():
    code = ("import sys, nova, nova.runtime, nova.runtime.matmul, nova.cli.main; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlir', 'cuda', 'torch', 'cupy')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))


def test_no_gpu_error_is_clear(monkeypatch):
    monkeypatch.setattr(driver, "_cu", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)          # cuda-python "not installed"
    with pytest.raises(driver.NoGPUError, match=r"^no NVIDIA GPU/driver found: cuda-python is not installed .*; "
                                                r"Nova can still configure and compile without one — see "
                                                r"`nova precompile`$"):
        driver.get_device()
    assert not driver.gpu_available()


def test_arch_names():
    assert driver.arch_cc("sm_90a") == (9, 0, True)
    assert driver.arch_cc("sm_86") == (8, 6, False)
    assert driver.arch_cc("sm_100") == (10, 0, False)
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        driver.arch_cc("compute_90")


# --------------------------------------------------------------------------- tensors (fake CAI objects)
class FakeArray:
    """Exposes ``__cuda_array_interface__`` like a GPU array would (no memory behind it)."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000000000, version=3, **extra):
        self.__cuda_array_interface__ = dict(shape=tuple(shape), typestr=typestr, data=(ptr, False),
                                             strides=strides, version=version, **extra)


def test_describe_cai_v2_v3():
    t = tensors.describe(FakeArray((3, 5), version=2), "a")
    assert (t.shape, t.strides, t.storage, t.framework) == ((3, 5), (5, 1), "f32", "cai")
    t = tensors.describe(FakeArray((3, 5), "<f2", strides=(2, 6)), "b")
    assert (t.strides, t.storage) == ((1, 3), "f16")
    assert tensors.gemm_operand(t, "[K, N]") == (3, 5, True)


def test_operand_layouts():
    row = tensors.describe(FakeArray((4, 6)), "a")
    col = tensors.describe(FakeArray((4, 6), strides=(4, 16)), "a")
    assert tensors.gemm_operand(row, "") == (4, 6, False)
    assert tensors.gemm_operand(col, "") == (4, 6, True)
    with pytest.raises(ValueError, match=r"a: shape \[4, 6\] with strides \[12, 1\].*neither row-major"):
        tensors.gemm_operand(tensors.describe(FakeArray((4, 6), strides=(48, 4)), "a"), "")
    with pytest.raises(ValueError, match=r"a: expected a 2-D matrix \[M, K\], got shape \[2, 3, 4\]"):
        tensors.gemm_operand(tensors.describe(FakeArray((2, 3, 4)), "a"), "[M, K]")


def test_dtype_and_object_errors():
    f32, f16 = tensors.describe(FakeArray((2, 2)), "a"), tensors.describe(FakeArray((2, 2), "<f2"), "b")
    with pytest.raises(TypeError, match=r"a \(shape \[2, 2\], f32, cai\) and b \(shape \[2, 2\], f16, cai\)"):
        tensors.gemm_dtype(f32, f16)
    f64 = tensors.describe(FakeArray((2, 2), "<f8"), "a")
    with pytest.raises(TypeError, match="unsupported element type.*float32"):
        tensors.gemm_dtype(f64, f64)
    with pytest.raises(TypeError, match="launch_gemm"):
        tensors.describe(0x1000, "a")
    with pytest.raises(TypeError, match="cannot use a builtins.list"):
        tensors.describe([[1.0]], "a")
    with pytest.raises(ValueError, match="masked"):
        tensors.describe(FakeArray((2, 2), mask=object()), "a")


def test_dlpack_host_array_rejected_and_capsule_read():
    np = pytest.importorskip("numpy")
    x = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="a: ndarray is on the CPU"):
        tensors.describe(x, "a")
    d = tensors.read_dlpack_capsule(x.T.__dlpack__())
    assert d["shape"] == (4, 3) and d["strides"] == (1, 4) and d["dtype"] == (2, 32, 1)
    assert d["ptr"] == x.ctypes.data and d["device"] == (1, 0)


def test_alignment_and_output_checks():
    tensors.check_alignment("a", 0x1000, 4, 4)
    with pytest.raises(ValueError, match="a: device pointer 0x1004 is not 16-byte aligned"):
        tensors.check_alignment("a", 0x1004, 4, 4)
    out = tensors.describe(FakeArray((3, 4)), "out")
    with pytest.raises(ValueError, match=r"out .*expected shape \[3, 5\]"):
        tensors.check_output(out, 3, 5, "f32")
    with pytest.raises(TypeError, match="expected element type bf16"):
        tensors.check_output(out, 3, 4, "bf16")
    with pytest.raises(ValueError, match="length N=5"):
        tensors.check_bias(tensors.describe(FakeArray((4,)), "bias"), 5, "f32")


# --------------------------------------------------------------------------- matmul host path, fake GPU
@pytest.fixture
def fake_stack(monkeypatch, fake_gpu, tmp_path):
    """Fake configure/target/compile so matmul's host path runs end to end on the CPU."""
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(mm, "_get_target", lambda t: types.SimpleNamespace(name=str(t), arch="sm_90"))
    configured = []
    monkeypatch.setattr(mm, "configure_schedule", lambda p, t, eager=False: configured.append(p) or make_schedule(split_k=2))

    def compile_fake(p, s, t):
        return make_artifact(zero_output=True, params=("A", "B", "C") + p.epilogue_operands)
    monkeypatch.setattr(gemm_family, "compile_artifact", compile_fake)
    fake_gpu.configured = configured
    return fake_gpu


def test_matmul_passes_the_residual_and_the_preactivation_after_the_bias(fake_stack):
    a, b = FakeArray((64, 32), ptr=0x10000), FakeArray((32, 48), ptr=0x20000)
    out, bias = FakeArray((64, 48), ptr=0x30000), FakeArray((48,), ptr=0x40000)
    r, p = FakeArray((64, 48), ptr=0x50000), FakeArray((64, 48), ptr=0x60000)
    nova.matmul(a, b, out=out, bias=bias, activation="gelu", residual=r, preactivation=p, target="h200")
    [problem] = fake_stack.configured
    assert problem == GemmProblem(64, 48, 32, "tf32", bias=True, activation="gelu", residual=True, preactivation=True)
    resolved = mm.resolve_kernel(problem, "h200", fake_stack.device, eager=True)     # the call's
    assert resolved.kernel.launches == [((0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000), 0)]
    with pytest.raises(ValueError, match="residual.*must match the output"):          # R laid out otherwise
        nova.matmul(a, b, out=out, residual=FakeArray((64, 48), ptr=0x50000, strides=(4, 256)), target="h200")
    with pytest.raises(ValueError, match="takes bias, residual, preactivation: got bias$"):
        resolved.run(0x10000, 0x20000, 0x30000, 0x40000)
    assert len(resolved.kernel.launches) == 1


def test_matmul_host_path(fake_stack):
    a = FakeArray((64, 32), ptr=0x10000)                       # [M, K] row-major
    b = FakeArray((32, 48), ptr=0x20000, strides=(4, 128))     # [K, N] as the transpose of [N, K]
    out = FakeArray((64, 48), ptr=0x30000)
    bias = FakeArray((48,), ptr=0x40000)
    r = nova.matmul(a, b, out=out, bias=bias, activation="relu", target="h200")
    assert r is out
    [problem] = fake_stack.configured
    assert problem == GemmProblem(64, 48, 32, "tf32", False, True, True, "relu", "f32")
    resolved = mm.resolve_kernel(problem, "h200", fake_stack.device, eager=True)     # the call's
    assert resolved.kernel.launches == [((0x10000, 0x20000, 0x30000, 0x40000), 0)]
    assert fake_stack.memsets == [(0x30000, 64 * 48, 4, 0, fake_stack.memsets[0][4])]
    with pytest.raises(TypeError, match="pass out="):
        nova.matmul(a, b, target="h200")                      # CAI inputs: Nova cannot allocate
    with pytest.raises(ValueError, match="inner dimensions differ"):
        nova.matmul(a, FakeArray((31, 48)), out=out, target="h200")
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        nova.matmul(FakeArray((64, 32), ptr=0x10004), b, out=out, target="h200", bias=bias, activation="relu")


def test_repeat_call_is_memoised(fake_stack):
    """A repeated call configures and loads nothing again.  How cheap it is is a benchmark's question
    (``python3 -m nova.bench.host_profile``), not a timed assertion here: under a loaded CI runner the
    same loop took 8x longer than alone."""
    a, b, out = FakeArray((64, 32)), FakeArray((32, 48)), FakeArray((64, 48))
    nova.matmul(a, b, out=out, target="h200")
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        mm.matmul(a, b, out=out, target="h200")
    per_call_us = (time.perf_counter() - t0) / n * 1e6
    assert len(fake_stack.configured) == 1 and len(fake_stack.loads) == 1
    print(f"matmul host overhead with a fake driver: {per_call_us:.1f} us/call")


# --------------------------------------------------------------------------- driver logic, fake libcuda
def _decode_params(state, address, n=3):
    """Read kernelParams during the (fake) launch, as the driver does: pointers to 64-bit values."""
    import ctypes
    argv = (ctypes.c_void_p * n).from_address(address)
    state["params"] = [ctypes.c_uint64.from_address(p).value for p in argv]


@pytest.fixture
def fake_cu(monkeypatch):
    """The real ``cuda.bindings.driver`` enums and handle types, with the calls faked (no libcuda here)."""
    real = pytest.importorskip("cuda.bindings.driver")
    ok, bad = real.CUresult.CUDA_SUCCESS, real.CUresult.CUDA_ERROR_INVALID_VALUE
    calls = []
    A = real.CUdevice_attribute
    attrs = {A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
             A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448}
    state = {"current": real.CUcontext(0), "launch_result": ok}

    def rec(name, result):
        def f(*args):
            calls.append((name, args))
            return result(*args) if callable(result) else result
        return f

    def set_current(ctx):
        state["current"] = ctx
        return (ok,)

    fake = types.SimpleNamespace(
        CUresult=real.CUresult, CUdevice_attribute=A, CUfunction_attribute=real.CUfunction_attribute,
        CUjit_option=real.CUjit_option, CUstream=real.CUstream, CUdeviceptr=real.CUdeviceptr,
        cuGetErrorName=lambda e: (ok, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (ok, b"invalid argument"),
        cuDeviceGetCount=rec("count", (ok, 1)), cuDeviceGet=rec("get", (ok, real.CUdevice(0))),
        cuDeviceGetName=rec("name", (ok, b"NVIDIA H200\x00\x00")),
        cuDeviceGetAttribute=rec("attr", lambda a, d: (ok, attrs[a])),
        cuDevicePrimaryCtxRetain=rec("retain", (ok, real.CUcontext(0x1234))),
        cuCtxGetCurrent=rec("getcur", lambda: (ok, state["current"])),
        cuCtxSetCurrent=rec("setcur", set_current),
        cuModuleLoadDataEx=rec("load", (ok, real.CUmodule(0x55))),
        cuModuleGetFunction=rec("getfn", (ok, real.CUfunction(0x66))),
        cuFuncSetAttribute=rec("setattr", (ok,)),
        cuLaunchKernel=rec("launch", lambda *a: _decode_params(state, a[9]) or (state["launch_result"],)),
        cuMemsetD32Async=rec("memset32", (ok,)),
    )
    monkeypatch.setattr(driver, "_cu", fake)
    monkeypatch.setattr(driver, "_hot", driver._HotPath())     # no libcuda calls, even on a GPU machine
    monkeypatch.setattr(driver, "_devices", {})
    monkeypatch.setattr(driver, "_kernels", {})
    return types.SimpleNamespace(calls=calls, state=state, bad=bad)


def test_driver_load_and_launch_with_fake_libcuda(fake_cu):
    dev = driver.get_device()
    assert (dev.name, dev.cc, dev.arch, dev.smem_optin) == ("NVIDIA H200", (9, 0), "sm_90", 232448)
    art = make_artifact()                                   # sm_90 cubin, 99840 B smem
    k = driver.load_kernel(art, dev, "gemm 64x64x64 tf32 NN -> f32", key="k1")
    assert k.loaded_from == "cubin" and driver.load_kernel(art, dev, "again", key="k1") is k
    names = [c[0] for c in fake_cu.calls]
    assert names.count("load") == 1 and names.count("setattr") == 1 and "setcur" in names
    k.launch([0x1000, 0x2000, 0x3000], stream=7)
    launch = [c for c in fake_cu.calls if c[0] == "launch"][-1][1]
    assert launch[1:8] == (64, 1, 1, 128, 1, 1, 99840) and int(launch[8]) == 7
    assert fake_cu.state["params"] == [0x1000, 0x2000, 0x3000]
    driver.memset_async(0x3000, 4096, 4, 7, "zeroing")
    fake_cu.state["launch_result"] = fake_cu.bad
    with pytest.raises(driver.NovaRuntimeError) as info:
        k.launch([1, 2, 3])
    assert str(info.value) == ("launching gemm 64x64x64 tf32 NN -> f32 (grid 64x1x1, block 128, smem 98 KB) on "
                               "NVIDIA H200: CUDA_ERROR_INVALID_VALUE: invalid argument")
    ptx_only = driver.load_kernel(make_artifact(cubin=None), dev, "ptx gemm", key="k2")
    assert ptx_only.loaded_from == "ptx"
    with pytest.raises(driver.NovaRuntimeError, match="needs 262144 B .* allows at most 232448 B"):
        driver.load_kernel(dataclasses.replace(make_artifact(), smem_bytes=256 * 1024), dev, "big", key="k3")


def test_other_context_is_restored(fake_cu):
    real = pytest.importorskip("cuda.bindings.driver")
    dev = driver.get_device(0)
    fake_cu.state["current"] = real.CUcontext(0x9999)       # e.g. torch's context of another device
    previous = dev.make_current()
    assert int(previous) == 0x9999 and int(fake_cu.state["current"]) == 0x1234
    assert dev.make_current() is None                        # already current: no call, nothing to restore
    driver.restore_context(previous)
    assert int(fake_cu.state["current"]) == 0x9999


# --------------------------------------------------------------------------- prune
def bump_abi(m, name: str) -> None:
    """Within monkeypatch context ``m``: family ``name`` registered with its ABI counter bumped."""
    f = family.family(name)
    m.setitem(family._FAMILIES, name, dataclasses.replace(f, abi=f.abi + 1))


def live(entry: dict) -> set[str]:
    from nova.kernels.registry import current_keys
    return current_keys(entry)


def test_prune_removes_what_no_key_of_todays_code_reaches(cache, monkeypatch):
    """A GEMM and an attention kernel stored under today's keys stay; a kernel ABI bump makes that
    family's entries stale (never looked up again) and prune deletes them, the other family's stay;
    an entry under a key nothing computes and a corrupt one go too; --dry-run deletes nothing."""
    from nova.configurator import configure
    from nova.kernels.attention import compile as attention_compile
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.problem import AttentionProblem
    gp = GemmProblem(512, 256, 128)
    gs = configure(gp, "h200").schedule
    gemm_key = kernel_key(gp, gs, H200)
    cache.put(gemm_key, dataclasses.replace(make_artifact(), meta={"problem": gp.to_dict(), "schedule": gs.to_dict()}),
              summary_line(gp, H200))
    ap = AttentionProblem(2, 4, 300, 300, 64, causal=True, dtype="bf16")
    sched = configure_attention(ap, "h200").schedule
    attn_key = attention_compile.attention_key(ap, sched, "fwd", H200)
    cache.put(attn_key, dataclasses.replace(make_artifact(), name="nova_attn_fwd", meta={
        "problem": ap.for_role("fwd").to_dict(), "schedule": sched.to_dict(), "role": "fwd"}), "attention fwd")
    assert cache.prune(current_keys=live) == [] and len(cache.entries()) == 2
    cache.put("ee" + "1" * 62, dataclasses.replace(make_artifact(), meta={"problem": gp.to_dict(),
                                                                          "schedule": gs.to_dict()}), "orphan")
    bad = cache.put("ff" + "2" * 62, make_artifact(), "corrupt")
    bad.write_text(bad.read_text().replace("nova_gemm", "nova_gemx"))
    assert sorted(e.summary for e in cache.prune(dry_run=True, current_keys=live)) == ["corrupt", "orphan"] and \
        len(cache.entries()) == 4
    assert [e.summary for e in cache.prune(dry_run=True)] == ["corrupt"]         # without the families: corrupt only
    assert sorted(e.summary for e in cache.prune(current_keys=live)) == ["corrupt", "orphan"]
    with monkeypatch.context() as m:
        bump_abi(m, "attention")
        assert [e.key for e in cache.prune(current_keys=live)] == [attn_key]
    with monkeypatch.context() as m:
        bump_abi(m, "gemm")
        assert [e.key for e in cache.prune(current_keys=live)] == [gemm_key]
    assert cache.entries() == []


def test_prune_max_size_drops_the_least_recently_used(cache):
    """With max_bytes, prune deletes valid entries oldest-used first (mtime: ``put`` sets it, a ``get``
    hit refreshes it) until the rest fit; a dry run deletes nothing; a limit they fit deletes nothing."""
    from nova.configurator import configure
    keys = []
    for i, m in enumerate((512, 640, 768)):
        p = GemmProblem(m, 256, 128)
        s = configure(p, "h200").schedule
        k = kernel_key(p, s, H200)
        path = cache.put(k, dataclasses.replace(make_artifact(), meta={"problem": p.to_dict(), "schedule": s.to_dict()}),
                         summary_line(p, H200))
        os.utime(path, (time.time() - 1000 + 100 * i,) * 2)      # put in order: keys[0] oldest
        keys.append(k)
    assert cache.get(keys[0]) is not None                        # used now: the most recent
    sizes = {e.key: e.size for e in cache.entries()}
    assert cache.prune(max_bytes=sum(sizes.values())) == []
    two = sizes[keys[0]] + sizes[keys[2]]
    assert [e.key for e in cache.prune(dry_run=True, max_bytes=two)] == [keys[1]] and len(cache.entries()) == 3
    assert [e.key for e in cache.prune(max_bytes=two)] == [keys[1]]
    assert sorted(e.key for e in cache.entries()) == sorted([keys[0], keys[2]])
    assert [e.key for e in cache.prune(max_bytes=0)] == [keys[2], keys[0]] and cache.entries() == []


def test_the_registry_knows_every_family_a_module_registers():
    """``nova cache prune`` judges entries by the registry's families: a family missing there would
    see its fresh kernels pruned as stale (pointwise and multi-tensor were, until they were listed)."""
    import re
    from pathlib import Path
    import nova.kernels
    from nova.kernels import registry  # noqa: F401
    from nova.kernels.family import families
    root = Path(nova.kernels.__file__).parent
    declared = {m.group(1) for path in root.rglob("*.py") if path.name != "family.py"    # its docstring example
                for m in re.finditer(r'register\(KernelFamily\(name="([a-z_]+)"', path.read_text())}
    assert declared and declared <= {f.name for f in families()}
