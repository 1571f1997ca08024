"""``nova-config explain embedding COUNTxDIM --vocab V [--backward] [--dtype ...] [--index-dtype ...] [--target ...]
[--json]``: the embedding schedule of one problem, each derivation step with its reason, the prediction."""
from __future__ import annotations

import argparse

from nova.cli.common import CliParser
from nova.kernels.limits import refuse_too_large
from nova.kernels.embedding.problem import FLOAT_DTYPES, INDEX_DTYPES, EmbeddingProblem, EmbeddingProblemError, \
    parse_embedding_shape


def build_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config explain embedding",
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
    from nova.kernels.explain_report import explain
    args = build_parser().parse_args(argv)

    def configure():
        count, dim = parse_embedding_shape(args.shape)
        problem = EmbeddingProblem("backward" if args.backward else "forward", count, args.vocab, dim, args.dtype,
                                   args.index_dtype)
        refuse_too_large(problem.describe(), problem.bytes_moved + problem.vocab * problem.dim * problem.elem_bytes,
                         EmbeddingProblemError)      # the table, whichever direction
        return configure_embedding(problem, get_target(args.target))
    return explain(configure, (EmbeddingProblemError, TargetError), args.json, render)


def render(cfg) -> None:
    from nova.kernels.explain_report import configured_line, console, header_and_derivation, kernels_table
    con = console()
    header_and_derivation(con, cfg)
    kernels_table(con, cfg, geometry_text)
    configured_line(con, cfg)


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
