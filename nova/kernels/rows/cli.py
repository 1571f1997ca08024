"""``nova-config explain layernorm|rmsnorm|softmax|log_softmax|cross_entropy ROWSxN [--backward] [--forward-backward] [--residual] [--dx-sum] [--dx-cast T] [--dy-parts N] [--dtype ...]
[--target ...] [--json]``: the rows schedule of one problem, each derivation step with its reason, the prediction."""
from __future__ import annotations

import argparse

from nova.cli.common import CliParser
from nova.kernels.limits import refuse_too_large
from nova.kernels.rows.problem import FLOAT_DTYPES, RowsProblemError, parse_rows_shape

OPS = ("layernorm", "rmsnorm", "softmax", "log_softmax", "cross_entropy")


def build_parser(op: str = "layernorm") -> argparse.ArgumentParser:
    ap = CliParser(prog=f"nova-config explain {op}",
                                 description="derive and explain a rows kernel's schedule (row reductions and "
                                             "normalizations: LayerNorm, RMSNorm, softmax, log-softmax, cross-entropy)")
    ap.add_argument("shape", help="ROWSxN: rows of N elements (e.g. 16384x4096; AxBxN: every axis but the last is a row)")
    ap.add_argument("--backward", action="store_true",
                    help="the backward: input gradients (and for the norms the weight/bias gradients: summed in "
                         "the row kernel's pass with one partial row per CTA, or a two-stage column sum); "
                         "cross_entropy: dlogits")
    ap.add_argument("--forward-backward", action="store_true",
                    help="cross_entropy only: the loss and dlogits in one kernel, one pass over the logits (what a "
                         "training step runs when the loss's gradient is known before its forward: the chunked loss)")
    ap.add_argument("--residual", action="store_true",
                    help="layernorm/rmsnorm --backward only: the kernel also reads the residual stream's gradient "
                         "and writes dx + residual (the add a pre-norm block's backward does after the norm's)")
    ap.add_argument("--dx-sum", action="store_true",
                    help="layernorm/rmsnorm --backward only: the kernel also sums the dx it writes over the rows "
                         "(the bias gradient of the linear layer whose output gradient dx is)")
    ap.add_argument("--dx-cast", choices=("bf16", "f16"), default=None, metavar="{bf16,f16}",
                    help="layernorm/rmsnorm --backward only: the kernel also writes dx rounded to this 16-bit type "
                         "(autocast: the FP32 residual stream's gradient beside the next GEMM's 16-bit input); "
                         "--dx-sum then sums the rounded values")
    ap.add_argument("--dy-parts", type=int, choices=(1, 2, 3), default=1, metavar="{1,2,3}",
                    help="layernorm/rmsnorm --backward only: dy read as this many row inputs added in order "
                         "(autocast: the 16-bit gradients of the projections that read the norm's output, "
                         "summed in the kernel instead of an add kernel; default 1)")
    ap.add_argument("--dtype", default="f32", choices=tuple(FLOAT_DTYPES),
                    help="storage type of the rows (f32, bf16, f16; statistics are f32; default f32)")
    ap.add_argument("--target", default="h200", help="GPU model (see nova-config targets; default h200)")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: problem, schedule, prediction, kernels_us, derivation")
    return ap


def main(op: str, argv=None) -> int:
    from nova.hwmodel import TargetError, get_target
    from nova.kernels.explain_report import explain
    from nova.kernels.rows.derive import configure_rows
    from nova.kernels.rows.kinds import cli_problem
    args = build_parser(op).parse_args(argv)

    def configure():
        rows, n = parse_rows_shape(args.shape)
        p = cli_problem(op, rows, n, args.dtype, backward=args.backward, forward_backward=args.forward_backward,
                        residual=args.residual, dx_sum=args.dx_sum, dx_cast=args.dx_cast, dy_parts=args.dy_parts)
        refuse_too_large(p.describe(), p.bytes_moved, RowsProblemError)
        return configure_rows(p, get_target(args.target))
    return explain(configure, (RowsProblemError, TargetError), args.json, render)


def render(cfg) -> None:
    from nova.kernels.explain_report import configured_line, console, header_and_derivation, kernels_table
    con = console()
    header_and_derivation(con, cfg)
    kernels_table(con, cfg, _geometry, "DRAM MB", 1)
    configured_line(con, cfg)


def _geometry(s, role: str) -> str:
    if role == "row":
        r = s.row
        how = "registers" if r.in_registers else f"{r.chunks} chunks a pass"
        walk = (f", {s.partials.groups_per_cta} row groups a CTA, column sums in registers"
                if s.partials is not None else "")
        split = f", each row over {r.splits} CTAs" if r.splits > 1 else ""
        return (f"grid {r.grid}, {r.threads} threads, {r.threads_per_row} per row, {r.rows_per_cta} rows/CTA, "
                f"vec {r.vec}, {how}{walk}{split}")
    if role == "row_final":
        r = s.row
        return f"grid {r.final_grid}, {r.final_threads} threads, a warp per row, {r.splits} parts a row"
    if role == "partials_final":
        f = s.partials
        return (f"grid {f.final_grid}, {f.final_threads_cols}x{f.final_threads_rows} threads, vec {f.final_vec}, "
                f"{f.partials} partials a column")
    if role in ("column", "column_final"):
        c = s.column
        if role == "column":
            return f"grid {c.grid[0]}x{c.grid[1]}, {c.threads_cols}x{c.threads_rows} threads, vec {c.vec}, {c.splits} splits"
        return (f"grid {c.final_grid}, {c.final_threads_cols}x{c.final_threads_rows} threads, vec {c.final_vec}, "
                f"{c.splits} partials a column")
    return f"1 CTA of {s.total_threads} threads"
