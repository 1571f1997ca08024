"""``nova-config``: explain how Nova's Analytic Configurator schedules an operation.

    nova-config explain matmul 4096x4096 [--target h200] [--dtype tf32] [--json] [--symbolic]
    nova-config explain matmul 256x512x512x64 [--batch-strides 0,packed,packed] ...   (a batch of 256 GEMMs)
    nova-config explain attention 32,8,512,64 [--causal] [--dtype tf32] [--target h200] [--json]
    nova-config explain pointwise "gelu_tanh(x)+y" 16384x2048 [--dtype f32|bf16|f16|f64] [--target h200] [--json]
    nova-config explain adamw 42000000 [--dtype bf16] [--adam] [--target h200] [--json]   (also: explain sgd)
    nova-config explain train gpt42m --batch 32 [--seq 512] [--target h200] [--json]
    nova-config explain embedding 16384x512 --vocab 32768 [--backward] [--dtype f32|bf16|f16] [--index-dtype i64|i32]
                [--target h200] [--json]
    nova-config explain layernorm|rmsnorm|softmax|log_softmax|cross_entropy ROWSxN [--backward] [--dtype f32|bf16|f16]
                [--target h200] [--json]
    nova-config export triton matmul 4096x4096x4096 [--dtype bf16] [--target h200] [--json]
    nova-config export transform matmul 4096x4096x4096 [--dtype bf16] [--target h200] [--with-payload]
    nova-config targets [--json]
    nova-config show-target h200 [--json]
    nova-config --version

Bad input prints one line on stderr and exits with status 2, a runtime failure with 1
(``nova.cli.common``; ``NOVA_DEBUG=1`` shows tracebacks).
"""
from __future__ import annotations

import argparse
import json
import sys

from nova.cli.common import CliParser, UsageError, add_version, check_tf32_fast, dispatch
from nova.cli.shapes import (ACTIVATION_GRAD_HELP, ROUND_THROUGH_HELP, STRIDES_HELP, parse_batch_strides,
                             parse_problem_shape, round_through_fields)
from nova.configurator import ACTIVATIONS, DTYPES, GemmProblem, ProblemError, configure
from nova.hwmodel import PRESETS, get_target

TARGET_CHOICES = list(PRESETS) + ["auto"]
OPS = ("matmul", "gemm")
ROWS_OPS = ("layernorm", "rmsnorm", "softmax", "log_softmax", "cross_entropy")   # nova/kernels/rows/cli.py


def build_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config", description="Nova's Analytic Configurator: derive a GPU "
                   "schedule in closed form and explain every decision.",
                   epilog="Exit status: 0 success, 2 bad input or usage, 1 a runtime failure.")
    add_version(ap)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explain", help="derive and explain the schedule of one operation")
    ex.add_argument("op", help="operation: matmul (alias gemm); `explain attention`, `explain train`, the rows "
                               "kernels (`explain layernorm|rmsnorm|softmax|log_softmax|cross_entropy ROWSxN`), "
                               "`explain embedding`, `explain pointwise`, `explain adamw` and `explain sgd` have their own options (see "
                               "their --help)")
    ex.add_argument("shape", help="S (M=N=K=S), SxS (square operands, M=N=K=S), MxNxK or BxMxNxK (a batch of B "
                                  "MxNxK GEMMs in one launch)")
    ex.add_argument("--target", default="rtx3060",
                    help=f"GPU model: {'|'.join(TARGET_CHOICES)} (default rtx3060, the design's reference GPU; "
                         "auto reads the live GPU)")
    ex.add_argument("--dtype", default="tf32", help=f"tensor-core mode: {'|'.join(DTYPES)} (default tf32)")
    ex.add_argument("--trans-a", action="store_true", help="A is stored transposed ([K,M] row-major)")
    ex.add_argument("--trans-b", action="store_true", help="B is stored transposed ([N,K] row-major)")
    ex.add_argument("--bias", action="store_true", help="epilogue adds a bias vector of length N")
    ex.add_argument("--activation", default="none", help=f"epilogue activation: {'|'.join(ACTIVATIONS)}")
    ex.add_argument("--residual", action="store_true",
                    help="epilogue adds a residual matrix R (C's shape and type) after the activation")
    ex.add_argument("--preactivation", action="store_true",
                    help="the kernel also writes the pre-activation A @ B + bias as a second output (needs --activation)")
    ex.add_argument("--round-through", action="store_true", help=ROUND_THROUGH_HELP)
    ex.add_argument("--activation-grad", action="store_true", help=ACTIVATION_GRAD_HELP)
    ex.add_argument("--tf32-fast", action="store_true",
                    help="tf32 only: truncate FP32 to TF32 in the tensor cores instead of rounding to nearest (opt-in)")
    ex.add_argument("--out-dtype", default=None, help="output storage f32, bf16 or f16 (default: the inputs' storage)")
    ex.add_argument("--deterministic", action="store_true",
                    help="the same bits on every run: split-K adds its slices in a workspace, in order, not with atomics")
    ex.add_argument("--batch-strides", default=None, metavar="A,B,C", help=STRIDES_HELP)
    ex.add_argument("--eager", action="store_true",
                    help="matmul: the kernel of an eager nova.matmul call, its host time per launch counted (default: "
                         "the device pick a captured graph and a compiled step run)")
    ex.add_argument("--json", action="store_true", help="machine-readable output (schedule, prediction, derivation)")
    ex.add_argument("--symbolic", action="store_true", help="show each formula as a sympy expression too")
    tg = sub.add_parser("targets", help="list the GPU presets with their key figures")
    tg.add_argument("--json", action="store_true", help="machine-readable output: a list of the presets' key figures")
    st = sub.add_parser("show-target", help="print every quantity of one GPU model with its source")
    st.add_argument("name", help=f"{'|'.join(TARGET_CHOICES)}")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    from nova.cli import export
    exp = sub.add_parser("export", help="a GEMM's schedule in another tool's format: a Triton config or a "
                                        "transform-dialect script", description=export.DESCRIPTION)
    export.add_formats(exp)
    return ap


def _console():
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 150, highlight=False)


def cmd_explain(args) -> int:
    if args.op not in OPS:
        raise ProblemError(f"unknown operation {args.op!r}; supported: matmul, attention, pointwise, adamw, sgd, train, embedding, "
                           f"{', '.join(ROWS_OPS)}")
    (M, N, K), batch = parse_problem_shape(args.shape)
    if args.batch_strides is not None and "B" not in batch:
        raise UsageError(f"--batch-strides applies to a batched shape BxMxNxK; {args.shape} is a single GEMM")
    check_tf32_fast([args.dtype], args.tf32_fast)
    strides = parse_batch_strides(args.batch_strides) if args.batch_strides is not None else (None, None, None)
    problem = GemmProblem(M, N, K, dtype=args.dtype, trans_a=args.trans_a, trans_b=args.trans_b,
                          bias=args.bias, activation=args.activation,
                          tf32_rounding="truncate" if args.tf32_fast else "rna", deterministic=args.deterministic,
                          batch=batch.get("B", 1), batch_stride_a=strides[0], batch_stride_b=strides[1],
                          batch_stride_c=strides[2], residual=args.residual, preactivation=args.preactivation,
                          activation_grad=args.activation_grad,
                          **round_through_fields(args.dtype, args.round_through, args.out_dtype))
    cfg = configure(problem, get_target(args.target), eager=args.eager)
    if args.json:
        print(json.dumps(cfg.to_dict(), indent=1))
        return 0
    render_explain(cfg, symbolic=args.symbolic, console=_console())
    return 0


def render_explain(cfg, *, symbolic: bool = False, console=None) -> None:
    """Human-readable derivation, schedule, roofline position and prediction."""
    from rich.table import Table
    console = console or _console()
    p, s, pr, gpu = cfg.problem, cfg.schedule, cfg.prediction, cfg.target
    console.print(f"[bold]{p.describe()}[/] on [bold]{gpu.full_name}[/] ({gpu.name}, {gpu.arch}, "
                  f"{int(gpu.sm_count)} SMs @ {gpu.clock_hz / 1e9:.2f} GHz)")
    t = Table(title="Derivation (each step: formula with this GPU's numbers, decision, why)", show_lines=False)
    for col in ("#", "step", "formula", "value", "why"):
        t.add_column(col, overflow="fold")
    for i, st in enumerate(cfg.derivation, 1):
        formula = st.formula + (f"\n[dim]{st.symbolic}[/]" if symbolic and st.symbolic else "")
        value = st.value if not isinstance(st.value, float) else f"{st.value:.4g}"
        t.add_row(str(i), st.step, formula, str(value), st.reason)
    console.print(t)

    sch = Table(title="Schedule", show_header=False)
    if cfg.skinny:
        for k_, v in skinny_rows(p, s, gpu):
            sch.add_row(k_, str(v))
        console.print(sch)
        render_prediction(cfg, console)
        return
    grid = s.grid(p.M, p.N, p.batch)
    rows = [
        ("instruction", str(s.mma)),
        tile_row(s),
        warp_row(s),
        ("threads per block", s.threads_per_block),
        ("stages", s.stages),
        ("shared memory", f"{s.smem_bytes} B ({s.smem_layout}: A +{s.smem_pad_a}, B +{s.smem_pad_b} elements per row)"),
        ("registers per thread (estimate)", s.regs_per_thread if s.hopper is None else
         f"{s.regs_per_thread} at launch; setmaxnreg: producer {s.hopper.producer_regs}, each consumer "
         f"{s.hopper.consumer_regs}"),
        ("blocks per SM", s.blocks_per_sm),
        ("grid", f"{s.hopper.ctas} persistent CTAs walking {grid[0]} tiles, the last {s.stream_k_tiles} by K-tile "
         "ranges (stream-K)" if s.stream_k else
         f"{s.hopper.ctas} persistent CTAs walking {grid[0] * grid[2]} work units ({units_text(p, grid)})"
         if s.persistent and s.hopper is not None else
         f"{grid[0]} x {grid[1]} x {grid[2]} ({grid[0] * grid[2]} blocks, "
         f"{grid[0] * grid[2] / (gpu.sm_count * s.blocks_per_sm):.2f} waves)"),
        ("split-K", stream_k_row(p, s) if s.stream_k else s.split_k if s.split_k == 1 else
         f"{s.split_k}: " + ("FP32 atomic adds into the zeroed C" if s.split_reduction == "atomic" else
                            f"FP32 partials in a {s.split_k}x{p.M}x{p.N} workspace, added in slice order by a "
                            "reduction kernel (deterministic)")),
        ("rasterization", f"group-M {s.group_m}"),
        ("global vector width", f"A {s.vector_a}, B {s.vector_b}, C {s.vector_c} elements"),
    ]
    if s.hopper is not None:
        rows.append(epilogue_row(s))
    if p.batch > 1:
        rows.append(batch_row(p, s))
    for k_, v in rows:
        sch.add_row(k_, str(v))
    console.print(sch)

    ai = p.flops / p.min_bytes
    ridge = gpu.balance(p.dtype, "dram")
    peak = gpu.peak_flops(p.dtype) / 1e12
    console.print(f"[bold]Roofline[/]: arithmetic intensity {ai:.1f} FLOP/B vs ridge {ridge:.1f} FLOP/B "
                  f"({'compute' if ai >= ridge else 'memory'}-bound region); floor {pr.floor_us:.2f} us "
                  f"= max(FLOPs / {peak:.1f} TFLOP/s, bytes / {gpu.dram_bw / 1e12:.2f} TB/s)")
    terms = ", ".join(f"{k} {v:.2f}" for k, v in pr.terms_us.items())
    console.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us, {pr.tflops:.1f} TFLOP/s "
                  f"({pr.tflops / peak:.0%} of the {peak:.1f} TFLOP/s {p.dtype} peak), bound by {pr.bound}  "
                  f"[dim](terms in us: {terms})[/]")
    cal = cfg.calibrated_time_us
    if cal is not None:
        from nova.hwmodel.calibration import path_for
        clock = cfg.calibrated_clock_mhz
        at = f" at a predicted SM clock of {clock:.0f} MHz (power-limited)" if clock is not None else ""
        cal_tflops = p.flops / cal / 1e6
        console.print(f"[bold]Calibrated[/]: {cal:.2f} us, {cal_tflops:.1f} TFLOP/s{at} (the model's terms scaled "
                      f"by {gpu.name}'s efficiency constants, nova/hwmodel/calibration/"
                      f"{path_for(gpu.name, s.mma.family).name})")
        ceiling = cfg.measured_ceiling
        if ceiling is not None:
            console.print(f"[bold]Ceiling[/]: {ceiling['tflops']:.1f} TFLOP/s {p.dtype} measured on this GPU at its power "
                          f"cap ({ceiling['sm_mhz']:.0f} MHz, a kernel doing nothing but wgmma on random data: "
                          f"nova.bench.tensor_ceiling); calibrated {cal_tflops / ceiling['tflops']:.2f} of it "
                          f"(a GEMM also spends power moving its operands, and holds a lower clock)")
    console.print(f"[dim]configured in {cfg.config_time_ms:.3f} ms, no search, no measurement[/]")


def skinny_rows(p, s, gpu) -> list[tuple[str, str]]:
    """The skinny kernel's schedule (``nova/kernels/gemm/skinny_schedule.py``) as explain's rows."""
    grid = s.grid(p.N)
    if s.lanes_along == "n":
        layout = (f"B row-major [K, N]: {s.threads_n} threads along N ({s.vec} columns each), {s.threads_k} along K, "
                  "their sums met in shared memory in order")
    else:
        layout = (f"B stored [N, K]: {s.threads_n} warps, each {s.rows} column(s) of C, lanes along K ({s.vec} "
                  "elements each), a shuffle butterfly adds them")
    rows = [("kernel", "skinny: B streamed once on the CUDA cores, FP32 FMAs (no tensor cores)"),
            ("layout", layout),
            ("threads per block", s.threads),
            ("loads in flight", f"{s.unroll} vector load(s) of {s.vec * p.in_bytes} B a thread"
             + (f" per row, {s.rows} rows" if s.lanes_along == "k" else "") + f" per trip of {s.span} of K"),
            ("A in shared memory", f"{s.a_chunk} columns at a time as FP32 ({s.stage_loads} load(s) a thread per round)"),
            ("shared memory", f"{s.smem_bytes} B"),
            ("registers per thread (estimate)", f"{s.regs_per_thread} (cap {s.max_regs})"),
            ("blocks per SM", s.blocks_per_sm),
            ("grid", f"{grid[0]} x {grid[1]} ({grid[0] * grid[1]} blocks, "
                     f"{grid[0] * grid[1] / (gpu.sm_count * s.blocks_per_sm):.2f} waves)"),
            ("split-K", "1: the kernel writes C" if not s.split else
             f"{s.splits} slices of {s.k_slice}: FP32 partials in a workspace ({s.workspace_bytes(p.M, p.N)} B with "
             f"the column blocks' counters); the last CTA of each column block adds them in slice order "
             f"({s.reduce_groups} thread group(s); deterministic, one launch)")]
    return rows


def render_prediction(cfg, console) -> None:
    """The skinny kernel's roofline position and prediction (CUDA cores: the FP32 FMA peak)."""
    p, pr, gpu = cfg.problem, cfg.prediction, cfg.target
    peak = gpu.peak_fp32_flops() / 1e12
    console.print(f"[bold]Roofline[/]: {p.min_bytes / 1e6:.2f} MB moved at least, floor {pr.floor_us:.2f} us at "
                  f"{gpu.dram_bw / 1e12:.2f} TB/s; the FMAs need {p.flops / peak / 1e6:.2f} us of the "
                  f"{peak:.1f} TFLOP/s FP32 peak")
    terms = ", ".join(f"{k} {v:.2f}" for k, v in pr.terms_us.items())
    console.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us, bound by {pr.bound}  [dim](terms in us: {terms})[/]")
    console.print(f"[dim]configured in {cfg.config_time_ms:.3f} ms, no search, no measurement[/]")


def units_text(p, grid) -> str:
    """What the Hopper kernel's work units are: tiles x K slices, or tiles x batch elements."""
    if p.batch > 1:
        return f"{grid[0] // p.batch} tiles x batch {p.batch}"
    return f"{grid[0]} tiles x {grid[2]} K slices"


def stream_k_row(p, s) -> str:
    """The split-K row of a stream-K schedule: the walk (``Schedule.stream_k_plan``) in numbers."""
    plan = s.stream_k_plan(p.M, p.N, p.K)
    dp = f"{plan.dp_tiles} tiles walked whole, then " if plan.dp_tiles else ""
    return (f"none; {dp}stream-K over the last {plan.sk_tiles} tiles: {plan.iters} K-tile iterations on "
            f"{plan.ctas} CTAs ({plan.per_cta:.1f} each), partials for {plan.split_tiles} tiles (up to {plan.slots} "
            f"segments, a {plan.slots}x{p.M}x{p.N} FP32 workspace) added in order by a reduction kernel (deterministic)")


def batch_row(p, s) -> tuple[str, str]:
    """A batched problem's matrices: each operand's batch stride, broadcast or in a tensor map."""
    def operand(op):
        stride = p.batch_stride(op)
        text = "broadcast (one matrix)" if stride == 0 else f"stride {stride}"
        if stride and stride == p.packed_stride(op):
            text += " (packed)"
        if s.hopper is not None and op != "c":
            role = s.hopper.operands.role(op)
            prep = "prep pass into a packed workspace, " if role.prep is not None and role.batch > 1 else ""
            text += f": {prep}{'3-D' if role.batch > 1 else '2-D'} tensor map"
        return f"{op.upper()} {text}"
    return ("batch", f"{p.batch} GEMMs in one launch; " + ", ".join(operand(op) for op in "abc"))


def epilogue_row(s) -> tuple[str, str]:
    """How the Hopper kernel writes C: from registers, or staged in shared memory and TMA-stored."""
    h = s.hopper
    if not h.tma_store:
        return ("epilogue", "registers: predicated stores from the wgmma accumulators between tiles")
    box, wgs = h.box_c, s.consumer_warpgroups
    boxes = f"{box.count} x [{box.rows}x{box.cols}]" if box.count > 1 else f"[{box.rows}x{box.cols}]"
    return ("epilogue", f"TMA store: per consumer warpgroup 2 staging buffers of {boxes} elements "
                        f"({h.ring.staging // wgs // 2} B each, 128B swizzle), {h.ring.staging} B per CTA; the stores "
                        "drain while the next tile's K loop runs")


def tile_row(s) -> tuple[str, str]:
    """The block tile in the problem's coordinates; with swapped operands also the kernel's own."""
    tile = f"{s.block_m} x {s.block_n} x {s.block_k}"
    if getattr(s, "swap_ab", False):
        tile += (f" (operands swapped: the kernel computes C^T = B^T A^T on a {s.block_n} (N) x {s.block_m} (M) "
                 f"tile)")
    return ("block tile (block_m x block_n x block_k)", tile)


def warp_row(s) -> tuple[str, str]:
    """How the warps cover the block tile, in the kernel's orientation (rows first)."""
    if s.mma.family == "wgmma":
        swap = getattr(s, "swap_ab", False)
        rows, cols = (s.block_n, s.block_m) if swap else (s.block_m, s.block_n)
        rname, cname = ("N", "M") if swap else ("M", "N")
        wgs = s.consumer_warpgroups
        if getattr(s, "pingpong", False):
            return ("warpgroups", f"ping-pong: {wgs} consumer warpgroups, each computing whole {rows} ({rname}) x "
                    f"{cols} ({cname}) tiles ({s.tile_slabs} x wgmma m{s.mma.m}n{s.mma.n}k{s.mma.k} per k-step), the "
                    "CTA's tiles alternately, one's epilogue under the other's K loop (named barriers order their "
                    "K loops) + 1 producer warpgroup issuing TMA")
        return ("warpgroups", f"{wgs} consumer warpgroup{'s' if wgs != 1 else ''} of {rows // wgs} ({rname}) x {cols} "
                f"({cname}) covering the {rows} ({rname}) x {cols} ({cname}) tile "
                f"(wgmma m{s.mma.m}n{s.mma.n}k{s.mma.k}) + 1 producer warpgroup issuing TMA")
    return ("warps (warps_m x warps_n), warp tile", f"{s.warps_m} x {s.warps_n} = {s.warps} warps, "
            f"{s.warp_tile_m} x {s.warp_tile_n} ({s.mma_tiles_m} x {s.mma_tiles_n} MMAs, "
            f"{s.acc_regs_per_thread} acc regs/thread)")


def cmd_targets(args) -> int:
    from rich.table import Table
    rows = [m.summary() for m in PRESETS.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    t = Table(title="Nova GPU presets (dense tensor-core peaks at the boost clock)")
    for col in rows[0]:
        t.add_column(col)
    for r in rows:
        t.add_row(*("-" if v is None else str(v) for v in r.values()))
    _console().print(t)
    return 0


def cmd_show_target(args) -> int:
    gpu = get_target(args.name)
    if args.json:
        print(json.dumps({"name": gpu.name, "full_name": gpu.full_name, "arch": gpu.arch, "cc": list(gpu.cc),
                          "features": list(gpu.features),
                          "quantities": {k: {"value": q.value, "unit": q.unit, "source": q.source}
                                         for k, q in gpu.q.items()},
                          "derived": gpu.summary()}, indent=1))
        return 0
    from rich.table import Table
    t = Table(title=f"{gpu.full_name} ({gpu.name}, {gpu.arch}); features: {', '.join(gpu.features)}")
    for col in ("quantity", "value", "unit", "source"):
        t.add_column(col, overflow="fold")
    for k, q in gpu.q.items():
        t.add_row(k, f"{q.value:.6g}", q.unit, q.source)
    for k, v in gpu.summary().items():
        if k not in ("target", "gpu", "arch"):
            t.add_row(f"[bold]{k}[/]", str(v), "derived", "computed from the quantities above")
    _console().print(t)
    return 0


def cmd_export(args) -> int:
    from nova.cli.export import run       # other tools' formats: nova/cli/export.py
    return run(args)


COMMANDS = {"explain": cmd_explain, "targets": cmd_targets, "show-target": cmd_show_target, "export": cmd_export}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["explain", "attention"]:       # fused attention: nova/kernels/attention/cli.py
        from nova.kernels.attention.cli import main as explain_attention
        return explain_attention(argv[2:])
    if argv[:1] == ["explain"] and len(argv) > 1 and argv[1] in ROWS_OPS:     # rows kernels: nova/kernels/rows/cli.py
        from nova.kernels.rows.cli import main as explain_rows
        return explain_rows(argv[1], argv[2:])
    if argv[:2] == ["explain", "embedding"]:       # gather / deterministic scatter-add: nova/kernels/embedding/cli.py
        from nova.kernels.embedding.cli import main as explain_embedding
        return explain_embedding(argv[2:])
    if argv[:2] == ["explain", "train"]:           # a whole training step: nova/cli/train.py
        from nova.cli.train import explain_main
        return explain_main(argv[2:])
    if argv[:2] == ["explain", "pointwise"]:       # one fused pointwise kernel: nova/cli/pointwise.py
        from nova.cli.pointwise import main as explain_pointwise
        return explain_pointwise(argv[2:])
    if argv[:1] == ["explain"] and argv[1:2] in (["adamw"], ["sgd"]):   # a multi-tensor update: nova/cli/optimizer.py
        from nova.cli.optimizer import main as explain_update
        return explain_update(argv[1], argv[2:])
    args = build_parser().parse_args(argv)
    return dispatch("nova-config", lambda: COMMANDS[args.command](args), (OSError,))


if __name__ == "__main__":
    sys.exit(main())
