"""Each launch of a compiled training step timed on the device, beside the configurator's prediction
for its group and the bytes the group must move: how many of the step's kernels the model predicts
within +-15%, and how close each memory-bound kernel comes to the DRAM copy ceiling.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $OUT
    ... --model llama42m --autocast bf16          # a recipe's step: --autocast, --padded, --clip-grad-norm

Method.  The built-in model's step (``nova.models.make_train_step``, AdamW) is compiled with
``nova.compile`` and run ``--warmup`` times (bound, captured, replayed).  Then its program's launches
run one by one outside the CUDA graph, behind a ``torch.cuda._sleep`` that holds the GPU until the host
has queued them all.  A launch's measured time (``--timing cupti``, the default) is the sum of its
kernels' own durations (``kernel_times``: CUPTI through torch.profiler, the launches separated by
one-cycle ``_sleep`` markers): what the kernels cost in the step's CUDA graph, whose gaps between
kernels are ~0.3 us.  ``--timing events`` takes the CUDA-event span around each launch instead, which
adds eager queueing's ~3 us a launch (kept beside the kernel time as ``span_us``).  ``--repeats``
passes; the median per launch.  (The launches update the parameters as a step does; their values do
not matter here.)  A plan that offloads values to host memory (``NOVA_HOST_OFFLOAD``, on by default)
runs their copies on the copy streams beside the launches: timed one by one, the launches next to a copy
wait for it and read long (0.6 ms for a 100 MB copy over PCIe), so the table is made with
``NOVA_HOST_OFFLOAD=0`` (the same kernels, no transfers); the output says so when the plan has any.

Predictions: ``step.explain(json=True)``'s kernels (the plan the program runs; matched by group index),
its GEMMs at the step's predicted SM clock (``nova.compiler.step_clock``); the SM clock measured while
the launches ran (``nvidia-smi`` every 10 ms, ``harness.ClockSampler``, only the samples inside each
pass's launches, not its sleep) is reported beside it.
Bytes: the group's distinct operands read from outside it plus the values it writes that are read
outside it or returned (each once; a view counts its own elements).  The ceiling: ``--ceiling-tbs``,
else measured in the same process before the launches (``copy_ceiling_tbs``: the best of 20 copies of
1 GiB, read + write bytes over the CUDA-event time; the H200 gives ~4.2 TB/s, an H100 ~3.0).  A
kernel the model calls launch- or latency-bound (``FIXED_COST_BOUNDS``: its fixed costs, not its
bytes, are most of its predicted time) is listed as such, not against the ceiling.  A launch of several
kernels (a rows reduction and its final sum, the embedding backward's sort and accumulate) is counted
twice: as one launch (its bytes over its kernels' summed time) and kernel by kernel
(``each_kernel``: each device kernel's time against its own term of the prediction, its bytes and
bound).  Writes
``step_kernels.json`` and prints the table by predicted kind, the time over the predictions summed by
kernel description (``excess_by_name``: every layer's launches of one GEMM together) and the largest
single misses.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from nova.models.recipe import add_recipe_args, recipe_from_args

BAND = 0.15


def group_bytes(nodes, users, outputs) -> int:
    """What a launch of ``nodes`` must move: its operands produced outside it, and what it writes that
    is read outside it (``users``: value -> reading nodes) or returned (``outputs``)."""
    inside = set(nodes)
    read, written = {}, {}
    for n in nodes:
        for v in n.inputs:
            if getattr(v, "producer", None) not in inside:
                read[id(v)] = v.type.nbytes
        for v in n.outputs:
            if id(v) in outputs or any(u not in inside for u in users.get(id(v), ())):
                written[id(v)] = v.type.nbytes
    return sum(read.values()) + sum(written.values())


def time_launches(torch, launches, repeats: int, windows: list | None = None) -> list[float]:
    """Median device microseconds of each launch (module docstring's method); ``windows`` (when given)
    receives each pass's ``(start, end)`` in ``time.time()`` seconds: the span its launches ran, not the
    sleep before them (ended when the host's synchronize returned)."""
    passes = []
    for _ in range(repeats):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(launches) + 1)]
        torch.cuda.synchronize()
        torch.cuda._sleep(int(2e8))                  # ~0.1 s of the GPU's clock: the host queues everything first
        for event, launch in zip(events, launches):
            event.record()
            launch()
        events[-1].record()
        torch.cuda.synchronize()
        passes.append([a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])])
        if windows is not None:
            end = time.time()
            windows.append((end - events[0].elapsed_time(events[-1]) / 1e3, end))
    return [statistics.median(column) for column in zip(*passes)]


MARKER = "spin_kernel"          # the kernel of torch.cuda._sleep: the separator between launches in a profile


def split_at_markers(activities: list[tuple[str, float]], launches: int) -> list[list[tuple[str, float]]]:
    """``(name, us)`` device activities in start order -- the long sleep, then a marker before each
    launch's activities and one after the last -- as one list per launch."""
    segments, current = [], None
    for name, us in activities:
        if MARKER in name:
            if current is not None:
                segments.append(current)
            current = []
        elif current is not None:
            current.append((name, us))
    segments = segments[1:]                      # the first lies between the long sleep and the first marker
    if len(segments) != launches:
        raise RuntimeError(f"the profile split into {len(segments)} launches, the program has {launches} "
                           f"(no {MARKER!r} kernels in this torch's profile?)")
    return segments


def kernel_times(torch, launches, repeats: int) -> list[dict]:
    """Per launch, the device time of each kernel and copy it ran (CUPTI through torch.profiler), the
    median over ``repeats`` passes: ``{"kernels_us": sum of their durations, "kernels": count, "names":
    [...]}``.  Each pass queues the launches behind one long ``torch.cuda._sleep`` with a one-cycle
    ``_sleep`` before each launch and after the last: the profile's device activities, in start order,
    split at those markers, are each launch's own.  The sum leaves out the gaps between a launch's
    kernels (eager queueing; in the step's CUDA graph they are ~0.3 us each)."""
    from torch.profiler import ProfilerActivity, profile
    passes = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(int(2e8))
            for launch in launches:
                torch.cuda._sleep(1)
                launch()
            torch.cuda._sleep(1)
            torch.cuda.synchronize()
        device = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        passes.append(split_at_markers([(e.name, e.time_range.end - e.time_range.start) for e in device],
                                       len(launches)))
    out = []
    for column in zip(*passes):
        totals = [sum(us for _, us in seg) for seg in column]
        each = [round(statistics.median(us), 3) for us in zip(*([u for _, u in seg] for seg in column))]
        out.append({"kernels_us": round(statistics.median(totals), 3), "kernels": len(column[0]),
                    "names": [name[:60] for name, _ in column[0]], "each_us": each})
    return out


def copy_ceiling_tbs(torch, gib: float = 1.0, copies: int = 20) -> float:
    """The device's DRAM copy rate in TB/s: the fastest of ``copies`` device-to-device copies of ``gib``
    GiB (bytes read + written over the CUDA-event time), after two unmeasured ones."""
    n = int(gib * 2**30) // 4
    src, dst = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    src.uniform_()
    best = float("inf")
    for i in range(copies + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 2:
            best = min(best, start.elapsed_time(end) * 1e-3)
    del src, dst
    return round(2 * 4 * n / best / 1e12, 3)


def measure(model_name: str, batch: int, seq: int | None, warmup: int, repeats: int, ceiling_tbs: float | None,
            timing: str = "cupti", recipe=None) -> dict:
    """``recipe``: the step's ``nova.models.TrainRecipe`` (autocast, a padding mask, clipping), default plain;
    ``ceiling_tbs`` None: measured here (``copy_ceiling_tbs``)."""
    import torch
    import nova
    from nova import models
    from nova.bench.train import padding_masks
    from nova.models import TrainRecipe, make_train_step
    from nova.compiler import step as step_module
    torch.backends.cuda.matmul.allow_tf32 = True
    ceiling_source = "given" if ceiling_tbs is not None else "measured copy"
    ceiling_tbs = ceiling_tbs if ceiling_tbs is not None else copy_ceiling_tbs(torch)
    recipe = recipe or TrainRecipe()
    cfg = models.config(model_name)
    seq = seq or cfg.block_size
    model = models.build(model_name).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    step = nova.compile(make_train_step(model, opt, recipe))
    gen = torch.Generator(device="cuda").manual_seed(0)
    masks = torch.from_numpy(padding_masks(batch, seq, 2, 0)).cuda() if recipe.padded else None
    batches = [tuple(torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda", generator=gen) for _ in range(2))
               + ((masks[i],) if masks is not None else ()) for i in range(2)]
    for i in range(warmup):
        step(*batches[i % 2])
    torch.cuda.synchronize()
    program = step._last.engine.program
    explained = step.explain(json=True)
    reports = {k["index"]: k for k in explained["kernels"]}
    graph = program.graph
    users: dict = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(id(v), []).append(n)
    outputs = {id(o.value) for o in graph.outputs}
    launches = list(program.launches)
    from nova.bench.harness import ClockSampler
    clocks = ClockSampler(interval_ms=10).start()
    time.sleep(0.2)
    windows: list = []
    with torch.no_grad():
        times = time_launches(torch, launches, repeats, windows)
    clocks.stop()
    with torch.no_grad():
        cupti = kernel_times(torch, launches, max(3, repeats // 2)) if timing == "cupti" else None
    clock = clocks.summary(windows, windows[0][0]) or {}
    rows = []
    for k, (launch, span) in enumerate(zip(launches, times)):
        report = reports.get(launch.group, {})
        nbytes = group_bytes(launch.nodes, users, outputs)
        predicted = report.get("predicted_us")
        # the measured time: the launch's kernels' own durations (CUPTI), else its event span
        us = cupti[k]["kernels_us"] if cupti else span
        row = {"group": launch.group, "kind": report.get("kind", launch.kind), "name": report.get("name", ""),
                     "model": report.get("model", ""), "bound": report.get("bound", ""),
                     "predicted_us": predicted, "measured_us": round(us, 3), "span_us": round(span, 3),
                     **({"device_kernels": cupti[k]["kernels"], "kernel_names": cupti[k]["names"],
                         "kernel_us": cupti[k]["each_us"]} if cupti else {}),
                     "ratio": round(us / predicted, 3) if predicted else None, "bytes": nbytes,
                     "tb_per_s": round(nbytes / (us * 1e-6) / 1e12, 3) if us > 0 else None,
                     "of_ceiling": round(nbytes / (us * 1e-6) / 1e12 / ceiling_tbs, 3) if us > 0 else None}
        if cupti:
            row["kernels"] = each_kernel(row, (report.get("schedule") or {}).get("kernels"), ceiling_tbs)
        rows.append(row)
    predicted_clock = explained["prediction"].get("sm_clock") or {}
    result = {"model": model_name, "batch": batch, "seq": seq, "repeats": repeats, "ceiling_tbs": ceiling_tbs,
              "ceiling_source": ceiling_source,
              "timing": timing, "device": torch.cuda.get_device_name(), "launches": len(rows), "rows": rows,
              "sm_mhz": {"measured_median": clock.get("timed_sm_mhz_median"), "samples": clock.get("timed_samples"),
                         "predicted": predicted_clock.get("mhz")},
              "summary": summarize(rows, ceiling_tbs),
              "host_transfers": sum(n.op in ("offload", "reload") for n in graph.nodes)}
    target = step_module._default_target(step._last.device)
    name = getattr(target, "name", target)
    gemms_at_clock(result, step._plan(step._last.captured.graph, name, step._last.device, name), target)
    return result


def gemms_at_clock(result: dict, planned, target) -> None:
    """The kernel model checked apart from the clock model: each calibrated GEMM's prediction at the
    SM clock measured while the launches ran (``sm_mhz.measured_median``; isolated launches hold a
    higher clock than the whole step, whose clock ``nova.compiler.step_clock`` predicts), written
    beside the step clock's as ``predicted_at_measured_clock_us``, and the summary's
    ``within_band_at_measured_clock`` counting GEMMs by it (the other kernels as they are)."""
    from nova.compiler.explain import kernel_reports_at_own_clocks
    mhz = (result.get("sm_mhz") or {}).get("measured_median")
    if not mhz:
        return
    _, gemms = kernel_reports_at_own_clocks(planned, target)
    priced = {report.index: g for report, g in gemms}
    inside = 0
    for row in result["rows"]:
        g = priced.get(row["group"])
        if g is not None and row["kind"] == "gemm":
            row["predicted_at_measured_clock_us"] = round(g.at(mhz)[1], 3)
        p = row.get("predicted_at_measured_clock_us") or row["predicted_us"]
        inside += bool(p) and abs(row["measured_us"] / p - 1) <= BAND
    result["summary"]["within_band_at_measured_clock"] = inside


def each_kernel(row: dict, terms: list | None, ceiling_tbs: float) -> list[dict] | None:
    """A multi-kernel launch's device kernels, each beside its own term of the prediction (``terms``: the
    report's ``kernels``, ``{"role", "kernel", "time_us", "bytes", "bound"}`` each): the CUPTI kernels
    matched to the terms by entry-point name in launch order; None where the launch ran other kernels
    than its terms name (or one kernel: the launch's own row is the kernel's)."""
    if not terms or len(terms) < 2 or len(terms) != len(row.get("kernel_names") or []):
        return None
    left, out = list(terms), []
    for name, us in zip(row["kernel_names"], row["kernel_us"]):
        term = next((t for t in left if t["kernel"] == name), None)
        if term is None:
            return None
        left.remove(term)
        out.append({"role": term["role"], "kernel": name, "measured_us": us, "predicted_us": term["time_us"],
                    "bytes": term["bytes"], "bound": term["bound"],
                    "of_ceiling": round(term["bytes"] / (us * 1e-6) / 1e12 / ceiling_tbs, 3) if us > 0 else None})
    return out


def device_kernels(rows) -> list[tuple[str, dict]]:
    """The memory-bound launches' device kernels, one ``(launch name, kernel)`` each (the kernel
    ``{"bytes", "measured_us", "bound", "of_ceiling"}``): a multi-kernel launch's ``kernels`` where they
    were matched, else the launch itself."""
    return [(r["name"], k) for r in rows if memory_bound(r) for k in (r.get("kernels") or [r])]


def streams(kernel: dict) -> bool:
    """Whether a device kernel is set against the DRAM ceiling (``ceiling_by_kernel``)."""
    return kernel["bound"] not in FIXED_COST_BOUNDS + (FEW_CTAS,)


def memory_bound(row) -> bool:
    """A launch of memory-bound kernels: not a GEMM or attention, and not a host transfer (a copy over
    the host link on a copy engine: no kernel, nothing set against the DRAM ceiling)."""
    return row["kind"] != "transfer" and row["model"] not in (
        "gemm configurator", "gemm configurator (calibrated)", "attention configurator", "fp32 attention")


FIXED_COST_BOUNDS = ("launch", "latency")     # predicted bounds whose time is not the bytes' (not streaming)
FEW_CTAS = "sm"     # a kernel's term bound by the busiest SM's bytes at one SM's rate: too few CTAs to stream


def summarize(rows, ceiling_tbs: float) -> dict:
    """Within +-BAND by count and by measured time; the memory-bound kernels' ceiling fractions."""
    priced = [r for r in rows if r["predicted_us"]]
    inside = [r for r in priced if abs(r["ratio"] - 1) <= BAND]
    total = sum(r["measured_us"] for r in priced) or 1.0
    streaming = [r for r in rows if memory_bound(r) and r["bound"] not in FIXED_COST_BOUNDS]
    return {
        "within_band": len(inside), "priced": len(priced),
        "within_band_time_share": round(sum(r["measured_us"] for r in inside) / total, 3),
        "measured_us": round(sum(r["measured_us"] for r in rows), 1),
        "predicted_us": round(sum(r["predicted_us"] or 0 for r in rows), 1),
        "streaming_kernels": len(streaming),
        "streaming_at_85pct": sum((r["of_ceiling"] or 0) >= 0.85 for r in streaming),
        "streaming_of_ceiling": round(sum(r["bytes"] for r in streaming)
                                      / (sum(r["measured_us"] for r in streaming) * 1e-6) / 1e12 / ceiling_tbs, 3)
        if streaming else None,
        "launch_bound_kernels": sum(1 for r in rows if memory_bound(r) and r["bound"] in FIXED_COST_BOUNDS),
        **ceiling_by_kernel([k for _, k in device_kernels(rows)], ceiling_tbs),
        "by_model": totals_by(priced, lambda r: r["model"] or r["kind"]),
        "by_name": excess_by_name(priced),
    }


def ceiling_by_kernel(kernels, ceiling_tbs: float) -> dict:
    """The ceiling count per device kernel (a launch of several kernels -- a sort and its accumulate, a
    reduction and its final sum -- counts each against its own bytes and bound).  A kernel of a few CTAs
    whose term the model bounds by one SM's streaming rate (``FEW_CTAS``: a final sum of partials in one
    or a few CTAs) is counted with the launch- and latency-bound ones, not against the DRAM ceiling."""
    streaming = [k for k in kernels if streams(k)]
    return {"device_kernels": len(kernels), "device_streaming": len(streaming),
            "device_streaming_at_85pct": sum((k["of_ceiling"] or 0) >= 0.85 for k in streaming),
            "device_fixed_cost": len(kernels) - len(streaming),
            "device_streaming_of_ceiling": round(sum(k["bytes"] for k in streaming)
                                                 / (sum(k["measured_us"] for k in streaming) * 1e-6) / 1e12
                                                 / ceiling_tbs, 3) if streaming else None}


def totals_by(priced, key) -> dict:
    """``{key(row): {"kernels", "within", "measured_us", "predicted_us"}}`` over the priced rows."""
    out: dict = {}
    for r in priced:
        m = out.setdefault(key(r), {"kernels": 0, "within": 0, "measured_us": 0.0, "predicted_us": 0.0})
        m["kernels"] += 1
        m["within"] += abs(r["ratio"] - 1) <= BAND
        m["measured_us"] = round(m["measured_us"] + r["measured_us"], 2)
        m["predicted_us"] = round(m["predicted_us"] + r["predicted_us"], 2)
    return out


def excess_by_name(priced) -> list[dict]:
    """The kernels of one description (every layer's copy of a GEMM, say) together, largest measured -
    predicted time first: a miss repeated in every layer outweighs a larger single one."""
    by_name = totals_by(priced, lambda r: r["name"] or r["kind"])
    return sorted(({"name": name, **m} for name, m in by_name.items()),
                  key=lambda m: -(m["measured_us"] - m["predicted_us"]))


def _mhz(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def render(result: dict) -> str:
    s = result["summary"]
    lines = [f"{result['model']} b{result['batch']}x{result['seq']} on {result['device']}: {result['launches']} launches, "
             f"measured {s['measured_us'] / 1e3:.2f} ms of kernels, predicted {s['predicted_us'] / 1e3:.2f} ms",
             f"within +-{BAND:.0%}: {s['within_band']} of {s['priced']} kernels "
             f"({s['within_band_time_share']:.0%} of the measured time)",
             f"memory-bound kernels streaming: {s['streaming_kernels']}, at >= 85% of {result['ceiling_tbs']} TB/s: "
             f"{s['streaming_at_85pct']} (all together {s['streaming_of_ceiling'] or 0:.0%} of it); "
             f"launch- or latency-bound: {s['launch_bound_kernels']}",
             f"each device kernel apart ({s.get('device_kernels', '-')} of the memory-bound launches): streaming "
             f"{s.get('device_streaming', '-')}, at >= 85%: {s.get('device_streaming_at_85pct', '-')}; launch- or "
             f"latency-bound or of a few CTAs: {s.get('device_fixed_cost', '-')}",
             f"SM clock while timed: {_mhz(result.get('sm_mhz', {}).get('measured_median'))} MHz measured (median), "
             f"{_mhz(result.get('sm_mhz', {}).get('predicted'))} MHz predicted for the step; with the GEMMs priced at "
             f"the measured clock {s.get('within_band_at_measured_clock', '-')} of {s['priced']} within +-{BAND:.0%}",
             "| model | kernels | within +-15% | measured ms | predicted ms |", "|---|---|---|---|---|"]
    for name, m in sorted(s["by_model"].items(), key=lambda kv: -kv[1]["measured_us"]):
        lines.append(f"| {name} | {m['kernels']} | {m['within']} | {m['measured_us'] / 1e3:.3f} | "
                     f"{m['predicted_us'] / 1e3:.3f} |")
    lines.append("most time over the predictions, by kernel description (every launch of it):")
    for m in s.get("by_name", [])[:6]:
        over = m["measured_us"] - m["predicted_us"]
        if over > 0:
            lines.append(f"  {m['name'][:60]:<60} x{m['kernels']:<3} measured {m['measured_us'] / 1e3:7.3f} ms, "
                         f"predicted {m['predicted_us'] / 1e3:7.3f} ({over / 1e3:+.3f})")
    worst = sorted((r for r in result["rows"] if r["ratio"]), key=lambda r: -r["measured_us"] * abs(r["ratio"] - 1))
    lines.append("largest misses (measured x |ratio - 1|):")
    for r in worst[:8]:
        lines.append(f"  group {r['group']:>4} {r['model'][:24]:<24} {r['name'][:48]:<48} predicted {r['predicted_us']:8.1f} "
                     f"measured {r['measured_us']:8.1f} us ({r['ratio']:.2f}x) {r['tb_per_s'] or 0:.2f} TB/s")
    below = below_ceiling(result["rows"])
    lines.append(f"DRAM-bound device kernels below 85% of the copy ceiling: {len(below)}")
    for name, k in below[:8]:
        lines.append(f"  {name[:56]:<56} {k.get('role', ''):<14} {k['bytes'] / 1e6:8.1f} MB in {k['measured_us']:7.1f} us: "
                     f"{_of_ceiling(k['of_ceiling'])} of the ceiling")
    if result.get("host_transfers"):
        lines.append(f"caution: the plan copies {result['host_transfers']} values to host memory and back (host "
                     f"offload); their copies overlap the launches timed one by one, so the launches beside them "
                     f"read long.  NOVA_HOST_OFFLOAD=0 runs the same kernels without them.")
    return "\n".join(lines)


def _of_ceiling(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def below_ceiling(rows) -> list[tuple[str, dict]]:
    """The DRAM-bound device kernels (``device_kernels``' streaming ones) under 85% of the copy ceiling,
    lowest first, each with its launch's name."""
    below = [(name, k) for name, k in device_kernels(rows) if streams(k) and (k["of_ceiling"] or 0) < 0.85]
    return sorted(below, key=lambda item: item[1]["of_ceiling"] or 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt42m", help="a built-in model (nova.models)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's block_size)")
    ap.add_argument("--warmup", type=int, default=3, help="compiled steps before the timing")
    ap.add_argument("--repeats", type=int, default=10, help="timed passes over the launches (median per launch)")
    ap.add_argument("--ceiling-tbs", type=float, default=None,
                    help="the DRAM copy ceiling in TB/s (default: measured, the best of 20 copies of 1 GiB)")
    ap.add_argument("--timing", choices=("events", "cupti"), default="cupti",
                    help="what a launch's measured time is: events, the CUDA-event span around it (its kernels and "
                         "the gaps between them); cupti, the sum of its kernels' own durations (torch.profiler), the "
                         "event span kept beside it as span_us")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    add_recipe_args(ap)
    args = ap.parse_args(argv)
    try:
        recipe = recipe_from_args(args)
    except ValueError as e:
        print(f"nova.bench.step_kernels: {e}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("nova.bench.step_kernels: needs torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("nova.bench.step_kernels: needs an NVIDIA GPU (torch sees none)", file=sys.stderr)
        return 2
    result = measure(args.model, args.batch, args.seq, args.warmup, args.repeats, args.ceiling_tbs, args.timing,
                     recipe)
    result["recipe"] = recipe.describe()
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if recipe.describe() == "plain" else "-" + recipe.describe().replace(", ", "-").replace(" ", "")
    with open(os.path.join(args.out, f"step_kernels-{args.model}{suffix}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
