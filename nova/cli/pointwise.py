"""``nova-config explain pointwise EXPR SHAPE [--dtype f32|bf16|f16|f64] [--target T] [--json]``.

The expression (``nova/passes/pointwise_expression.py``: input names, IR pointwise ops as functions, numbers, ``**``, ``*``,
``/``, ``+``, ``-``) becomes the canonical ``PointwiseProblem`` a fusion group of the same math would
be: its inputs contiguous arrays of ``SHAPE`` and the dtype.  The text shows the canonical program,
each derivation step with its formula and reason, the schedule and the prediction; ``--json`` the
``PointwiseConfig`` as data.
"""
from __future__ import annotations

import json
import re
import sys
import time

from nova.cli.common import CliParser, dispatch
from nova.kernels.explain_report import derivation_table
from nova.kernels.limits import refuse_too_large
from nova.kernels.pointwise.problem import PointwiseProblemError
from nova.kernels.pointwise.types import FLOAT_TYPES

DEFAULT_TARGET = "h200"


def parse_shape(text: str) -> tuple[int, ...]:
    """``"16384x2048"`` (or ``16384,2048``) -> (16384, 2048): positive extents."""
    parts = [p for p in re.split(r"\s*[xX×,]\s*", str(text).strip())]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise PointwiseProblemError(f"bad shape {text!r}: expected positive extents such as 16384x2048")
    return tuple(int(p) for p in parts)


def build_parser() -> CliParser:
    ap = CliParser(prog="nova-config explain pointwise",
                   description="derive and explain the schedule of one fused pointwise kernel (no GPU needed)")
    ap.add_argument("expression", help="e.g. \"gelu_tanh(x)+y\": names are inputs of SHAPE, functions are IR pointwise "
                                       "ops, numbers are constants; ** * / + - and parentheses")
    ap.add_argument("shape", help="the inputs' and the result's shape, e.g. 16384x2048")
    ap.add_argument("--dtype", default="f32", help=f"element type of every input: {'|'.join(FLOAT_TYPES)} "
                                                   "(default f32)")
    ap.add_argument("--target", default=DEFAULT_TARGET, help=f"GPU model (see nova-config targets; default "
                                                             f"{DEFAULT_TARGET})")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: op, target, arch, problem, expression, schedule, facts, prediction, "
                         "derivation, config_time_ms")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    def run() -> int:
        from nova.hwmodel import get_target
        from nova.kernels.pointwise.derive import configure_pointwise
        from nova.kernels.pointwise.emit import unsupported
        from nova.passes.pointwise_from_ir import expression_problem
        problem = expression_problem(args.expression, parse_shape(args.shape), args.dtype)
        why = unsupported(problem)
        if why:
            raise PointwiseProblemError(f"no Nova pointwise kernel computes {why}")
        refuse_too_large(f"pointwise over {list(problem.shape)}", problem.bytes_moved(), PointwiseProblemError)
        t0 = time.perf_counter()
        cfg = configure_pointwise(problem, get_target(args.target))
        ms = (time.perf_counter() - t0) * 1e3
        if args.json:
            print(json.dumps({**cfg.to_dict(), "config_time_ms": round(ms, 3)}, indent=1, default=str))
        else:
            render(cfg, ms)
        return 0
    return dispatch("nova-config", run)


def render(cfg, config_ms: float = 0.0) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console(width=None if sys.stdout.isatty() else 150, highlight=False)
    p, s, gpu, pr = cfg.problem, cfg.schedule, cfg.target, cfg.prediction
    con.print(f"[bold]{p.describe()}[/] on [bold]{gpu.full_name}[/] ({gpu.name}, {gpu.arch}, {int(gpu.sm_count)} SMs)")
    con.print(f"canonical program: {p.expression()}")
    derivation_table(con, cfg.derivation)
    sch = Table(title="Schedule", show_header=False)
    f = cfg.facts
    for k, v in (("vector width", f"{s.vector} elements per access (16-byte accesses where the layout allows)"),
                 ("threads per CTA", s.threads), ("grid", f"{s.grid} CTAs ({f['ctas_per_sm']} per SM), a grid-stride "
                                                         f"loop of {f['trips']} trip(s) over {f['vectors']} vectors"),
                 ("registers per thread (estimate)", f["regs_estimate"]),
                 ("bytes moved", f"{f['bytes'] / 1e6:.3f} MB (inputs read once, outputs written once)")):
        sch.add_row(k, str(v))
    con.print(sch)
    terms = ", ".join(f"{k} {v:.2f}" for k, v in pr.terms_us.items())
    con.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us, {f['bytes'] / pr.time_us / 1e6:.2f} TB/s, bound by {pr.bound}  "
              f"[dim](terms in us: {terms}; floor {pr.floor_us:.2f} us at the DRAM bandwidth)[/]")
    con.print(f"[dim]configured in {config_ms:.3f} ms, no search, no measurement[/]")
