"""What one multi-tensor sum kernel computes: the full sum of many tensors in one launch (gradient
clipping's per-parameter sums of squares, ``torch._foreach_norm``), independent of any schedule.

Each tensor is summed as one of the rule's *entries* (or only mapped: an entry that reduces nothing and
writes its stored value, a *store-only* entry -- autocast's casts of the parameters, many tensors in one
launch): a ``SumEntry`` names its operands' element types
(``in0``, ``in1``, ...: every operand has the tensor's element count, read element for element), the
prologue that makes the summed value of one element from them (``nova.kernels.rows.prologue.Prologue``:
``mul(in0, in0)`` for a sum of squares, ``add(in0, in1)`` first for a tied weight's two gradients, a
cast of a 16-bit gradient), at most one value it also writes (``st0``: an intermediate other kernels
read, the accumulated gradient), the element type of the sum, and the unary scalar ops applied to the sum
(``sqrt``: the norm), each rounded to its element type as the IR's ops give them.

A ``SumRule`` is the tuple of entries: what a kernel is compiled for (the kernel cache's problem); the
tensors, their sizes and which entry each is reach the kernel at run time through its argument table.
A ``MultiTensorSumProblem`` is one launch: the rule, the element counts and each tensor's entry.

    MultiTensorSumProblem(SumRule((SumEntry(("f32",), Prologue((("mul", ("in0", "in0")),), ((0, "out"),)),
                                            epilogue=(("sqrt", "f32"),)),)), (4096, 768), (0, 0))

Argument table (64-bit words, written once at bind)::

    word 0           tensors T
    word 1           chunks C (all tensors')
    word 2           chunks a CTA walks, K (CTA b: chunks [b K, (b + 1) K), in the global chunk order)
    word 3           the completion counter's i32 index in the workspace
    word 4 + t R + k row t, field k (``SumRule.fields()``): its entry, its operands' and stored value's
                     pointers, its result's pointer, its element count, its chunks' range
    word 4 + T R + b the row holding CTA b's first chunk (the CTA's forward scan starts there)

The workspace holds one f32 partial sum per (CTA, tensor) pair a CTA's chunks meet, at slot ``b + t``
(CTA ranges and tensors are both contiguous in the chunk order, so no two pairs share a slot), then the
i32 completion counter (zero between launches).
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.dtypes import element
from nova.kernels.optimizer.problem import OptimizerProblemError
from nova.kernels.rows.prologue import UNARY, Prologue

FLOAT_DTYPES = ("f32", "bf16", "f16")
EPILOGUE_OPS = tuple(op for op in UNARY if not op.startswith("cast_"))
HEADER = ("tensors", "chunks", "per_cta", "counter")
TAIL = ("numel", "chunk_begin", "chunk_end")
WORD_BYTES = 8
WORKSPACE_ALIGN = 256


@dataclass(frozen=True)
class SumEntry:
    dtypes: tuple                       # the operands' element types: in0, in1, ...
    prologue: Prologue                  # over in0, ...: reduce ((value, "out"),), store () or ((value, "st0"),)
    stored: str = ""                    # st0's element type ("" when nothing is written)
    total: str = "f32"                  # the sum's element type (rounded to it)
    epilogue: tuple = ()                # ((unary op, element type), ...) applied to the sum in order

    def __post_init__(self):
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "epilogue", tuple((str(op), str(dt)) for op, dt in self.epilogue))
        names = {f"in{k}" for k in range(len(self.dtypes))}
        why = self.prologue.check(names)
        if not self.dtypes or any(dt not in FLOAT_DTYPES for dt in self.dtypes):
            why = why or f"operands {list(self.dtypes)}: each one of {', '.join(FLOAT_DTYPES)}"
        if [n for _, n in self.prologue.reduce] not in (["out"], []):
            why = why or "the prologue reduces at most one value, named out"
        stores = [n for _, n in self.prologue.store]
        if stores not in ([], ["st0"]) or bool(stores) != bool(self.stored):
            why = why or "at most one stored value, st0, with its element type"
        if not self.reduces and (not stores or self.epilogue):
            why = why or "an entry that reduces nothing stores st0 and has no epilogue"
        for dt in (self.total,) + ((self.stored,) if self.stored else ()) + tuple(d for _, d in self.epilogue):
            if dt not in FLOAT_DTYPES:
                why = why or f"element type {dt} is not one of {', '.join(FLOAT_DTYPES)}"
        if any(op not in EPILOGUE_OPS for op, _ in self.epilogue):
            why = why or f"epilogue ops must be unary ({', '.join(EPILOGUE_OPS)})"
        if why:
            raise OptimizerProblemError(f"multi-tensor sum entry: {why}")

    @property
    def reduces(self) -> bool:
        """The entry sums (False: store-only, its tensors only mapped to st0)."""
        return bool(self.prologue.reduce)

    @property
    def out(self) -> str:
        """The result's element type (after the epilogue)."""
        return self.epilogue[-1][1] if self.epilogue else self.total

    @property
    def bytes_per_element(self) -> int:
        return sum(element(dt).bytes for dt in self.dtypes) + (element(self.stored).bytes if self.stored else 0)

    def describe(self) -> str:
        ops = "; ".join(f"%{i}={op}({','.join(args)})" for i, (op, args) in enumerate(self.prologue.ops))
        types = '/'.join(dict.fromkeys(self.dtypes + ((self.stored,) if self.stored else ())))
        if not self.reduces:
            return f"st0<-%{self.prologue.store[0][0]} of [{ops}] ({types})"
        (index, _), = self.prologue.reduce
        stored = f", st0<-%{self.prologue.store[0][0]}" if self.stored else ""
        tail = "".join(f" -> {op}" for op, _ in self.epilogue)
        return f"sum %{index} of [{ops}]{stored}{tail} ({'/'.join(dict.fromkeys(self.dtypes))})"

    def to_dict(self) -> dict:
        d = {"dtypes": list(self.dtypes), "prologue": self.prologue.to_dict(), "total": self.total,
             "epilogue": [list(e) for e in self.epilogue]}
        if self.stored:
            d["stored"] = self.stored
        return d


@dataclass(frozen=True)
class SumRule:
    entries: tuple                      # SumEntry, in the order the table's entry field numbers them

    def __post_init__(self):
        object.__setattr__(self, "entries", tuple(self.entries))
        if not self.entries:
            raise OptimizerProblemError("a multi-tensor sum needs at least one entry")

    op = "sum"                          # the multi-tensor family's kind (the update rules': adamw, sgd)

    @property
    def operands(self) -> int:
        """Operand pointers a table row holds (the most any entry reads)."""
        return max(len(e.dtypes) for e in self.entries)

    @property
    def stores(self) -> bool:
        return any(e.stored for e in self.entries)

    @property
    def reduces(self) -> bool:
        """Some entry sums (False: every entry store-only, no partials, no last CTA)."""
        return any(e.reduces for e in self.entries)

    @property
    def widest(self) -> int:
        """Bytes of the widest element any entry reads or writes (the vector width's unit)."""
        return max(element(dt).bytes for e in self.entries for dt in e.dtypes + ((e.stored,) if e.stored else ()))

    def pointers(self) -> tuple[str, ...]:
        """The per-tensor pointers of a table row, in order: operands, the stored value, the result."""
        return tuple(f"in{k}" for k in range(self.operands)) + (("st0",) if self.stores else ()) + ("out",)

    def fields(self) -> tuple[str, ...]:
        """A table row's words: the entry's index, the pointers, the element count and the chunks' range."""
        return ("entry",) + self.pointers() + TAIL

    def describe(self) -> str:
        return f"multi-tensor {'sum' if self.reduces else 'map'} of {len(self.entries)} " \
               f"entr{'y' if len(self.entries) == 1 else 'ies'}: " + "; ".join(e.describe() for e in self.entries)

    def to_dict(self) -> dict:
        return {"op": "sum", "entries": [e.to_dict() for e in self.entries]}


@dataclass(frozen=True)
class MultiTensorSumProblem:
    rule: SumRule
    sizes: tuple                        # element counts of the tensors, in launch order
    entry_of: tuple                     # each tensor's entry index

    def __post_init__(self):
        object.__setattr__(self, "sizes", tuple(int(n) for n in self.sizes))
        object.__setattr__(self, "entry_of", tuple(int(k) for k in self.entry_of))
        if not self.sizes or any(n < 0 for n in self.sizes) or len(self.entry_of) != len(self.sizes):
            raise OptimizerProblemError(f"element counts must be non-negative, at least one, with an entry each: "
                                        f"{list(self.sizes)}, entries {list(self.entry_of)}")
        if any(not 0 <= k < len(self.rule.entries) for k in self.entry_of):
            raise OptimizerProblemError(f"entry indices {list(self.entry_of)} outside the rule's "
                                        f"{len(self.rule.entries)} entries")

    @property
    def tensors(self) -> int:
        return len(self.sizes)

    @property
    def numel(self) -> int:
        return sum(self.sizes)

    def bytes_moved(self) -> int:
        """Each tensor's operands read once and its stored value written once; its result written."""
        return sum(n * self.rule.entries[k].bytes_per_element
                   + (element(self.rule.entries[k].out).bytes if self.rule.entries[k].reduces else 0)
                   for n, k in zip(self.sizes, self.entry_of))

    def describe(self) -> str:
        tensors = f"{self.tensors} tensor{'s' if self.tensors != 1 else ''}"
        return f"multi-tensor {'sum' if self.rule.reduces else 'map'} over {tensors} ({_count(self.numel)} " \
               f"elements, {len(self.rule.entries)} entr{'y' if len(self.rule.entries) == 1 else 'ies'})"

    def to_dict(self) -> dict:
        return {"rule": self.rule.to_dict(), "tensors": self.tensors, "numel": self.numel, "sizes": list(self.sizes),
                "entry_of": list(self.entry_of)}


def _count(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


# ---------------------------------------------------------------------------- the argument table
def chunk_counts(numels, chunk: int) -> list[int]:
    return [-(-int(n) // chunk) for n in numels]


def per_cta(chunks: int, grid: int) -> int:
    """Chunks a CTA walks: the chunk order cut into ``grid`` equal contiguous ranges."""
    return max(1, -(-chunks // grid))


def slots(tensors: int, grid: int) -> int:
    """Partial-sum slots of the workspace: slot ``b + t`` for every (CTA b, tensor t) pair that meets."""
    return grid + tensors


def workspace_words(tensors: int, grid: int) -> tuple[int, int]:
    """(the counter's i32 index, the workspace's 4-byte words): the slots, then the counter, aligned."""
    counter = -(-4 * slots(tensors, grid) // WORKSPACE_ALIGN) * WORKSPACE_ALIGN // 4
    return counter, counter + WORKSPACE_ALIGN // 4


def field_word(rule: SumRule, tensor, name: str):
    return len(HEADER) + tensor * len(rule.fields()) + rule.fields().index(name)


def first_row_word(rule: SumRule, tensors: int, cta):
    """Word index of CTA ``cta``'s first row (an int, or an index SSA value the emitter passes through)."""
    return len(HEADER) + tensors * len(rule.fields()) + cta


def table_words(rule: SumRule, rows: list[dict], chunk: int, grid: int) -> list[int]:
    """The table of ``rows`` (one per tensor: ``{"entry": k, pointer name: address, "numel": n}``; a pointer
    an entry does not use may be 0), as 64-bit words."""
    counts = chunk_counts([r["numel"] for r in rows], chunk)
    chunks = sum(counts)
    counter, _ = workspace_words(len(rows), grid)
    k = per_cta(chunks, grid)
    words = [len(rows), chunks, k, counter]
    begin, ends = 0, []
    for r, n in zip(rows, counts):
        words += [int(r["entry"])] + [int(r.get(name, 0)) for name in rule.pointers()]
        words += [int(r["numel"]), begin, begin + n]
        begin += n
        ends.append(begin)
    row = 0
    for b in range(grid):                   # the first row whose chunks reach past the CTA's first chunk
        while row < len(rows) - 1 and ends[row] <= b * k:
            row += 1
        words.append(row)
    return words


def table_bytes(rule: SumRule, tensors: int, grid: int) -> int:
    return (len(HEADER) + tensors * len(rule.fields()) + grid) * WORD_BYTES
