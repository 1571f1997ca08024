"""GEMM shape parsing shared by ``nova`` and ``nova-config``.

Rule: ``S`` means M=N=K=S; ``SxS`` (two equal sizes) means square operands, M=N=K=S; ``MxNxK`` is
general.  Two unequal sizes are ambiguous and rejected, as is anything else.  Separators: ``x``,
``X`` or ``×``.  A suite file holds one shape per line (``#`` comments) or a JSON list of shapes
(strings like ``"64x64x64"``, ``[M, N, K]`` lists, or objects ``{"M": .., "N": .., "K": ..}``).

A batched GEMM (``explain matmul``, ``compile gemm``, ``precompile gemm``: ``parse_problem_shape``)
is ``BxMxNxK``: B GEMMs of MxNxK, their operands packed unless ``--batch-strides`` (or a JSON
entry's ``batch_strides``) says otherwise.

An object may also fix the problem's layout and epilogue (``LAYOUT_FIELDS``: ``trans_a``,
``trans_b``, ``bias``, ``activation``, ``out_dtype``) and its batch (``B``, ``batch_strides``
``[A, B, C]``: elements, "packed" or null; "batch" in a training suite is the model's batch of
sequences, not the GEMM's); its other keys (a benchmark's ``model``, ``role``, ``count``, ...) are
ignored.  ``read_suite_entries`` returns those fields and only
``nova precompile gemm`` reads them (each problem's own layout, the command's flags filling in the
rest); ``read_suite``, which returns bare shapes for the commands that take one layout for all,
rejects a suite that sets them rather than drop them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path


class ShapeError(ValueError):
    """A GEMM shape that does not follow the ``S | SxS | MxNxK`` rule."""


_SEP = re.compile(r"\s*[xX×]\s*")


def parse_gemm_shape(text: str) -> tuple[int, int, int]:
    """``"4096"`` -> (4096, 4096, 4096); ``"512x512"`` -> (512, 512, 512); ``"128x256x64"`` -> (128, 256, 64)."""
    raw = str(text).strip()
    parts = _SEP.split(raw) if raw else []
    if not parts or not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ShapeError(f"bad GEMM shape {text!r}: expected S, SxS or MxNxK with positive integers "
                         f"(e.g. 4096 or 1024x4096x512)")
    dims = [int(p) for p in parts]
    if any(d < 1 for d in dims):
        raise ShapeError(f"bad GEMM shape {text!r}: sizes must be positive")
    if len(dims) == 1:
        return dims[0], dims[0], dims[0]
    if len(dims) == 2:
        if dims[0] != dims[1]:
            raise ShapeError(f"ambiguous GEMM shape {text!r}: two sizes must be equal (SxS means M=N=K=S); "
                             f"write MxNxK")
        return dims[0], dims[0], dims[0]
    return dims[0], dims[1], dims[2]


def parse_problem_shape(text: str) -> tuple[tuple[int, int, int], dict]:
    """``parse_gemm_shape``'s shapes with ``{}``, or ``"BxMxNxK"`` -> ``((M, N, K), {"B": B})``: a batch
    of B GEMMs (``B`` the suite field ``LAYOUT_FIELDS`` reads)."""
    parts = _SEP.split(str(text).strip())
    if len(parts) < 4:
        return parse_gemm_shape(text), {}
    if len(parts) > 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ShapeError(f"bad GEMM shape {text!r}: expected S, SxS, MxNxK or BxMxNxK (a batch of B GEMMs) with "
                         f"positive integers (e.g. 4096 or 8x512x512x64)")
    b, m, n, k = (int(p) for p in parts)
    return (m, n, k), {"B": b}


def parse_problem_shape_list(text: str) -> list[tuple[tuple[int, int, int], dict]]:
    """Comma-separated ``parse_problem_shape`` shapes: ``"4096,8x512x512x64"``."""
    items = [s for s in str(text).split(",") if s.strip()]
    if not items:
        raise ShapeError(f"no GEMM shapes in {text!r}")
    return [parse_problem_shape(s) for s in items]


STRIDES_HELP = ("batched shapes only: the batch strides of A, B and C in elements, each an integer or 'packed' "
                "(default packed,packed,packed); 0 broadcasts A or B, e.g. 0,packed,packed")


def parse_batch_strides(value) -> tuple:
    """``"0,packed,packed"`` (``--batch-strides``) or a JSON list ``[0, "packed", null]`` ->
    ``(0, None, None)``: the batch strides of A, B and C in elements, None = packed."""
    items = [x.strip() for x in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or len(items) != 3:
        raise ShapeError(f"bad batch strides {value!r}: expected three, for A, B and C (e.g. 0,packed,packed)")
    out = []
    for x in items:
        if x is None or x == "packed":
            out.append(None)
        elif isinstance(x, int) and not isinstance(x, bool) and x >= 0:
            out.append(x)
        elif isinstance(x, str) and x.isdigit():
            out.append(int(x))
        else:
            raise ShapeError(f"bad batch stride {x!r} in {value!r}: a non-negative integer (elements) or 'packed'")
    return tuple(out)


ACTIVATION_GRAD_HELP = ("with --activation gelu and --residual: C = (A @ B + bias) * gelu'(R), R the saved "
                        "pre-activation (the activation's backward in the epilogue of an MLP's dgrad GEMM)")
ROUND_THROUGH_HELP = ("16-bit inputs: write an f32 C rounded to the inputs' type first (a cast epilogue: the bits "
                      "of the 16-bit result widened; the output dtype defaults to f32)")


def round_through_fields(dtype: str, round_through: bool, out_dtype: str | None) -> dict:
    """``GemmProblem``'s ``out_dtype`` and ``round_through`` for a command's ``--round-through`` flag
    (or a suite entry's ``round_through``): the inputs' 16-bit storage, and an f32 output unless stated
    (``GemmProblem`` refuses the rest in one line)."""
    if not round_through:
        return {"out_dtype": out_dtype}
    from nova.dtypes import MODES
    storage = MODES[dtype].storage if dtype in MODES else dtype
    return {"out_dtype": out_dtype or "f32", "round_through": storage}


def parse_shape_list(text: str) -> list[tuple[int, int, int]]:
    """Comma-separated shapes: ``"64,128x128x256"``."""
    items = [s for s in str(text).split(",") if s.strip()]
    if not items:
        raise ShapeError(f"no GEMM shapes in {text!r}")
    return [parse_gemm_shape(s) for s in items]


# The per-entry problem fields a JSON suite object may set: (JSON types, what they are, the default).
LAYOUT_FIELDS = {"trans_a": (bool, "true or false", False), "trans_b": (bool, "true or false", False),
                 "bias": (bool, "true or false", False), "activation": (str, "a string", "none"),
                 "residual": (bool, "true or false", False), "preactivation": (bool, "true or false", False),
                 "round_through": (bool, "true or false", False), "activation_grad": (bool, "true or false", False),
                 "out_dtype": ((str, type(None)), "a string or null", None),
                 "B": (int, "a positive integer (the GEMM's batch)", 1),
                 "batch_strides": ((list, type(None)), 'a list [A, B, C] of strides (elements, "packed" or null)', None)}


def _json_entry(item, p: Path) -> tuple[tuple[int, int, int], dict]:
    """(shape, layout fields) of one JSON suite item."""
    if isinstance(item, list):
        if len(item) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in item):
            raise ShapeError(f"suite file {p}: {item!r} is not an [M, N, K] list of integers")
        return parse_gemm_shape("x".join(str(d) for d in item)), {}
    if isinstance(item, dict):
        dims = [item.get(k) for k in ("M", "N", "K")]
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise ShapeError(f"suite file {p}: {item!r} needs integer M, N and K")
        fields = {k: item[k] for k in LAYOUT_FIELDS if k in item}
        for k, v in fields.items():
            types, what, _ = LAYOUT_FIELDS[k]
            if not isinstance(v, types) or isinstance(v, bool) and types is int or k == "B" and v < 1:
                raise ShapeError(f"suite file {p}: {k}={json.dumps(v)} in {item!r} must be {what}")
        if fields.get("batch_strides") is not None:
            try:
                parse_batch_strides(fields["batch_strides"])
            except ShapeError as e:
                raise ShapeError(f"suite file {p}: {e} in {item!r}") from None
        return parse_gemm_shape("x".join(str(d) for d in dims)), fields
    return parse_gemm_shape(str(item)), {}


def is_json_suite(path: Path, text: str) -> bool:
    """A JSON suite: a ``.json`` file, or text that opens a JSON list or object."""
    return path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{"))


def load_json(path: Path, text: str, error: type[Exception]):
    """``text`` (the file ``path``'s) as JSON; a parse error is ``error`` in one line naming the file,
    the line and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"suite file {path}:{e.lineno}:{e.colno}: JSON parse error: {e.msg}") from None


def read_suite_entries(path: str | Path) -> list[tuple[tuple[int, int, int], dict]]:
    """``(shape, layout fields)`` of every entry of a suite file (fields from JSON objects, and a
    text line's ``BxMxNxK`` batch)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")          # a byte-order mark is no shape
    except OSError as e:
        raise ShapeError(f"cannot read suite file {p}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ShapeError(f"suite file {p} is not UTF-8 text (byte {e.start})") from None
    if is_json_suite(p, text) and text.strip():
        items = load_json(p, text, ShapeError)
        if not isinstance(items, list):
            what = {dict: "an object", str: "a string", bool: "a boolean", int: "a number", float: "a number",
                    type(None): "null"}[type(items)]
            raise ShapeError(f"suite file {p}: a JSON suite is a list of shapes, not {what}")
        entries = [_json_entry(item, p) for item in items]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                try:
                    entries.append(parse_problem_shape(line))
                except ShapeError as e:
                    raise ShapeError(f"{p}:{n}: {e}") from None
    if not entries:
        raise ShapeError(f"suite file {p} lists no shapes")
    return entries


def read_suite(path: str | Path) -> list[tuple[int, int, int]]:
    """Shapes from a suite file: JSON list, or one shape per line with ``#`` comments.  A suite whose
    entries set layouts or epilogues other than the defaults is refused: only ``nova precompile
    gemm`` reads those."""
    entries = read_suite_entries(path)
    for shape, fields in entries:
        fields = {k: v for k, v in fields.items() if v != LAYOUT_FIELDS[k][2]}
        if fields:
            batch = f"{fields['B']}x" if "B" in fields else ""
            raise ShapeError(f"suite file {path}: the entry {batch}{'x'.join(map(str, shape))} sets "
                             f"{', '.join(sorted(fields))}, which only 'nova precompile gemm' reads; "
                             f"this command takes --shapes or a suite of bare shapes")
    return [shape for shape, _ in entries]
