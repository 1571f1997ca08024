"""The communication schedule of a data-parallel program and its predicted scaling.

The program runs its kernels on one stream, in the planned order, and its collectives on a
communication stream: a collective starts when the kernels before it in the plan have run (its
inputs exist) and the previous collective is done; a kernel that reads a collective's result
waits for it.  Kernel times are ``explain``'s predictions; a collective's is the interconnect's
alpha-beta model (``nova.hwmodel.interconnect.collective_time_us``).  Walking the plan once gives
each bucket's ready, start and end time, the step time (the later of the two streams), the
communication hidden behind the backward and the part left exposed.

Scaling is weak scaling, as data parallelism runs it: each GPU keeps its batch, so
``efficiency = single-GPU step / data-parallel step`` and tokens/s = GPUs x tokens per step / step.
"""
from __future__ import annotations

from nova.hwmodel.interconnect import collective_time_us, gradient_bucket_size


def schedule(planned, kernels, target, world_size: int) -> dict:
    """The JSON-able communication schedule of ``planned`` (``kernels``: explain's KernelReports,
    by group index)."""
    times = {k.index: k.predicted_us for k in kernels}
    ready_at: dict = {}                       # value -> (when it exists, in us from the step's start; its bucket)
    cursor = comm_free = compute = 0.0
    buckets = []
    for index, group in enumerate(planned.groups):
        wait, waited_on = max((ready_at.get(v, (0.0, None)) for v in group.inputs), default=(0.0, None),
                              key=lambda tb: tb[0])
        if group.kind == "collective":
            node = group.nodes[0]
            nbytes = node.inputs[0].type.nbytes
            start = max(cursor, comm_free)
            t = collective_time_us(node.op, nbytes, node.attrs["world_size"], target)
            comm_free = start + t
            for v in group.outputs:
                ready_at[v] = (comm_free, len(buckets))
            buckets.append({"group": index, "op": node.op, "tensors": _bucket_tensors(node), "bytes": nbytes,
                            "ready_us": round(cursor, 2), "start_us": round(start, 2), "time_us": round(t, 2),
                            "end_us": round(comm_free, 2), "exposed_us": 0.0})
            continue
        if group.kernel == "none":                           # a free view: ready with what it views, launches nothing
            for v in group.outputs:
                ready_at[v] = (wait, waited_on)
            continue
        if wait > cursor and waited_on is not None:          # the compute stream stalls on this bucket
            buckets[waited_on]["exposed_us"] = round(buckets[waited_on]["exposed_us"] + wait - cursor, 2)
        cursor = max(cursor, wait) + times.get(index, 0.0)
        compute += times.get(index, 0.0)
        for v in group.outputs:
            ready_at[v] = (cursor, None)
    step = max(cursor, comm_free)
    if buckets and comm_free > cursor:                       # communication after the last kernel
        buckets[-1]["exposed_us"] = round(buckets[-1]["exposed_us"] + comm_free - cursor, 2)
    comm_total = sum(b["time_us"] for b in buckets)
    size = gradient_bucket_size(target, world_size)
    return {"world_size": world_size, "bucket_bytes": size.bytes if size else None,
            "bucket_size_derivation": size.describe() if size else "one rank: nothing to communicate",
            "buckets": buckets, "compute_us": round(compute, 2), "communication_us": round(comm_total, 2),
            "step_us": round(step, 2), "exposed_us": round(step - compute, 2),
            "hidden_us": round(max(0.0, comm_total - (step - compute)), 2)}


def _bucket_tensors(node) -> int:
    """How many tensors a bucket's collective carries (a concat of flattened gradients, or one)."""
    x = node.inputs[0]
    if x.producer is not None and x.producer.op == "concat":
        return len(x.producer.inputs)
    return 1


def scaling(schedule_: dict, single_step_us: float, tokens_per_step: int | None) -> dict:
    """Predicted weak scaling against the single-GPU step."""
    n, step = schedule_["world_size"], schedule_["step_us"]
    out = {"gpus": n, "single_gpu_step_ms": round(single_step_us / 1e3, 4), "step_ms": round(step / 1e3, 4),
           "efficiency": round(single_step_us / step, 4) if step else None}
    if tokens_per_step:
        out["tokens_per_s"] = round(n * tokens_per_step / (step * 1e-6))
        out["single_gpu_tokens_per_s"] = round(tokens_per_step / (single_step_us * 1e-6))
    return out


def render(report: dict, console) -> None:
    """The schedule as a table, then the overlap and the scaling in two lines."""
    from rich.table import Table
    comm, scale = report["communication"], report["scaling"]
    table = Table(title=f"communication schedule: gradient all-reduce over {comm['world_size']} GPUs "
                        f"(ring, alpha-beta model of the target's NVLink)")
    for col in ("bucket", "tensors", "MiB", "ready ms", "start ms", "predicted us", "end ms", "exposed us"):
        table.add_column(col, justify="right")
    for i, b in enumerate(comm["buckets"]):
        table.add_row(str(i), str(b["tensors"]), f"{b['bytes'] / 2**20:.1f}", f"{b['ready_us'] / 1e3:.2f}",
                      f"{b['start_us'] / 1e3:.2f}", f"{b['time_us']:.1f}", f"{b['end_us'] / 1e3:.2f}",
                      f"{b['exposed_us']:.1f}")
    console.print(table)
    console.print(f"bucket size: {comm['bucket_size_derivation']}")
    console.print(f"overlap: {comm['communication_us'] / 1e3:.2f} ms of all-reduce, {comm['hidden_us'] / 1e3:.2f} ms "
                  f"hidden behind the backward, {comm['exposed_us'] / 1e3:.2f} ms exposed; compute "
                  f"{comm['compute_us'] / 1e3:.2f} ms, step {comm['step_us'] / 1e3:.2f} ms")
    line = (f"Scaling: {scale['gpus']} GPUs, {scale['step_ms']:.2f} ms per step vs {scale['single_gpu_step_ms']:.2f} ms "
            f"on one: {scale['efficiency']:.1%} efficiency")
    if scale.get("tokens_per_s"):
        line += (f", {scale['tokens_per_s'] / 1e3:.1f}k tokens/s ({scale['single_gpu_tokens_per_s'] / 1e3:.1f}k on one "
                 f"GPU)")
    console.print(line + " (predicted: weak scaling, each GPU its own batch)")
