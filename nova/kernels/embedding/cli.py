"""``nova-config explain embedding COUNTxDIM --vocab V [--backward] [--dtype ...] [--index-dtype ...] [--target ...]
[--json]``: the embedding schedule of one problem, each derivation step with its reason, the prediction."""
from __future__ import annotations

import argparse
import json
import sys

from nova.kernels.embedding.problem import FLOAT_DTYPES, INDEX_DTYPES, EmbeddingProblem, EmbeddingProblemError, \
    parse_embedding_shape


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="nova-config explain embedding",
                                 description="derive and explain an embedding kernel's schedule: the gather of table "
                                             "rows by index (forward) or the deterministic scatter-add of gradient "
                                             "rows into the table (--backward)")
    ap.add_argument("shape", help="COUNTxDIM: COUNT indices (AxBxDIM: every axis but the last indexes), rows of DIM "
                                  "elements (e.g. 16384x512)")
    ap.add_argument("--vocab", type=int, required=True, help="table rows (e.g. 32768)")
    ap.add_argument("--backward", action="store_true",
                    help="the backward: a stable radix sort of the indices, then each table row's gradients added "
                         "in index order (bit-identical across runs), every row written")
    ap.add_argument("--dtype", default="f32", choices=tuple(FLOAT_DTYPES), help="storage type of the rows (default f32)")
    ap.add_argument("--index-dtype", default="i64", choices=tuple(INDEX_DTYPES), help="index type (default i64)")
    ap.add_argument("--target", default="h200", help="GPU model (see nova-config targets; default h200)")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: problem, schedule, prediction, kernels_us, derivation")
    return ap


def main(argv=None) -> int:
    from nova.hwmodel import TargetError, get_target
    from nova.kernels.embedding.derive import configure_embedding
    args = build_parser().parse_args(argv)
    try:
        count, dim = parse_embedding_shape(args.shape)
        problem = EmbeddingProblem("backward" if args.backward else "forward", count, args.vocab, dim, args.dtype,
                                   args.index_dtype)
        cfg = configure_embedding(problem, get_target(args.target))
    except (EmbeddingProblemError, TargetError) as e:
        from nova.options import debug
        if debug():
            raise
        print(f"nova-config: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(cfg.to_dict(), indent=1, default=str))
        return 0
    render(cfg)
    return 0


def render(cfg) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console(width=None if sys.stdout.isatty() else 150, highlight=False)
    p, s, gpu = cfg.problem, cfg.schedule, cfg.target
    con.print(f"[bold]{p.describe()}[/] on [bold]{gpu.full_name}[/] ({gpu.name}, {gpu.arch}, {int(gpu.sm_count)} SMs)")
    t = Table(title="Derivation (formula with this GPU's numbers, decision, why)")
    for col in ("#", "step", "formula", "value", "why"):
        t.add_column(col, overflow="fold")
    for i, st in enumerate(cfg.derivation, 1):
        v = f"{st.value:.4g}" if isinstance(st.value, float) else str(st.value)
        t.add_row(str(i), st.step, st.formula, v, st.reason)
    con.print(t)
    k = Table(title="Schedule (kernels in launch order)")
    for col in ("kernel", "geometry", "predicted us", "MB", "bound"):
        k.add_column(col)
    for role in s.roles:
        term = cfg.terms.get(role, {})
        k.add_row(role, geometry_text(s, role), f"{term.get('time_us', 0):.2f}", f"{term.get('bytes', 0) / 1e6:.2f}",
                  str(term.get("bound", "")))
    con.print(k)
    pr = cfg.prediction
    con.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us ({pr.bound}-bound; DRAM floor {pr.floor_us:.2f} us, "
              f"launches {pr.terms_us.get('launch_us', 0):.2f} us)")
    con.print(f"[dim]configured in {cfg.config_time_ms:.3f} ms, no search, no measurement[/]")


def geometry_text(s, role: str) -> str:
    from nova.kernels.embedding.abi import split_role
    base, _ = split_role(role)
    if base in ("gather", "accumulate"):
        r = s.rows
        return (f"grid {r.grid}, {r.threads} threads, {r.threads_per_row} per row, {r.rows_per_cta} rows/CTA, "
                f"vec {r.vec}, {r.chunks} chunks")
    sp = s.sort
    if base == "scan":
        return f"1 CTA of {sp.scan_threads} threads, {sp.scan_per_thread} counts each ({sp.entries} counts)"
    return f"grid {sp.tiles}, {sp.tile} threads, {sp.digit_bits}-bit digits"
