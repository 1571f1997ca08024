"""The code-generation fingerprint tool (``python3 -m nova.codegen.fingerprint``): deterministic records."""
from __future__ import annotations

import pytest

from nova.codegen import fingerprint as fp

CASES = [fp.Case(1000, 1000, 1000, "tf32", "h200"),                  # wgmma, swapped, ragged
         fp.Case(3000, 5000, 700, "bf16", "h200"),                    # wgmma with an operand-prep kernel
         fp.Case(8192, 512, 512, "fp16", "rtx3060")]                  # mma.sync


def test_suite_cases_cover_both_families():
    shapes = fp.read_shapes("bench/suites/perf.txt")
    assert (3000, 5000, 700) in shapes and len(shapes) == 17
    names = [c.name for c in fp.cases(shapes[:1])]
    assert len(names) == len(set(names)) == len(fp.DTYPES) * len(fp.TARGETS)
    assert "1024x1024x1024 bf16 h200 mma.sync" in names


def test_mlir_fingerprint_is_deterministic():
    first, second = fp.fingerprint(CASES, ptx=False), fp.fingerprint(CASES, ptx=False)
    assert first == second
    assert [r["family"] for r in first.values()] == ["wgmma", "wgmma", "mma.sync"]
    assert fp.compare({"cases": first}, {"cases": second}) == []


def test_ptx_fingerprint_is_deterministic():
    from nova.runtime.cache import mlir_available
    if not mlir_available():
        pytest.skip("MLIR is not installed")
    case = CASES[1]
    first, second = fp.fingerprint_case(case), fp.fingerprint_case(case)
    assert first == second
    assert first["prep"] and first["runtime"]["operands"]["a"]["prep"]      # K = 700 bf16: A is padded
    changed = dict(second, ptx_sha256="0" * 64)
    assert fp.compare({"cases": {case.name: first}}, {"cases": {case.name: changed}}) == [f"{case.name}: ptx_sha256"]
