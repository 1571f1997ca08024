"""A rows problem launched with a given schedule (the probes' variants), outside any plan: its
kernels resolved from the kernel cache for that schedule, launched with bare pointers on torch's
current stream.  Device only (``NOVA_OFFLINE=1``: the probe's build mode compiled them on a host)."""


def launchable(p, s, tensors: dict):
    """``once()``, launching ``p``'s kernels under schedule ``s`` over ``tensors`` (operand name -> CUDA
    tensor; a workspace is allocated here and kept by the closure)."""
    import torch
    from nova.kernels.role_launch import RoleLauncher
    from nova.kernels.rows import abi
    from nova.kernels.rows.launch import _compile_module
    launcher = RoleLauncher(lambda problem, target, s=s: s, _compile_module, abi)
    r = launcher.resolve(p)
    workspace = torch.empty(max(1, r.workspace_bytes // 4), device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    calls = launcher.launch_args(r, {k: v.data_ptr() for k, v in tensors.items()}, workspace.data_ptr())

    def once():
        for kernel, args in calls:
            kernel.launch(args, stream)
    once.workspace = workspace          # kept alive as long as the launches that write it
    return once


def kernel_times(step, iters: int = 30, warmup: int = 5) -> dict[str, float]:
    """Mean CUPTI duration (us) per kernel name of ``step()`` over ``iters`` calls after ``warmup``
    (the probes' timing: each kernel's own duration, no launch gaps)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    per: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            per[e.name] = per.get(e.name, 0.0) + e.device_time / iters
    return per


def build_variants(variants, target: str) -> None:
    """Compile every kernel of the probe's ``variants`` (``[(label, problem, schedule, what)]``) for the
    preset ``target`` into the kernel cache (host, MLIR), printing each one's registers and spills."""
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    gpu = get_target(target)
    for label, p, s, what in variants(gpu):
        for role in s.roles:
            art, _, status = get_or_compile(p, s, role, gpu, offline=False)
            r = art.resources
            print(f"{label:32s} | {what:22s} | {role:15s} {status:8s} {r['registers']} registers, "
                  f"{r['spill_store_bytes']} B spilled, grid {art.grid}")


def random_operands(p, seed: int = 0) -> dict:
    """Random inputs and NaN outputs for every operand of ``p`` (targets in range, rstd positive)."""
    import torch
    from nova.kernels.rows.operands import INDEX_DTYPES
    types = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = {}
    for o in p.inputs + p.outputs:
        shape = {"row": (p.rows, p.n), "col": (p.n,), "per_row": (p.rows,), "scalar": ()}[o.layout]
        if o.dtype in INDEX_DTYPES:
            t[o.name] = torch.randint(0, p.n, shape, device="cuda", generator=g)
        elif o in p.outputs:
            t[o.name] = torch.full(shape, float("nan"), device="cuda", dtype=types[o.dtype])
        else:
            t[o.name] = (2 * torch.randn(shape, device="cuda", generator=g)).to(types[o.dtype])
    if "rstd" in t and p.operand("rstd") in p.inputs:
        t["rstd"] = t["rstd"].abs() + 0.5
    return t
