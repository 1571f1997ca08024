"""The argument table of a multi-tensor kernel: one small device buffer of 64-bit words, written once
when the kernel is bound to its tensors (host side: plain integers, no torch, no MLIR).

    word 0                  tensors T
    word 1                  chunks C (all tensors')
    word 2 + t * R + k      row t, field k; R = ``row_words(rule)``

Row ``t``: the tensor's pointers in ``rule.pointers()`` order (reads, step count, writes), then its
element count, then its chunks' range ``[chunk_begin, chunk_end)`` in the global chunk order.  Tensor
``t`` has ``ceil(numel_t / chunk)`` chunks (``chunk`` from the schedule, ``vector x threads x unroll``)
numbered after those of tensors ``0 .. t-1``: global chunk ``c`` is chunk ``c - chunk_begin[t]`` of the
tensor ``t`` with ``chunk_begin[t] <= c < chunk_end[t]``.  A CTA walks increasing chunks, so it finds
that row by a forward scan from the last one it used; an empty tensor has an empty range.
"""
from __future__ import annotations

HEADER = ("tensors", "chunks")
TAIL = ("numel", "chunk_begin", "chunk_end")
WORD_BYTES = 8


def row_fields(rule) -> tuple[str, ...]:
    return tuple(rule.pointers()) + TAIL


def row_words(rule) -> int:
    return len(row_fields(rule))


def field_word(rule, tensor, name: str):
    """Word index of ``name`` in row ``tensor`` (an int; the emitter passes index SSA values through
    ``row_base``)."""
    return len(HEADER) + tensor * row_words(rule) + row_fields(rule).index(name)


def chunk_counts(numels, chunk: int) -> list[int]:
    return [-(-int(n) // chunk) for n in numels]


def table_words(rule, rows: list[dict], chunk: int) -> list[int]:
    """The table of ``rows`` (one per tensor: ``{pointer name: address, "numel": n}``), as 64-bit words."""
    counts = chunk_counts([r["numel"] for r in rows], chunk)
    words = [len(rows), sum(counts)]
    begin = 0
    for r, n in zip(rows, counts):
        words += [int(r[name]) for name in rule.pointers()]
        words += [int(r["numel"]), begin, begin + n]
        begin += n
    return words


def table_bytes(rule, tensors: int) -> int:
    return (len(HEADER) + tensors * row_words(rule)) * WORD_BYTES
