"""The MLIR text emitter's index arithmetic (nova/codegen/builder.py): what folds, what is emitted."""
from nova.codegen.builder import Ir


def test_index_arithmetic_folds_constants_identities_and_fixed_results():
    ir = Ir()
    assert (ir.add(2, 3), ir.sub(2, 3), ir.mul(2, 3), ir.div(7, 2), ir.rem(7, 2), ir.xor(6, 3),
            ir.min(2, 3), ir.max(2, 3)) == (5, -1, 6, 3, 1, 5, 2, 3)
    x = "%x"
    assert ir.add(0, x) == ir.add(x, 0) == ir.sub(x, 0) == ir.xor(0, x) == ir.xor(x, 0) == x
    assert ir.mul(1, x) == ir.mul(x, 1) == ir.div(x, 1) == x
    assert ir.mul(0, x) == ir.mul(x, 0) == ir.rem(x, 1) == 0
    assert ir.lines == []                                   # all folded: nothing emitted


def test_index_arithmetic_emits_what_does_not_fold():
    ir = Ir()
    assert ir.sub(0, "%x") == "%idx"                        # 0 - x: not an identity on the left
    assert ir.div(1, "%x", hint="q") == "%q"
    assert ir.rem(1, "%x") == "%idx_1"
    assert ir.min("%x", 4) == "%idx_2"
    assert ir.sub(0, "%x") == "%idx"                        # reused: the same op in scope
    assert ir.text() == ("%idx = arith.subi %c0, %x : index\n"
                         "%q = arith.divui %c1, %x : index\n"
                         "%idx_1 = arith.remui %c1, %x : index\n"
                         "%idx_2 = arith.minsi %x, %c4 : index\n")
