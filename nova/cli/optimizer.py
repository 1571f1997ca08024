"""``nova-config explain adamw SIZES`` and ``nova-config explain sgd SIZES``: the multi-tensor update of
one optimizer group whose tensors have the element counts ``SIZES`` (``42000000``, or one count per
tensor: ``50304x768,768,768``), its schedule (which depends on the update rule and the target only:
one kernel serves every group of the rule), each derivation step and the prediction for these sizes.
"""
from __future__ import annotations

import json
import sys
import time

from nova.cli.common import CliParser, dispatch
from nova.kernels.limits import refuse_too_large
from nova.kernels.optimizer.problem import (STEP_DTYPES, STORAGE_DTYPES, MultiTensorProblem, OptimizerProblemError,
                                            UpdateRule, parse_sizes)

DEFAULT_TARGET = "h200"


def build_parser(op: str) -> CliParser:
    what = "AdamW (Adam with --adam)" if op == "adamw" else "SGD"
    ap = CliParser(prog=f"nova-config explain {op}",
                   description=f"derive and explain the multi-tensor {what} update of one optimizer group: every "
                               "parameter in one launch (no GPU needed)")
    ap.add_argument("sizes", help="the group's element count (42000000) or one count per tensor, each may be a "
                                  "shape (50304x768,768,768)")
    ap.add_argument("--dtype", default="f32", help=f"element type of the parameters, gradients and state: "
                                                   f"{'|'.join(STORAGE_DTYPES)} (default f32)")
    ap.add_argument("--maximize", action="store_true", help="ascend the gradient (torch.optim's maximize=True)")
    if op == "adamw":
        ap.add_argument("--adam", action="store_true", help="torch.optim.Adam's coupled weight decay "
                                                            "(grad += wd * param) instead of AdamW's decoupled one")
        ap.add_argument("--step-dtype", default="f32", help=f"element type of the step counts: {'|'.join(STEP_DTYPES)} "
                                                            "(default f32, torch's)")
    else:
        ap.add_argument("--momentum", action="store_true", help="with a momentum buffer (momentum != 0)")
        ap.add_argument("--nesterov", action="store_true", help="Nesterov momentum (implies --momentum)")
        ap.add_argument("--first-step", action="store_true",
                        help="the first step with momentum: no buffer yet, it starts as the gradient (implies --momentum)")
    ap.add_argument("--target", default=DEFAULT_TARGET, help=f"GPU model (see nova-config targets; default "
                                                             f"{DEFAULT_TARGET})")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: op, target, arch, problem, describe, schedule, facts, prediction, "
                         "derivation, config_time_ms")
    return ap


def rule_from(op: str, args) -> UpdateRule:
    if op == "adamw":
        return UpdateRule("adamw", args.dtype, args.step_dtype, decoupled=not args.adam, maximize=args.maximize)
    momentum = args.momentum or args.nesterov or args.first_step
    return UpdateRule("sgd", args.dtype, with_momentum=momentum, nesterov=args.nesterov,
                      first_step=args.first_step, maximize=args.maximize)


def main(op: str, argv=None) -> int:
    args = build_parser(op).parse_args(argv)

    def run() -> int:
        from nova.hwmodel import get_target
        from nova.kernels.optimizer.derive import configure_multi_tensor
        problem = MultiTensorProblem(rule_from(op, args), parse_sizes(args.sizes))
        refuse_too_large(f"{op} over {problem.numel} elements", problem.bytes_moved(), OptimizerProblemError)
        t0 = time.perf_counter()
        cfg = configure_multi_tensor(problem, get_target(args.target))
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
    from nova.kernels.optimizer.table import row_words
    from nova.kernels.explain_report import derivation_table
    con = Console(width=None if sys.stdout.isatty() else 150, highlight=False)
    p, s, gpu, pr, f = cfg.problem, cfg.schedule, cfg.target, cfg.prediction, cfg.facts
    rule = p.rule
    con.print(f"[bold]{p.describe()}[/] on [bold]{gpu.full_name}[/] ({gpu.name}, {gpu.arch}, {int(gpu.sm_count)} SMs)")
    con.print(f"per element: {', '.join(rule.reads())} read; {', '.join(rule.writes())} written in place "
              f"({rule.bytes_per_element} B); hyper-parameters ({', '.join(rule.hyper)}) and "
              f"{'the step counts ' if rule.op == 'adamw' else ''}read from the device at run time")
    derivation_table(con, cfg.derivation)
    sch = Table(title="Schedule (the kernel's: the same for every group of this rule)", show_header=False)
    for k, v in (("vector width", f"{s.vector} elements (16-byte accesses)"),
                 ("threads per CTA", s.threads),
                 ("chunk", f"{s.chunk} elements of one tensor per CTA at a time ({s.unroll} vector(s) per thread)"),
                 ("grid", f"{s.grid} persistent CTAs ({f['ctas_per_sm']} per SM) walking {f['chunks']} chunks "
                          f"grid-stride, at most {f['trips']} each"),
                 ("registers per thread (estimate)", f["regs_estimate"]),
                 ("argument table", f"{f['table_bytes']} B: {p.tensors} row{'s' if p.tensors != 1 else ''} of "
                                    f"{row_words(rule)} words (pointers, element count, chunk range), written once "
                                    "at bind")):
        sch.add_row(k, str(v))
    con.print(sch)
    terms = ", ".join(f"{k} {v:.2f}" for k, v in pr.terms_us.items())
    con.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us for {f['bytes'] / 1e6:.1f} MB, "
              f"{f['bytes'] / pr.time_us / 1e6:.2f} TB/s, bound by {pr.bound}  [dim](terms in us: {terms})[/]")
    con.print(f"[dim]configured in {config_ms:.3f} ms, no search, no measurement[/]")
