"""The host's cost per call of ``nova.attention`` and ``nova.attention_backward``, on any machine.

    python3 -m nova.bench.attention_host [--reps 2000]

The driver, the kernel cache and the tensor maps are stand-ins (``stand_ins``: a launch records
nothing, a tensor map is a dictionary lookup by pointer as the real cache's hit), so what is timed is
Nova's Python path alone on CPU tensors: the checks, the problem, the kernel lookup, the
arguments.  Each shape is timed twice: every call through the general path (``launch.reset()``
before each, so no call plan is kept) and repeated calls on their call plan (``launch.CallPlan``).
The device adds its own launch (~2-3 us per kernel through ``cuLaunchKernelEx``) and torch's
allocations on the GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
import types
from unittest import mock

SHAPES = ((6, 6, 817, 64, "bf16"), (2, 1, 444, 64, "bf16"), (4, 5, 640, 128, "tf32"), (32, 8, 512, 64, "tf32"))


class IdleKernel:
    def launch(self, args, stream=0):
        return None


@contextlib.contextmanager
def stand_ins():
    """The driver, the cache and the tensor maps replaced for the duration (an H200's schedules)."""
    import nova.kernels.attention.compile as compile_
    import nova.runtime.matmul as matmul
    import nova.runtime.tma as tma
    from nova.hwmodel import get_target
    from nova.kernels.attention import launch
    from nova.runtime import driver
    device, maps = types.SimpleNamespace(ordinal=0), {}

    def tensor_map(dev, ptr, dtype, shape, strides, rows, cols):
        key = ("attn", dev.ordinal, ptr, dtype, tuple(shape), tuple(strides), rows, cols)
        return maps.setdefault(key, len(maps) + 1)
    with mock.patch.object(driver, "get_device", lambda ordinal=None: device), \
            mock.patch.object(driver, "load_kernel", lambda *a, **k: IdleKernel()), \
            mock.patch.object(matmul, "resolve_target", lambda target=None, device=None: get_target("h200")), \
            mock.patch.object(compile_, "get_or_compile", lambda problem, schedule, role, model: (None, role, "cached")), \
            mock.patch.object(tma, "attention_tensor_map", tensor_map), \
            mock.patch.object(launch, "_on_cuda", lambda *named: None), \
            mock.patch.object(launch, "_stream", lambda t: 0), \
            mock.patch.object(launch, "stream_reader", lambda index: (lambda: 0)):
        launch.reset()
        try:
            yield launch
        finally:
            launch.reset()


def per_call_us(fn, calls: int) -> float:
    for _ in range(min(50, calls)):
        fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(shape, calls: int) -> dict:
    """Host microseconds per forward and per backward call, general path and planned."""
    import torch
    B, H, T, D, dtype = shape
    dt = {"bf16": torch.bfloat16, "tf32": torch.float32}[dtype]
    q, k, v, do = (torch.randn(B, H, T, D).to(dt) for _ in range(4))
    out = {}
    with stand_ins() as launch:
        o, lse = launch.attention(q, k, v, causal=True)

        def fwd():
            launch.attention(q, k, v, causal=True)

        def bwd():
            launch.attention_backward(do, q, k, v, o, lse, causal=True)

        def general(fn):
            def run():
                launch._plans.clear()
                fn()
            return run
        for name, fn in (("fwd", fwd), ("bwd", bwd)):
            out[f"{name}_general_us"] = per_call_us(general(fn), calls)
            out[f"{name}_planned_us"] = per_call_us(fn, calls)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.attention_host", description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000, help="timed calls per measurement")
    args = ap.parse_args(argv)
    if args.reps < 1:
        print(f"{ap.prog}: error: --reps must be at least 1", file=sys.stderr)
        return 2
    print(f"{'shape (causal)':28s} {'fwd general':>12s} {'fwd planned':>12s} {'bwd general':>12s} {'bwd planned':>12s}  us/call")
    for shape in SHAPES:
        r = measure(shape, args.reps)
        name = "B{} H{} T{} D{} {}".format(*shape)
        print(f"{name:28s} {r['fwd_general_us']:12.1f} {r['fwd_planned_us']:12.1f} {r['bwd_general_us']:12.1f} "
              f"{r['bwd_planned_us']:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
