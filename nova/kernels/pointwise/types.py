"""The element types a fused pointwise kernel computes on, in the IR's spelling: their sizes, their
torch names, and the promotion of mixed operands (torch's category order).  The family's own table
(the kernels sit below the IR in the layering); tests/test_pointwise.py checks that it agrees with
``nova.ir.types``."""
from __future__ import annotations

ELEMENT_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "bool": 1}
TORCH_NAMES = {"f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16", "i64": "int64",
               "i32": "int32", "bool": "bool"}
FROM_TORCH_NAMES = {torch_name: name for name, torch_name in TORCH_NAMES.items()}
FLOAT_TYPES = ("f64", "f32", "bf16", "f16")
PROMOTION_ORDER = ("bool", "i32", "i64", "f16", "bf16", "f32", "f64")


def promote(*dtypes: str) -> str:
    """The result type of a pointwise op on mixed element types (f16 with bf16 is f32)."""
    if {"f16", "bf16"} <= set(dtypes):
        return "f32"
    return max(dtypes, key=PROMOTION_ORDER.index)
