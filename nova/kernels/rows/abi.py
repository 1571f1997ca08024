"""The launch contract of the rows kernels: each role's entry point, its parameters (bare pointers, in
order) and the workspace the launches share.  Read by the builders and by the launcher; imports no MLIR.

Workspace (one f32 buffer per launch site, ``workspace_layout``): ``rowloss`` [rows] (cross-entropy's
per-row losses, added by ``total``), ``scale`` [1] (the backward's dloss / count from ``total_pre``;
the forward-backward kernel uses both), ``partials`` [reductions x splits x n] (the column stage's
per-split sums; with the weight/bias gradients in the row kernel's pass, [gradients x row-kernel
CTAs x n], one partial row per CTA), ``row_parts`` [rows x splits] (a split row reduction's parts,
added by ``row_final``).
"""
from __future__ import annotations

from nova.kernels.rows.kinds import column_problem
from nova.kernels.rows.problem import RowsProblem

KERNEL_NAMES = {"row": "nova_rows", "row_final": "nova_rows_row_final", "column": "nova_rows_column", "column_final": "nova_rows_column_final",
                "partials_final": "nova_rows_partials_final", "total": "nova_rows_total",
                "total_pre": "nova_rows_total_pre"}
WORKSPACE_ALIGN = 256
# the one-CTA kernels of each loss kind: the backward's scale (``total_pre``, into ``scale``) before its row
# kernel, the loss's sum (``total``, of ``rowloss``) after it
LOSS_ROLES = {"cross_entropy": ("total",), "cross_entropy_backward": ("total_pre",),
              "cross_entropy_forward_backward": ("total_pre", "total")}


def loss_workspace(kind: str) -> list[str]:
    """The workspace buffers a loss kind's row kernel writes for its one-CTA kernels, in parameter order."""
    roles = LOSS_ROLES.get(kind, ())
    return (["rowloss"] if "total" in roles else []) + (["scale"] if "total_pre" in roles else [])


def workspace_layout(p: RowsProblem, s) -> tuple[dict, int]:
    """``({name: (byte offset, f32 elements)}, total bytes)`` of the workspace of ``p``'s launches."""
    sizes = {}
    for name in loss_workspace(p.kind):
        sizes[name] = p.rows if name == "rowloss" else 1
    colp = column_problem(p)
    if split_rows(s):
        sizes["row_parts"] = p.rows * s.row.splits
    if getattr(s, "partials", None) is not None:
        sizes["partials"] = s.partials.outputs * s.partials.partials * p.n
    elif colp is not None and s.column is not None and s.column.splits > 1:
        sizes["partials"] = len(colp.prologue.reduce) * s.column.splits * colp.n
    layout, offset = {}, 0
    for name, count in sizes.items():
        layout[name] = (offset, count)
        offset += -(-4 * count // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    return layout, offset


def split_rows(s) -> bool:
    """The row kernel splits each row over several CTAs (``RowTile.splits``): ``row_final`` adds the parts."""
    row = getattr(s, "row", None)
    return row is not None and row.splits > 1


def row_operands(p: RowsProblem) -> list:
    """The operands the row kernel reads and writes (column gradients and the loss are other kernels')."""
    ins = [o for o in p.inputs if o.name != "dloss"]
    outs = [o for o in p.outputs if o.layout in ("row", "per_row")]
    return ins + outs


def partial_outputs(p: RowsProblem) -> list:
    """The gradients the row kernel sums over the rows when it does (dweight, then dbias)."""
    return [o for o in p.outputs if o.layout == "col"]


def params(p: RowsProblem, s, role: str) -> list[tuple[str, str]]:
    """``[(parameter name, what it is)]`` of kernel ``role``: an operand name or ``ws:<workspace name>``."""
    if role == "row":
        names = [o.name for o in row_operands(p)]
        extra = ["ws:" + name for name in loss_workspace(p.kind)]
        if getattr(s, "partials", None) is not None:
            extra = ["ws:partials"]
        if split_rows(s):               # the per-row results are row_final's
            names = [o.name for o in row_operands(p) if o.layout != "per_row" or o in p.inputs]
            extra = ["ws:row_parts"]
        return [(n, n) for n in names] + [(w[3:], w) for w in extra]
    if role == "row_final":
        return [("row_parts", "ws:row_parts")] + [(o.name, o.name) for o in p.outputs if o.layout == "per_row"]
    if role == "partials_final":
        return [("partials", "ws:partials")] + [(o.name, o.name) for o in partial_outputs(p)]
    if role == "total":
        return [("target", "target"), ("rowloss", "ws:rowloss"), ("loss", "loss")]
    if role == "total_pre":
        return [("dloss", "dloss"), ("target", "target"), ("scale", "ws:scale")]
    colp = column_problem(p)
    reduced = [name for _, name in colp.prologue.reduce]
    if role == "column":
        ins = [(o.name, o.name) for o in colp.inputs]
        stored = [(o.name, o.name) for o in colp.outputs if o.name not in reduced]
        tail = [("partials", "ws:partials")] if s.column.splits > 1 else [(n, n) for n in reduced]
        return ins + stored + tail
    if role == "column_final":
        return [("partials", "ws:partials")] + [(n, n) for n in reduced]
    raise ValueError(f"unknown rows kernel role {role!r}")
