"""``nova-config explain attention B,H,T,D [--causal] [--dtype ...] [--target ...] [--json]``."""
from __future__ import annotations

import argparse

from nova.cli.common import CliParser
from nova.kernels.limits import refuse_too_large
from nova.kernels.attention.problem import (ATTN_DTYPES, SCORE_PRECISIONS, AttentionProblem, AttentionProblemError,
                                           score_precision_for)


def parse_shape(text: str) -> tuple[int, int, int, int, int]:
    """``B,H,T,D`` or ``B,H,Tq:Tk,D`` -> (B, H, Tq, Tk, D)."""
    parts = [s.strip() for s in text.replace("x", ",").split(",")]
    if len(parts) != 4:
        raise AttentionProblemError(f"attention shape {text!r}: expected B,H,T,D (e.g. 32,8,512,64)")
    try:
        b, h, d = int(parts[0]), int(parts[1]), int(parts[3])
        tq, _, tk = parts[2].partition(":")
        tq = int(tq)
        tk = int(tk) if tk else tq
    except ValueError:
        raise AttentionProblemError(f"attention shape {text!r}: B, H, T and D must be integers") from None
    return b, h, tq, tk, d


def build_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config explain attention",
                                 description="derive and explain the fused-attention schedule (forward + backward)")
    ap.add_argument("shape", help="B,H,T,D (or B,H,Tq:Tk,D)")
    ap.add_argument("--causal", action="store_true", help="causal mask (key j > query i masked)")
    ap.add_argument("--dtype", default="tf32", help=f"{'|'.join(ATTN_DTYPES)} (default tf32)")
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (grouped-query attention)")
    ap.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(D))")
    ap.add_argument("--target", default="rtx3060", help="GPU model (see nova-config targets; auto = live GPU)")
    ap.add_argument("--score-precision", default=None, choices=SCORE_PRECISIONS,
                    help="tf32 only: each product as one TF32 product (tf32), the scores S = Q K^T as three "
                         "(3xtf32, FP32-accurate scores), or every product as three (fp32, FP32-accurate attention); "
                         "default NOVA_ATTENTION_PRECISION, else tf32")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    return ap


def main(argv=None) -> int:
    from nova.hwmodel import TargetError
    from nova.kernels.explain_report import explain
    from nova.options import OptionError, current
    args = build_parser().parse_args(argv)

    def configure():
        from nova.hwmodel import get_target
        from nova.kernels.attention.derive import configure_attention
        b, h, tq, tk, d = parse_shape(args.shape)
        opts = current()
        precision = args.score_precision or score_precision_for(args.dtype, opts)
        p = AttentionProblem(b, h, tq, tk, d, causal=args.causal, dtype=args.dtype, kv_heads=args.kv_heads,
                             scale=args.scale, score_precision=precision)
        refuse_too_large(p.describe(), p.fwd_bytes + p.bwd_bytes, AttentionProblemError)
        return configure_attention(p, get_target(args.target), options=opts)
    return explain(configure, (AttentionProblemError, TargetError, OptionError), args.json, render)


def render(cfg) -> None:
    from rich.table import Table
    from nova.kernels.explain_report import configured_line, console, header_and_derivation
    con = console()
    s = cfg.schedule
    header_and_derivation(con, cfg)
    title = f"Schedule ({s.mma}, dQ: {s.dq_mode})"
    hb = [r for r in ("bwd_dkv", "bwd_dq") if s.kernel(r).hopper]
    if s.tma or hb:
        fwd = (f"forward: wgmma + TMA, {s.fwd.consumer_warpgroups} consumer warpgroups + a producer, setmaxnreg "
               f"{s.fwd.producer_regs}/{s.fwd.consumer_regs}" if s.tma else f"forward: {s.mma}")
        if hb:
            k = s.kernel(hb[0])
            bwd = (f"backward: wgmma + TMA ({', '.join(hb)}; setmaxnreg {k.producer_regs}/{k.consumer_regs})"
                   + ("" if len(hb) == 2 else f", the rest {s.mma}"))
        else:
            bwd = f"backward: {s.mma}"
        title = f"Schedule ({fwd}; {bwd}, dQ: {s.dq_mode})"
    k = Table(title=title)
    for col in ("kernel", "kept x streamed rows", "warps", "stages", "smem B", "regs (est.)", "blocks/SM", "grid",
                "predicted us", "bound"):
        k.add_column(col)
    for role in s.with_combines(("fwd", "bwd_pre", "bwd_dkv", "bwd_dq")):
        kt = s.kernel(role)
        tm = cfg.terms.get(role, {})
        warps = f"{kt.warps} + {kt.producer_warps}" if kt.hopper else str(kt.warps)
        k.add_row(role, f"{kt.block_rows} x {kt.block_cols}", warps, str(kt.stages), str(kt.smem_bytes),
                  str(kt.regs_per_thread), str(kt.blocks_per_sm), "x".join(map(str, kt.grid)),
                  f"{tm.get('time_us', 0):.1f}", str(tm.get("bound", "")))
    con.print(k)
    pr = cfg.prediction
    con.print(f"[bold]Prediction[/]: {pr.time_us:.1f} us forward + backward, {pr.tflops:.1f} TFLOP/s; floor "
              f"{pr.floor_us:.1f} us")
    configured_line(con, cfg)
