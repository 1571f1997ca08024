"""What the kernel families' ``nova-config explain`` commands share (attention, rows, embedding here;
``nova/cli`` for pointwise and the optimizer): the one-line error and ``--json`` convention, and the
report's common parts -- the header naming the problem and the GPU, the derivation table (each step's
formula with this GPU's numbers, its value, why), a table of the kernels in launch order, the closing
line.  Each family renders its own schedule between them."""
from __future__ import annotations

import json
import sys


def explain(configure, errors: tuple, as_json: bool, render) -> int:
    """Run ``configure()`` (the family's config of the command's problem); a bad problem, target or
    option (``errors``) is one line on stderr and exit status 2 (``NOVA_DEBUG=1``: the traceback); then
    the config as JSON or ``render(cfg)``."""
    try:
        cfg = configure()
    except errors as e:
        from nova.options import debug
        if debug():
            raise
        print(f"nova-config: error: {e}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(cfg.to_dict(), indent=1, default=str))
    else:
        render(cfg)
    return 0


def console():
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 150, highlight=False)


def derivation_table(con, derivation) -> None:
    """The derivation steps: formula with this GPU's numbers, value, why (brackets in them printed as
    text, not read as rich markup)."""
    from rich.markup import escape
    from rich.table import Table
    t = Table(title="Derivation (each step: formula with this GPU's numbers, decision, why)")
    for col in ("#", "step", "formula", "value", "why"):
        t.add_column(col, overflow="fold")
    for i, st in enumerate(derivation, 1):
        v = f"{st.value:.4g}" if isinstance(st.value, float) else str(st.value)
        t.add_row(str(i), escape(st.step), escape(st.formula), v, escape(st.reason))
    con.print(t)


def header_and_derivation(con, cfg) -> None:
    """The problem on the GPU, then its derivation (``cfg``: a config with ``problem``, ``target``,
    ``derivation``)."""
    p, gpu = cfg.problem, cfg.target
    con.print(f"[bold]{p.describe()}[/] on [bold]{gpu.full_name}[/] ({gpu.name}, {gpu.arch}, {int(gpu.sm_count)} SMs)")
    derivation_table(con, cfg.derivation)


def kernels_table(con, cfg, geometry, bytes_label: str = "MB", bytes_digits: int = 2) -> None:
    """The schedule's kernels in launch order (``cfg.schedule.roles``): geometry (``geometry(schedule,
    role)``), predicted time, bytes and bound from ``cfg.terms``; then the prediction."""
    from rich.table import Table
    s = cfg.schedule
    k = Table(title="Schedule (kernels in launch order)")
    for col in ("kernel", "geometry", "predicted us", bytes_label, "bound"):
        k.add_column(col)
    for role in s.roles:
        term = cfg.terms.get(role, {})
        k.add_row(role, geometry(s, role), f"{term.get('time_us', 0):.2f}",
                  f"{term.get('bytes', 0) / 1e6:.{bytes_digits}f}", str(term.get("bound", "")))
    con.print(k)
    pr = cfg.prediction
    con.print(f"[bold]Prediction[/]: {pr.time_us:.2f} us ({pr.bound}-bound; DRAM floor {pr.floor_us:.2f} us, "
              f"launches {pr.terms_us.get('launch_us', 0):.2f} us)")


def configured_line(con, cfg) -> None:
    con.print(f"[dim]configured in {cfg.config_time_ms:.3f} ms, no search, no measurement[/]")
