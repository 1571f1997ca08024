"""The launch contract of the embedding kernels: each role's entry point, its parameters (bare pointers, in
order) and the workspace the backward's launches share.  Read by the builders and by the launcher; imports
no MLIR.

Workspace (i32 words, one buffer per launch site, ``workspace_layout``): ``counts`` [digits x tiles] (a
pass's [digit, tile] count table, scanned in place into offsets), ``keys_a``/``perm_a`` and
``keys_b``/``perm_b`` [count] (the sort's ping-pong: pass k writes ``a`` when k is even, ``b`` when odd;
``perm`` holds each key's index position).
"""
from __future__ import annotations

WORKSPACE_ALIGN = 256
ENTRY = {"gather": "nova_embedding_gather", "histogram": "nova_embedding_histogram", "scan": "nova_embedding_scan",
         "scatter": "nova_embedding_scatter", "accumulate": "nova_embedding_accumulate"}


def split_role(role: str) -> tuple[str, int]:
    """``"scatter1"`` -> ("scatter", 1); roles without a pass -> (role, 0)."""
    base = role.rstrip("0123456789")
    if base not in ENTRY:
        raise ValueError(f"unknown embedding kernel role {role!r}")
    return base, int(role[len(base):] or 0)


def kernel_name(role: str) -> str:
    return ENTRY[split_role(role)[0]]


def workspace_layout(p, s) -> tuple[dict, int]:
    """``({name: (byte offset, i32 words)}, total bytes)`` of the backward's workspace (empty forward)."""
    if s.sort is None:
        return {}, 0
    sizes = {"counts": s.sort.entries, "keys_a": p.count, "perm_a": p.count, "keys_b": p.count, "perm_b": p.count}
    layout, offset = {}, 0
    for name, words in sizes.items():
        layout[name] = (offset, words)
        offset += -(-4 * words // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    return layout, offset


def sorted_buffers(k: int) -> tuple[str, str]:
    """The (keys, perm) workspace buffers pass ``k`` writes."""
    side = "a" if k % 2 == 0 else "b"
    return f"keys_{side}", f"perm_{side}"


def params(p, s, role: str) -> list[tuple[str, str]]:
    """``[(parameter name, what it is)]`` of kernel ``role``: an operand (``idx``, ``table``, ``out``, ``dy``,
    ``grad``) or ``ws:<workspace buffer>``."""
    base, k = split_role(role)
    if base == "gather":
        return [("idx", "idx"), ("table", "table"), ("out", "out")]
    if base == "accumulate":
        keys, perm = sorted_buffers(s.sort.passes - 1)
        return [("keys", f"ws:{keys}"), ("perm", f"ws:{perm}"), ("dy", "dy")] + \
            ([("base", "base")] if p.base else []) + [("grad", "grad")]
    source = [("idx", "idx")] if k == 0 else [("keys_in", f"ws:{sorted_buffers(k - 1)[0]}")]
    if base == "histogram":
        return source + [("counts", "ws:counts")]
    if base == "scan":
        return [("counts", "ws:counts")]
    keys, perm = sorted_buffers(k)
    if k:
        source.append(("perm_in", f"ws:{sorted_buffers(k - 1)[1]}"))
    return source + [("counts", "ws:counts"), ("keys_out", f"ws:{keys}"), ("perm_out", f"ws:{perm}")]
