"""nova.attention's call plans (launch.CallPlan): a repeated call signature launches exactly what the
general path launched, without resolving again; a bias is planned in place (float32) or through its
float32 copy; a changed option, misaligned pointers and copied operands take the general path.  On the
CPU: the driver, the kernel cache and the tensor maps are stand-ins that record the launches (the
device runs them in tests/test_attention_gpu.py and tests/test_attention_mask_gpu.py)."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from nova.hwmodel import get_target                       # noqa: E402
from nova.kernels.attention import launch                 # noqa: E402


class RecordingKernel:
    def __init__(self, role, log):
        self.role, self.log = role, log

    def launch(self, args, stream=0):
        self.log.append((self.role, tuple(args), stream))


@pytest.fixture
def recorded(monkeypatch):
    """Launches as (role, args, stream); ``resolves`` counts the general path's kernel lookups."""
    import nova.kernels.attention.compile as compile_
    import nova.runtime.matmul as matmul
    import nova.runtime.tma as tma
    from nova.runtime import driver
    log, resolves, maps = [], [], {}
    device = types.SimpleNamespace(ordinal=0)
    monkeypatch.setattr(driver, "get_device", lambda ordinal=None: device)
    monkeypatch.setattr(matmul, "resolve_target", lambda target=None, device=None: get_target("h200"))
    monkeypatch.setattr(compile_, "get_or_compile", lambda problem, schedule, role, model: (None, role, "cached"))
    monkeypatch.setattr(compile_, "summary", lambda problem, role, model: role)
    monkeypatch.setattr(driver, "load_kernel", lambda art, dev, what, key: RecordingKernel(key, log))

    def tensor_map(dev, ptr, dtype, shape, strides, rows, cols):       # one id per distinct map, as the cache
        return maps.setdefault((ptr, dtype, tuple(shape), tuple(strides), rows, cols), 1000 + len(maps))
    monkeypatch.setattr(tma, "attention_tensor_map", tensor_map)
    monkeypatch.setattr(launch, "_on_cuda", lambda *named: None)
    monkeypatch.setattr(launch, "_stream", lambda t: 7)
    monkeypatch.setattr(launch, "stream_reader", lambda index: (lambda: 7))
    real_resolve = launch.resolve

    def counting_resolve(*args, **kwargs):
        resolves.append(args[0])
        return real_resolve(*args, **kwargs)
    monkeypatch.setattr(launch, "resolve", counting_resolve)
    launch.reset()
    yield types.SimpleNamespace(log=log, resolves=resolves)
    launch.reset()


def tensors(dtype=torch.bfloat16, B=2, H=4, T=200, D=64, kv=None):
    g = torch.Generator().manual_seed(0)
    q, do = (torch.randn(B, H, T, D, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(B, kv or H, T, D, generator=g).to(dtype) for _ in range(2))
    return q, k, v, do


def fwd_bwd(q, k, v, do, **kw):
    out, lse = torch.empty_like(q), torch.empty(q.shape[:3])
    launch.attention(q, k, v, causal=True, out=out, lse=lse, **kw)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    launch.attention_backward(do, q, k, v, out, lse, causal=True, dq=dq, dk=dk, dv=dv, **kw)
    return out, lse, dq, dk, dv


def strip_fresh(log):
    """The launches with the pointers of each call's fresh allocations left out: the backward's delta
    (bwd_pre's third argument: out, dout, delta; the sixth of dK/dV and dQ: q, k, v, dout, lse, delta,
    outputs) and a split kernel's partials (in place of its outputs, and the first arguments of its
    combine: ``launch.partial_sizes``)."""
    from nova.kernels.attention.build_combine import PARAMS as COMBINE_PARAMS
    out = []
    for i, (role, args, _) in enumerate(log):
        fresh = {"bwd_pre": {2}, "bwd_dkv": {5}, "bwd_dq": {5}}.get(role, set())
        combine = log[i + 1][0] if i + 1 < len(log) and log[i + 1][0].endswith("_combine") else None
        if combine:                                     # the split kernel's partials where its outputs were
            first = {"fwd": 3, "bwd_dkv": 6, "bwd_dq": 6}[role]
            fresh |= set(range(first, first + sum(n.endswith("_part") for n in COMBINE_PARAMS[combine])))
        if role.endswith("_combine"):
            fresh |= set(range(sum(n.endswith("_part") for n in COMBINE_PARAMS[role])))
        out.append((role, tuple(a for j, a in enumerate(args) if j not in fresh)))
    return out


@pytest.mark.parametrize("dtype, D, kv", [(torch.bfloat16, 64, None), (torch.float32, 128, 2), (torch.bfloat16, 128, 1)])
def test_a_repeated_signature_launches_what_the_general_path_did(recorded, dtype, D, kv):
    q, k, v, do = tensors(dtype, D=D, kv=kv)
    bufs = [torch.empty_like(x) for x in (q, q)] + [torch.empty(q.shape[:3])]
    first = fwd_bwd(q, k, v, do)
    general, n = list(recorded.log), len(recorded.resolves)
    recorded.log.clear()
    for _ in range(3):
        fwd_bwd(q, k, v, do)
    assert len(recorded.resolves) == n                     # planned: no kernel lookup, no problem built
    assert {"fwd", "bwd_pre", "bwd_dkv", "bwd_dq"} <= {role for role, *_ in recorded.log}
    assert len(recorded.log) == 3 * len(general)
    # the same kernels with the same arguments, but the fresh outputs of each call: compare per call structure
    assert [r for r, *_ in recorded.log[:len(general)]] == [r for r, *_ in general]
    assert all(len(a) == len(b) for (_, a, _), (_, b, _) in zip(recorded.log, general * 3))
    assert all(s == 7 for *_, s in recorded.log)
    del first, bufs


@pytest.mark.parametrize("shape, hopper", [((2, 4, 200, 64), False), ((4, 8, 1024, 128), True)])
def test_planned_arguments_equal_the_general_paths_on_the_same_tensors(recorded, shape, hopper):
    """Pointers (mma.sync kernels) or tensor maps (the Hopper kernels, looked up by pointer) alike."""
    B, H, T, D = shape
    q, k, v, do = tensors(B=B, H=H, T=T, D=D)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:3])
    launch.attention(q, k, v, causal=True, out=out, lse=lse)
    launch.attention(q, k, v, causal=True, out=out, lse=lse)
    half = len(recorded.log) // 2
    assert strip_fresh(recorded.log[:half]) == strip_fresh(recorded.log[half:])
    recorded.log.clear()
    grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for _ in range(2):
        launch.attention_backward(do, q, k, v, out, lse, causal=True, dq=grads[0], dk=grads[1], dv=grads[2])
    half = len(recorded.log) // 2
    assert strip_fresh(recorded.log[:half]) == strip_fresh(recorded.log[half:])
    plan = next(iter(launch._plans.values()))
    assert plan.resolved.schedule.tma == hopper and bool(plan.maps["fwd"]) == hopper


def test_a_changed_option_takes_the_general_path(recorded, monkeypatch):
    q, k, v, do = tensors(torch.float32)
    fwd_bwd(q, k, v, do)
    n = len(recorded.resolves)
    monkeypatch.setenv("NOVA_ATTENTION_PRECISION", "3xtf32")
    fwd_bwd(q, k, v, do)
    assert len(recorded.resolves) == n + 2
    assert recorded.resolves[-1].score_precision == "3xtf32"
    fwd_bwd(q, k, v, do)                                   # and is planned in turn
    assert len(recorded.resolves) == n + 2


def test_misaligned_and_copied_operands_are_not_planned(recorded):
    q, k, v, do = tensors()
    base = torch.empty(q.numel() + 8, dtype=q.dtype)
    shifted = base[1:1 + q.numel()].view(q.shape)          # 2-byte offset: copied to an aligned buffer
    shifted.copy_(q)
    for _ in range(2):
        launch.attention(shifted, k, v, causal=True)
    assert len(recorded.resolves) == 2
    assert not launch._plans


def test_a_bias_is_planned_in_place_or_through_its_copy(recorded):
    """A float32 bias goes in place on the plan (its pointer, as the general path's); a bf16 one through
    a fresh float32 copy each call; one whose address is off 4 bytes is not planned (the general path
    copies it), and one on a planned signature falls back to the general path."""
    q, k, v, do = tensors()
    for dtype, copied in ((torch.float32, False), (torch.bfloat16, True)):
        launch.reset()
        recorded.resolves.clear()
        recorded.log.clear()
        bias = torch.randn(q.shape[0], 1, 1, k.shape[2]).to(dtype)
        outs = [fwd_bwd(q, k, v, do, bias=bias) for _ in range(3)]
        assert len(recorded.resolves) == 2                 # the forward and the backward once each
        assert {plan.bias_copy for plan in launch._plans.values()} == {copied}
        n = len(recorded.log) // 3
        first, later = recorded.log[:n], recorded.log[n:2 * n]
        assert [r for r, *_ in first] == [r for r, *_ in later]
        biased = [(a[-1], b[-1]) for (r, a, _), (_, b, _) in zip(first, later) if r in ("fwd", "bwd_dkv", "bwd_dq")]
        assert biased
        if not copied:                                     # in place: the bias's own pointer, as the general path's
            assert all(x == y == bias.data_ptr() for x, y in biased)
        else:                                              # a float32 copy's, never the bf16 bias itself
            assert all(bias.data_ptr() not in (x, y) for x, y in biased)
        del outs
    # an address off 4 bytes (a view's offset): copied by the general path, never planned, and a planned
    # signature's call falls back to it
    f32, b16 = torch.zeros(1), torch.zeros(1, dtype=torch.bfloat16)
    assert launch.plan_bias({"bias": "bias's address is not 4-byte aligned"}, f32) is None
    assert launch.plan_bias({"bias": "bias is torch.bfloat16, the kernels read float32"}, b16) is True
    assert launch.plan_bias({}, f32) is False and launch.plan_bias({}, None) is False
    assert launch.plan_bias({"q": "q's address is not 16-byte aligned"}, None) is None
    odd = types.SimpleNamespace(data_ptr=lambda: 4096 + 2)
    assert launch.planned_bias(types.SimpleNamespace(bias_copy=False), odd) is None
    assert launch.planned_bias(types.SimpleNamespace(bias_copy=False), None) == ((), None)
    # end to end: a planned signature whose next bias is off 4 bytes goes the general way (a stand-in
    # plan.resolve count: the general path resolves, the plan does not)
    launch.reset()
    recorded.resolves.clear()
    bias = torch.zeros(q.shape[0], 1, 1, k.shape[2])
    for _ in range(2):
        launch.attention(q, k, v, causal=True, bias=bias)
    assert len(recorded.resolves) == 1
    real = launch.planned_bias
    launch.planned_bias = lambda plan, b: None if b is bias else real(plan, b)     # as if off 4 bytes
    try:
        launch.attention(q, k, v, causal=True, bias=bias)
    finally:
        launch.planned_bias = real
    assert len(recorded.resolves) == 2


def test_an_unaligned_pointer_on_a_planned_signature_falls_back(recorded):
    q, k, v, do = tensors()
    launch.attention(q, k, v, causal=True)
    n = len(recorded.resolves)
    base = torch.empty(q.numel() + 8, dtype=q.dtype)
    shifted = base[1:1 + q.numel()].view(q.shape)          # same dtype, shape and strides; 2-byte offset
    launch.attention(shifted, k, v, causal=True)
    assert len(recorded.resolves) == n + 1                 # the general path (it copies q)


def test_host_cost_bench_runs_both_paths():
    from nova.bench.attention_host import measure
    r = measure((2, 1, 64, 64, "bf16"), calls=5)
    assert set(r) == {"fwd_general_us", "fwd_planned_us", "bwd_general_us", "bwd_planned_us"}
    assert all(v > 0 for v in r.values())


@pytest.mark.gpu
@pytest.mark.parametrize("B, H, Hkv, T, D, dtype", [(2, 3, 3, 77, 64, "tf32"), (1, 4, 2, 150, 64, "bf16"),
                                                     (2, 4, 2, 333, 128, "tf32"), (2, 4, 4, 1000, 64, "bf16")])
def test_planned_calls_match_float64_on_the_gpu(B, H, Hkv, T, D, dtype):
    """The first call takes the general path, the next ones their call plan (Hopper kernels' tensor maps
    looked up by pointer; fresh data in the same tensors, then in new ones): every result against float64.
    Causal cases of tests/test_attention_gpu.py (GPU_TEST_CASES, FLASH_CASES): precompiled for the device."""
    import math
    import nova
    launch.reset()
    dt = {"bf16": torch.bfloat16, "tf32": torch.float32}[dtype]
    tol = {"bf16": (2.5e-2, 5e-2), "tf32": (4e-3, 1e-2)}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(5)

    def fresh():
        q, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        k, v = (torch.randn(B, Hkv, T, D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        return q, k, v, do

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())
    q, k, v, do = fresh()
    for step in range(3):
        if step == 1:                                   # same tensors, new values
            for x, y in zip((q, k, v, do), fresh()):
                x.copy_(y)
        elif step == 2:                                 # new tensors, same signature
            q, k, v, do = fresh()
        out, lse = nova.attention(q, k, v, causal=True)
        dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=True)
        torch.cuda.synchronize()
        qd, kd, vd = (x.double().detach().requires_grad_() for x in (q, k, v))
        g = H // Hkv
        s = (qd @ kd.repeat_interleave(g, 1).transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device="cuda").tril(), float("-inf"))
        ref = torch.softmax(s, -1) @ vd.repeat_interleave(g, 1)
        ref.backward(do.double())
        assert rel(out, ref.detach()) < tol[0] and rel(lse, torch.logsumexp(s, -1).detach()) < tol[0]
        assert max(rel(dq, qd.grad), rel(dk, kd.grad), rel(dv, vd.grad)) < tol[1]
    assert len(launch._plans) == 2                      # the forward's and the backward's signature
