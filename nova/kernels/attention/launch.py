"""Run fused attention on torch tensors: ``attention(q, k, v) -> (out, lse)`` and
``attention_backward(dout, q, k, v, out, lse) -> (dq, dk, dv)``.

Runtime only: no MLIR import.  The first call for a problem configures it (``derive.py``), looks its
kernels up in Nova's kernel cache by structural key (compiling on a miss unless offline:
``NOVA_OFFLINE=1`` raises ``NotPrecompiledError`` instead) and loads them; later calls reuse the
memoised kernels and only launch.  Kernels run on torch's current stream; nothing synchronises.

Layout: q ``[B, H, Tq, D]``, k and v ``[B, Hkv, Tk, D]`` (Hkv divides H: grouped-query attention),
torch float32 (TF32 tensor cores, round-to-nearest), bfloat16 or float16.  ``lse`` is
``[B, H, Tq]`` float32, natural log.  Strided operands (views such as the q/k/v slices of a fused
``[B, T, 3, H, D]`` projection, a transposed dout, or ``out``/``dq``/``dk``/``dv`` arena views) are read
and written in place when their head dimension is contiguous and their other strides are multiples
of 16 bytes (``plan_operands``: the strides become part of the problem, so each layout has its own
kernels); any other operand goes through a contiguous copy (an output: written there, then copied
back).  lse must be contiguous when given as the forward's output.

Splits (``KernelTile.splits`` > 1: a forward, dQ or dK/dV whose grid leaves the SMs idle: decode-sized
query lengths, grouped-query dK/dV): the kernel writes FP32 partial slabs into a workspace taken from
torch's allocator on the call's stream (``splits x B*H*Tq x D`` values per output, dK/dV ``splits x
B*Hkv*Tk x D``, and an LSE vector a split for the forward), and the role's combine kernel reduces them
into the outputs right after it.

Repeated calls (``CallPlan``): a call on plain torch tensors whose dtypes, shapes, strides, devices,
arguments and ``NOVA_*`` options match an earlier call that copied no operand (a bias of another dtype
than float32 aside) skips the checks, the problem and the kernel lookup: it reads the data pointers
(their 16-byte alignment checked, a float32 bias's 4-byte; a misaligned one takes the general path),
makes the bias's float32 copy where the plan says, allocates the outputs not given, looks the tensor
maps up by pointer, reads the current stream and launches.  The options are part of the signature
(``options.current()``: a snapshot of the environment per call); the target and the cache directory
are read when a signature is first seen (``reset()`` after changing ``NOVA_TARGET`` or
``NOVA_CACHE_DIR`` in a running process, as for ``nova.matmul``).

``bias`` (optional, both passes): an additive float ``[B|1, H|1, Tq|1, Tk]`` score bias (an attention
mask: 0 keeps, -inf or ``torch.finfo.min`` masks; ``problem.py`` states the semantics), read in place
with its strides (broadcast axes stride 0) when float32, else through a float32 copy; it has no
gradient.  Every kernel that computes scores reads it (the mma.sync and the Hopper kernels alike).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from nova import options
from nova.kernels.attention.problem import AttentionProblem, score_precision_for, strides_reason
from nova.kernels.attention.schedule import COMBINES

_DTYPES = {"torch.float32": "tf32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


@dataclass
class _Resolved:
    problem: AttentionProblem
    schedule: object
    kernels: dict            # role -> LoadedKernel


_memo: dict[tuple, _Resolved] = {}
_lock = threading.RLock()


@dataclass(frozen=True)
class CallPlan:
    """What a repeated call signature needs per call, decided once by the general path: the resolved
    kernels, the device (tensor maps), the shape of lse / delta, the tensor maps' fixed arguments per
    kernel (``(name, map type, shape, strides, box rows, box cols)`` of each operand, in argument order;
    empty for an mma.sync kernel, which takes pointers), the current stream's reader, and whether a
    bias is read in place or through its float32 copy (``planned_bias``)."""
    resolved: _Resolved
    device: object
    vector_shape: tuple
    maps: dict               # role -> tuple of map specs
    stream: object           # () -> the raw handle of torch's current stream on the tensors' device
    bias_copy: bool = False  # the bias (its dtype not float32) goes through ``_bias_copy`` on every call


_plans: dict[tuple, CallPlan] = {}


def signature(tensors, *others) -> tuple | None:
    """The call-plan key of plain torch tensors (None where one is another kind of object): each one's
    dtype, shape, strides and device (None where not given), ``others``, and the options now."""
    from nova.runtime.matmul import plain_torch_types
    fast = plain_torch_types()
    meta = []
    for t in tensors:
        if t is None:
            meta.append(None)
        elif type(t) in fast:
            meta.append((t.dtype, t.shape, t.stride(), t.get_device()))
        else:
            return None
    return (*meta, *others, id(options.current()))


def plannable(target) -> bool:
    """Calls that may take a call plan: a target named by a string or left to the device."""
    return target is None or type(target) is str


def plan_bias(copies: dict, bias) -> bool | None:
    """Whether a call plan copies the bias (its dtype is not float32), from the general path's
    ``copies``; None where the call cannot be planned: another operand is copied, or a float32 bias is
    copied because of its address (which the next call's tensor may not share)."""
    if set(copies) - {"bias"}:
        return None
    copied = bias is not None and bias.dtype != _float32()
    return None if "bias" in copies and not copied else copied


def planned_bias(plan: CallPlan, bias) -> tuple[tuple[int, ...], object] | None:
    """The bias kernel argument on a call plan, and the tensor that must live until the launches are
    queued (the caller keeps the pair until then: a copy freed sooner could be handed to a split
    kernel's partials): ``((), None)`` without a bias, its pointer in place, or its float32 copy's
    (``bias_copy``); None where an in-place bias is not 4-byte aligned (the general path copies it)."""
    if bias is None:
        return (), None
    if plan.bias_copy:
        copy = _bias_copy(bias_view(bias, plan.resolved.problem))
        return (copy.data_ptr(),), copy
    ptr = bias.data_ptr()             # bias_view's reshape and expand keep the pointer
    return ((ptr,), bias) if not ptr % 4 else None


def map_specs(r: _Resolved, role: str, names: tuple, rows_of) -> tuple:
    """The fixed arguments of ``role``'s tensor maps (``_tensor_maps``): per operand name its map type,
    shape, strides, box rows and columns."""
    p = r.problem
    map_type = "tf32" if p.dtype == "tf32" else p.storage
    return tuple((n, map_type, p.operand_shape(n), p.operand_strides(n), rows_of(n), 128 // p.elem_bytes)
                 for n in names)


def planned_maps(plan: CallPlan, role: str, pointers) -> tuple:
    """Device pointers of ``role``'s tensor maps for the operands at ``pointers`` (cached per pointer)."""
    from nova.runtime.tma import attention_tensor_map
    return tuple(attention_tensor_map(plan.device, ptr, spec[1], spec[2], spec[3], spec[4], spec[5])
                 for ptr, spec in zip(pointers, plan.maps[role]))


def stream_reader(device_index: int):
    """``() -> int``: the raw handle of torch's current stream on the device (``tensors.stream_source``)."""
    import sys
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return lambda: torch.cuda.current_stream(device_index).cuda_stream
    return lambda: raw(device_index)


def resolve(problem: AttentionProblem, device_index, target, roles) -> _Resolved:
    """The schedule and the loaded kernels ``roles`` of ``problem`` on the device (memoised)."""
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    opts = options.current()
    memo = (problem, model.name, device.ordinal, opts)              # the options pick the kernels
    hit = _memo.get(memo)
    if hit is not None and all(r in hit.kernels for r in hit.schedule.with_combines(roles)):
        return hit
    with _lock:
        from nova.kernels.attention.compile import get_or_compile, summary
        from nova.kernels.attention.derive import configure_attention
        hit = _memo.get(memo)
        if hit is None:
            hit = _memo[memo] = _Resolved(problem, configure_attention(problem, model, options=opts).schedule, {})
        for role in hit.schedule.with_combines(roles):
            if role not in hit.kernels:
                art, key, _ = get_or_compile(problem, hit.schedule, role, model)
                hit.kernels[role] = driver.load_kernel(art, device, summary(problem, role, model), key)
        return hit


def _problem(q, k, v, causal, scale) -> AttentionProblem:
    """The contiguous problem of q, k, v's shapes and dtype (no device check: meta tensors plan too)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, H, T, D], got shape {list(t.shape)}")
    if q.dtype != k.dtype or q.dtype != v.dtype or str(q.dtype) not in _DTYPES:
        raise ValueError(f"q, k, v must share one dtype of float32/bfloat16/float16, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or Bk != B or Dk != D:
        raise ValueError(f"k and v must be [B, Hkv, Tk, D] matching q {list(q.shape)}: got {list(k.shape)}, {list(v.shape)}")
    dtype = _DTYPES[str(q.dtype)]
    return AttentionProblem(B, H, Tq, Tk, D, causal=bool(causal), dtype=dtype, kv_heads=Hkv, scale=scale,
                            score_precision=score_precision_for(dtype))


def copy_reason(name: str, t, elem_bytes: int) -> str:
    """Why operand ``name`` must go through a contiguous copy before the kernels read (or, an output,
    write) it: strides they cannot address (``problem.strides_reason``) or a base address that is not
    16-byte aligned (cp.async; not known on the meta device, where the executor plans); '' for none."""
    why = strides_reason(name, tuple(t.shape), tuple(t.stride()), elem_bytes)
    if not why and t.device.type != "meta" and t.data_ptr() % 16:
        why = f"{name}'s address is not 16-byte aligned"
    return why


def plan_operands(q, k, v, causal=False, scale=None, bias=None, **others) -> tuple[AttentionProblem, dict[str, str]]:
    """``(problem, copies)`` for these tensors: the problem carries the strides of every operand the
    kernels address in place; ``copies`` maps each other operand to why it is copied (to contiguous
    memory, and back for an output).  ``others``: out, dout, dq, dk, dv (None: allocated contiguous).
    ``bias``: its strides as broadcast to the scores (``bias_view``), the problem's ``bias``."""
    p = _problem(q, k, v, causal, scale)
    named = {"q": q, "k": k, "v": v, **{n: t for n, t in others.items() if t is not None}}
    copies = {n: why for n, t in named.items() if (why := copy_reason(n, t, p.elem_bytes))}
    strides = {n: tuple(t.stride()) for n, t in named.items() if n not in copies}
    bias_strides = ()
    if bias is not None:
        view = bias_view(bias, p)
        if view.dtype != _float32() or (view.device.type != "meta" and view.data_ptr() % 4):
            copies["bias"] = f"bias is {view.dtype}, the kernels read float32" if view.dtype != _float32() \
                else "bias's address is not 4-byte aligned"
            bias_strides = _kept_strides(view)
        else:
            bias_strides = tuple(view.stride())
    return replace(p, strides=strides, bias=bias_strides), copies


def _float32():
    import torch
    return torch.float32


def _bias_copy(t):
    """A contiguous float32 copy of bias view ``t`` with its broadcast (stride-0) axes kept size 1."""
    import torch
    keep = [slice(None) if x else slice(0, 1) for x in t.stride()]
    return t[tuple(keep)].to(torch.float32, memory_format=torch.contiguous_format)


def _kept_strides(t) -> tuple[int, ...]:
    """The strides ``_bias_copy(t)`` has, broadcast axes 0 (no copy made)."""
    out, step = [], 1
    for n, x in reversed(list(zip(t.shape, t.stride()))):
        out.append(step if x else 0)
        step *= n if x else 1
    return tuple(reversed(out))


def bias_view(bias, p: AttentionProblem):
    """``bias`` as a ``[B, H, Tq, Tk]`` view of the scores (broadcast axes stride 0), or ValueError."""
    shape = p.bias_shape
    if bias.dim() > 4 or not bias.is_floating_point():
        raise ValueError(f"bias must be a float tensor broadcastable to [B, H, Tq, Tk] = {list(shape)}, "
                         f"got {bias.dtype} of shape {list(bias.shape)}")
    full = (1,) * (4 - bias.dim()) + tuple(bias.shape)
    if full[3] != shape[3] or any(n not in (1, m) for n, m in zip(full, shape)):
        raise ValueError(f"bias of shape {list(bias.shape)} does not broadcast to the scores [B, H, Tq, Tk] = "
                         f"{list(shape)} (it needs [B|1, H|1, Tq|1, Tk])")
    return bias.reshape(full).expand(shape)


def _on_cuda(*named):
    for name, t in named:
        if not t.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor")


def _stream(t):
    """The raw handle of torch's current stream on ``t``'s device: the launches queue there."""
    import torch
    return torch.cuda.current_stream(t.device).cuda_stream


def _check_out(name, t, shape, dtype, contiguous=False):
    if t is not None and (tuple(t.shape) != tuple(shape) or t.dtype != dtype or (contiguous and not t.is_contiguous())):
        raise ValueError(f"{name} must be a {'contiguous ' if contiguous else ''}{dtype} tensor of shape {list(shape)}")
    return t


def _dense(t):
    """A contiguous, freshly allocated (so 16-byte aligned) copy."""
    import torch
    return t.clone(memory_format=torch.contiguous_format)


def _inputs(copies, named):
    return [_dense(t) if n in copies else t for n, t in named]


def _output(copies, name, t, like):
    """(buffer the kernel writes, tensor to copy it into afterwards or None)."""
    import torch
    if t is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device), None
    if name in copies:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device), t
    return t, None


def _vector(t):
    """lse / delta: contiguous [B, H, T] FP32, 16-byte aligned."""
    return t if t.is_contiguous() and t.data_ptr() % 16 == 0 else _dense(t)


def attention(q, k, v, causal: bool = False, scale: float | None = None, *, bias=None, out=None, lse=None,
              target=None):
    """Fused attention forward; returns ``(out, lse)`` (written into ``out``/``lse`` when given)."""
    import torch
    key = signature((q, k, v, out, lse, bias), "fwd", bool(causal), scale, target) if plannable(target) else None
    plan = _plans.get(key) if key is not None else None
    if plan is not None:
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
        extra = planned_bias(plan, bias) if not (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3]) % 16 else None
        if extra is not None:                   # (extra[1], the bias copy, lives until the launches are queued)
            lse = torch.empty(plan.vector_shape, dtype=torch.float32, device=q.device) if lse is None else lse
            ins = planned_maps(plan, "fwd", ptrs[:3]) if plan.maps["fwd"] else ptrs[:3]
            outs = (ptrs[3], lse.data_ptr())
            split_launch(plan.resolved, "fwd", ins, outs, extra[0], plan.stream(), q)
            return o, lse
    _on_cuda(("q", q), ("k", k), ("v", v), *((("bias", bias),) if bias is not None else ()))
    _check_out("out", out, q.shape, q.dtype)
    p, copies = plan_operands(q, k, v, causal, scale, bias=bias, out=out)
    _check_out("lse", lse, (p.batch, p.heads, p.seq_q), torch.float32, contiguous=True)
    q, k, v = _inputs(copies, (("q", q), ("k", k), ("v", v)))
    r = resolve(p, q.device.index, target, ("fwd",))
    o, back = _output(copies, "out", out, q)
    lse = torch.empty((p.batch, p.heads, p.seq_q), dtype=torch.float32, device=q.device) if lse is None else lse
    outs = (o.data_ptr(), lse.data_ptr())
    bias_arg, bias_held = _bias_arg(p, copies, bias)      # held until the launches are queued
    if r.schedule.tma:          # the Hopper forward reads q, k, v through TMA tensor maps (build_hopper.py)
        split_launch(r, "fwd", hopper_maps(r, q, k, v), outs, bias_arg, _stream(q), q)
    else:
        split_launch(r, "fwd", (q.data_ptr(), k.data_ptr(), v.data_ptr()), outs, bias_arg, _stream(q), q)
    del bias_held
    bias_copy = plan_bias(copies, bias)
    if back is not None:
        back.copy_(o)
    elif key is not None and bias_copy is not None:     # launched as planned: this signature's later calls go short
        kt = r.schedule.fwd
        maps = map_specs(r, "fwd", ("q", "k", "v"), lambda n: kt.block_rows if n == "q" else kt.block_cols) \
            if r.schedule.tma else ()
        _plans[key] = CallPlan(r, _device(q), (p.batch, p.heads, p.seq_q), {"fwd": maps}, stream_reader(q.device.index),
                               bias_copy)
    return (o if back is None else back), lse


def partial_sizes(schedule, problem: AttentionProblem, role: str) -> tuple[int, ...]:
    """FP32 values of each partial buffer a split ``role`` writes (() unsplit): the forward's O slabs,
    then its LSE vectors; dQ's slabs; dK/dV's dK slabs, then its dV slabs."""
    from nova.kernels.attention.build import PARTIALS, slab_extent
    kt = schedule.kernel(role)
    if kt.splits == 1:
        return ()
    return tuple(slab_extent(problem, role, kt.splits, name) for name in PARTIALS[role].values())


def split_launch(r: _Resolved, role: str, inputs: tuple, outputs: tuple, extra: tuple, stream, like) -> None:
    """Launch ``role`` on its arguments ``inputs + outputs + extra`` (``outputs``: the pointers it writes,
    ``extra``: the bias's, if any): unsplit, as they are; split KV, with ``outputs`` replaced by FP32
    slabs of a fresh workspace (O and LSE, or dQ), then the role's combine kernel from the slabs into
    ``outputs``."""
    kt = r.schedule.kernel(role)
    if kt.splits == 1:
        r.kernels[role].launch(inputs + outputs + extra, stream)
        return
    import torch
    sizes = partial_sizes(r.schedule, r.problem, role)
    work = torch.empty(sum(sizes), dtype=torch.float32, device=like.device)
    base = work.data_ptr()
    slabs = tuple(base + 4 * sum(sizes[:i]) for i in range(len(sizes)))
    r.kernels[role].launch(inputs + slabs + extra, stream)
    r.kernels[COMBINES[role]].launch(slabs + outputs, stream)


def _bias_arg(p: AttentionProblem, copies, bias) -> tuple[tuple[int, ...], object]:
    """The bias kernel argument (last) and the tensor it points into: its pointer (of its float32 copy
    where ``copies`` says), or ``((), None)``.  The caller holds the tensor until the launches are
    queued: a copy freed sooner could be handed to the split kernels' partials in between (torch's
    allocator orders reuse after queued work on this stream, not before it)."""
    if bias is None:
        return (), None
    view = bias_view(bias, p)
    if "bias" in copies:
        view = _bias_copy(view)
    return (view.data_ptr(),), view


def _tensor_maps(r: _Resolved, named, rows_of) -> tuple[int, ...]:
    """Device pointers of the tensor maps of the ``(name, tensor)`` pairs ``named``: 4-D (D, T, H, B)
    with the problem's strides, boxes of ``rows_of(name)`` rows x 128 bytes (cached per pointer).  TF32:
    maps of type TF32, so TMA rounds every element to nearest as it lands (as the GEMMs' maps)."""
    from nova.runtime import driver
    from nova.runtime.tma import attention_tensor_map
    p = r.problem
    device = driver.get_device(named[0][1].device.index)
    cols = 128 // p.elem_bytes
    map_type = "tf32" if p.dtype == "tf32" else p.storage
    return tuple(attention_tensor_map(device, t.data_ptr(), map_type, p.operand_shape(n), p.operand_strides(n),
                                      rows_of(n), cols) for n, t in named)


def hopper_maps(r: _Resolved, q, k, v) -> tuple[int, int, int]:
    """The Hopper forward's tensor maps of q, k, v: boxes of the schedule's query / key rows."""
    kt = r.schedule.fwd
    return _tensor_maps(r, (("q", q), ("k", k), ("v", v)), lambda n: kt.block_rows if n == "q" else kt.block_cols)


def hopper_bwd_maps(r: _Resolved, role: str, q, k, v, dout) -> tuple[int, int, int, int]:
    """A Hopper backward kernel's tensor maps of q, k, v, dout: boxes of its kept or streamed rows."""
    from nova.kernels.attention.build_hopper_bwd import tensor_map_rows
    return _tensor_maps(r, (("q", q), ("k", k), ("v", v), ("dout", dout)),
                        lambda n: tensor_map_rows(r.schedule, role, n))


def attention_backward(dout, q, k, v, out, lse, causal: bool = False, scale: float | None = None, *,
                       bias=None, dq=None, dk=None, dv=None, target=None):
    """Gradients of ``attention``: returns ``(dq, dk, dv)``.  Extra memory: one FP32 value per query row (D)."""
    import torch
    key = signature((dout, q, k, v, out, lse, dq, dk, dv, bias), "bwd", bool(causal), scale, target) \
        if plannable(target) else None
    plan = _plans.get(key) if key is not None else None
    if plan is not None:
        grads = tuple(torch.empty(like.shape, dtype=like.dtype, device=like.device) if g is None else g
                      for g, like in ((dq, q), (dk, k), (dv, v)))
        ins = (q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr())
        outs = tuple(g.data_ptr() for g in grads)
        op, lp = out.data_ptr(), lse.data_ptr()
        aligned = not (ins[0] | ins[1] | ins[2] | ins[3] | op | lp | outs[0] | outs[1] | outs[2]) % 16
        extra = planned_bias(plan, bias) if aligned else None
        if extra is not None:                   # (extra[1], the bias copy, lives until the launches are queued)
            stream, kernels = plan.stream(), plan.resolved.kernels
            delta = torch.empty(plan.vector_shape, dtype=torch.float32, device=q.device)
            dp = delta.data_ptr()
            kernels["bwd_pre"].launch((op, ins[3], dp), stream)
            for role, ptrs in (("bwd_dkv", outs[1:]), ("bwd_dq", outs[:1])):
                maps = plan.maps[role]
                split_launch(plan.resolved, role, (planned_maps(plan, role, ins) if maps else ins) + (lp, dp), ptrs,
                             extra[0], stream, q)
            return grads
    _on_cuda(("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out), ("lse", lse),
             *((("bias", bias),) if bias is not None else ()))
    if tuple(dout.shape) != tuple(q.shape) or tuple(out.shape) != tuple(q.shape) or dout.dtype != q.dtype \
            or out.dtype != q.dtype:
        raise ValueError("dout and out must have q's shape and dtype")
    for name, t, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        _check_out(name, t, like.shape, like.dtype)
    p, copies = plan_operands(q, k, v, causal, scale, bias=bias, out=out, dout=dout, dq=dq, dk=dk, dv=dv)
    if tuple(lse.shape) != (p.batch, p.heads, p.seq_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 [B, H, Tq] = {[p.batch, p.heads, p.seq_q]}")
    q, k, v, dout, out = _inputs(copies, (("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out)))
    lse_given = lse
    lse = _vector(lse)
    r = resolve(p, q.device.index, target, ("bwd_pre", "bwd_dkv", "bwd_dq"))
    s = _stream(q)
    delta = torch.empty((p.batch, p.heads, p.seq_q), dtype=torch.float32, device=q.device)
    (gq, bq), (gk, bk), (gv, bv) = (_output(copies, n, t, like) for n, t, like in (("dq", dq, q), ("dk", dk, k),
                                                                                   ("dv", dv, v)))
    r.kernels["bwd_pre"].launch((out.data_ptr(), dout.data_ptr(), delta.data_ptr()), s)
    qp, kp, vp, dop, lp, dp = q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr(), lse.data_ptr(), delta.data_ptr()
    bias_arg, bias_held = _bias_arg(p, copies, bias)      # held until the launches are queued
    for role, outs in (("bwd_dkv", (gk.data_ptr(), gv.data_ptr())), ("bwd_dq", (gq.data_ptr(),))):
        if r.schedule.kernel(role).hopper:       # q, k, v, dout through TMA tensor maps (build_hopper_bwd.py)
            ins = hopper_bwd_maps(r, role, q, k, v, dout)
        else:
            ins = (qp, kp, vp, dop)
        split_launch(r, role, ins + (lp, dp), outs, bias_arg, s, q)
    del bias_held
    for g, back in ((gq, bq), (gk, bk), (gv, bv)):
        if back is not None:
            back.copy_(g)
    bias_copy = plan_bias(copies, bias)
    if key is not None and bias_copy is not None and lse is lse_given:    # launched as planned: later calls go short
        from nova.kernels.attention.build_hopper_bwd import tensor_map_rows
        maps = {role: map_specs(r, role, ("q", "k", "v", "dout"),
                                lambda n, role=role: tensor_map_rows(r.schedule, role, n))
                if r.schedule.kernel(role).hopper else () for role in ("bwd_dkv", "bwd_dq")}
        _plans[key] = CallPlan(r, _device(q), (p.batch, p.heads, p.seq_q), maps, stream_reader(q.device.index),
                               bias_copy)
    return tuple(g if back is None else back for g, back in ((gq, bq), (gk, bk), (gv, bv)))


def _device(t):
    from nova.runtime import driver
    return driver.get_device(t.device.index)


def reset() -> None:
    """Forget the resolved kernels and the call plans (after changing NOVA_TARGET or NOVA_CACHE_DIR)."""
    with _lock:
        _memo.clear()
        _plans.clear()
