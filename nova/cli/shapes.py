"""GEMM shape parsing shared by ``nova`` and ``nova-config``.

Rule: ``S`` means M=N=K=S; ``SxS`` (two equal sizes) means square operands, M=N=K=S; ``MxNxK`` is
general.  Two unequal sizes are ambiguous and rejected, as is anything else.  Separators: ``x``,
``X`` or ``×``.  A suite file holds one shape per line (``#`` comments) or a JSON list of shapes
(strings like ``"64x64x64"`` or ``[M, N, K]`` lists).
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


def parse_shape_list(text: str) -> list[tuple[int, int, int]]:
    """Comma-separated shapes: ``"64,128x128x256"``."""
    items = [s for s in str(text).split(",") if s.strip()]
    if not items:
        raise ShapeError(f"no GEMM shapes in {text!r}")
    return [parse_gemm_shape(s) for s in items]


def read_suite(path: str | Path) -> list[tuple[int, int, int]]:
    """Shapes from a suite file: JSON list, or one shape per line with ``#`` comments."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ShapeError(f"cannot read suite file {p}: {e.strerror or e}") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ShapeError(f"suite file {p} is not valid JSON: {e}") from None
        shapes = []
        for item in items:
            if isinstance(item, list):
                if len(item) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in item):
                    raise ShapeError(f"suite file {p}: {item!r} is not an [M, N, K] list of integers")
                shapes.append(parse_gemm_shape("x".join(str(d) for d in item)))
            else:
                shapes.append(parse_gemm_shape(str(item)))
    else:
        shapes = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                try:
                    shapes.append(parse_gemm_shape(line))
                except ShapeError as e:
                    raise ShapeError(f"{p}:{n}: {e}") from None
    if not shapes:
        raise ShapeError(f"suite file {p} lists no shapes")
    return shapes
