"""A small MLIR text emitter shared by the kernel families' builders (``Ir``).

It names SSA values after what they hold and folds compile-time index arithmetic, so the MLIR that
``nova compile --emit mlir`` prints is readable.  Family-independent: it knows MLIR, not GEMM.
"""
from __future__ import annotations

import builtins
import operator
from contextlib import contextmanager

SMEM = "#smem"  # alias for #gpu.address_space<workgroup>, declared at the top of the module


def index_op(mlir_op: str, fold, *, identity: int | None = None, fixes: tuple[int, int] | None = None,
             commutative: bool = False, doc: str = ""):
    """An index arithmetic method of ``Ir``: ``ir.op(a, b, hint=None)``, each operand an int (a
    compile-time constant) or an SSA name.  Two ints fold to ``fold(a, b)``.  An int right operand
    equal to ``identity`` gives the other operand, one equal to ``fixes[0]`` gives ``fixes[1]``, and
    so does an int left operand where the op is ``commutative``: ``x * 1 = x``, ``0 * x = 0``,
    ``x % 1 = 0``.  Anything else emits ``%hint = <mlir_op> a, b : index`` (or reuses an identical
    one in scope)."""
    def method(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return fold(a, b)
        for known, other in ((b, a), (a, b)) if commutative else ((b, a),):
            if isinstance(known, int):
                if fixes is not None and known == fixes[0]:
                    return fixes[1]
                if identity is not None and known == identity:
                    return other
        return self.pure(hint or self.index_hint, f"{mlir_op} {self.v(a)}, {self.v(b)} : index")
    method.__doc__ = f"``{mlir_op}``" + (f": {doc}" if doc else "") + " (folded where ``index_op`` says)"
    return method


# ----------------------------------------------------------------------------------------------
# A tiny MLIR text emitter
# ----------------------------------------------------------------------------------------------

def finite_float_literal(value: float) -> str:
    """A finite float as MLIR spells it: Python's shortest round-trip ``repr`` with a ``.`` in the
    mantissa, which MLIR's float grammar requires (``1e-06`` does not parse, ``1.0e-06`` does)."""
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0{e}{exponent}" if e and "." not in mantissa else text

class Ir:
    """Appends MLIR ops as text.

    Index values are either Python ints (compile-time constants, folded) or SSA names ("%row").
    Constants are hoisted into one block at the top of the function.
    """

    index_hint = "idx"   # the SSA name of index arithmetic when the caller gives none

    def __init__(self, reserved: tuple[str, ...] = ()):
        self.lines: list[str] = []
        self.level = 0
        # names spelled directly in the text (function arguments, loop variables) are reserved
        self._taken: dict[str, int] = {n: 1 for n in reserved}     # hint -> the next suffix to try
        self._names: set[str] = set(reserved)                          # every name spelled so far
        self._consts: dict[tuple, str] = {}
        self._const_lines: list[str] = []
        self._const_anchor = None
        self._memo: list[dict] = [{}]   # pure ops already emitted, one scope per open region

    # -- text
    def emit(self, text: str) -> None:
        self.lines.append("  " * self.level + text)

    def comment(self, text: str) -> None:
        self.emit("// " + text)

    def blank(self) -> None:
        self.lines.append("")

    def reserve(self, *names: str) -> None:
        """Names the caller spells directly in the text (arguments, loop variables): ``fresh`` skips them."""
        for n in names:
            self._taken.setdefault(n, 1)
            self._names.add(n)

    def fresh(self, hint: str) -> str:
        """``%hint``, else ``%hint_1``, ``%hint_2``, ...: the first not spelled yet (a suffixed name can
        be another hint's, or a reserved one: ``dy`` twice and a parameter ``dy_1``)."""
        n = self._taken.get(hint, 0)
        while (name := hint if n == 0 else f"{hint}_{n}") in self._names:
            n += 1
        self._taken[hint] = n + 1
        self._names.add(name)
        return f"%{name}"

    def let(self, hint: str, rhs: str) -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {rhs}")
        return name

    def pure(self, hint: str, rhs: str) -> str:
        """Like ``let`` for side-effect-free ops: reuse an identical value visible in this scope."""
        for scope in reversed(self._memo):
            if rhs in scope:
                return scope[rhs]
        name = self.let(hint, rhs)
        self._memo[-1][rhs] = name
        return name

    @contextmanager
    def scope(self):
        """One level deeper, with its own scope of reusable pure values (the body of a region whose
        header and close the caller emits)."""
        self.level += 1
        self._memo.append({})
        yield
        self._memo.pop()
        self.level -= 1

    @contextmanager
    def region(self, header: str, close: str = "}"):
        self.emit(header)
        with self.scope():
            yield
        self.emit(close)

    def guarded(self, ok, body):
        """``body()`` where the i1 ``ok`` holds: inline when ``ok`` is known True, nothing when it is
        known False, else inside ``scf.if``."""
        if ok is True:
            body()
        elif ok is not False:
            with self.region(f"scf.if {ok} {{"):
                body()

    def if_else(self, cond, then, otherwise):
        """``then()`` where the i1 ``cond`` holds and ``otherwise()`` where it does not: one ``scf.if``
        with an else region and no results (a warp-specialized kernel's producer / consumer split)."""
        self.emit(f"scf.if {cond} {{")
        with self.scope():
            then()
        with self.region("} else {", close="}"):
            otherwise()

    def else_(self):
        """Switch from the then-region of an ``scf.if`` to its else-region (inside ``region``)."""
        self._memo[-1] = {}
        self.level -= 1
        self.emit("} else {")
        self.level += 1

    @contextmanager
    def kernel(self, name: str, args: list[str], threads: int, **nvvm_attrs):
        """``gpu.func @name(args)`` inside Nova's module scaffold (``gpu.module @nova_kernels``), with
        ``known_block_size`` and ``nvvm.<attr> = <value> : i32`` attributes (a tuple value:
        ``array<i32: ...>``, e.g. ``cluster_dim``); constants created in its body are printed at its top."""
        extra = "".join(f", nvvm.{k} = array<i32: {', '.join(map(str, v))}>" if isinstance(v, tuple)
                        else f", nvvm.{k} = {v} : i32" for k, v in nvvm_attrs.items())
        with self.region("module attributes {gpu.container_module} {"):
            with self.region("gpu.module @nova_kernels {"):
                with self.region(f"gpu.func @{name}({', '.join(args)}) kernel attributes "
                                 f"{{known_block_size = array<i32: {threads}, 1, 1>{extra}}} {{"):
                    self.anchor_constants()
                    yield

    def anchor_constants(self) -> None:
        """Constants created from now on are printed at this point (top of the function body)."""
        self._const_anchor = (len(self.lines), self.level)

    def text(self) -> str:
        lines = list(self.lines)
        if self._const_anchor is not None:
            pos, level = self._const_anchor
            lines[pos:pos] = ["  " * level + s for s in self._const_lines]
        return "\n".join(lines) + "\n"

    # -- constants
    def const(self, value, ty: str = "index") -> str:
        key = (ty, repr(value))
        if key not in self._consts:
            hint, lit = self.spell_const(value, ty)
            name = self.fresh(hint)
            self._consts[key] = name
            self._const_lines.append(f"{name} = arith.constant {lit} : {ty}")
        return self._consts[key]

    def spell_const(self, value, ty: str) -> tuple[str, str]:
        """The SSA name hint and the literal of a constant (a builder may spell them its own way)."""
        if ty == "index":
            return (f"c{value}" if value >= 0 else f"c_neg{-value}"), str(value)
        if ty == "i1":                  # ``arith.constant true : i1`` does not parse; ``1 : i1`` does
            return ("true" if value else "false"), ("1" if value else "0")
        if ty.startswith("vector"):
            return ("zero_acc" if value == 0.0 else "cst_vec"), f"dense<{finite_float_literal(value)}>"
        return f"cst_{ty}", finite_float_literal(value)

    def v(self, x) -> str:
        """Materialize an index value (int -> constant)."""
        return self.const(x) if isinstance(x, int) else x

    # -- index arithmetic with folding: ``ir.add(a, b, hint=None)`` etc. on ints (compile-time constants)
    # or SSA names; per op its MLIR op, the fold of two ints, its identity and the operand value that
    # fixes the result (``index_op``)
    add = index_op("arith.addi", operator.add, identity=0, commutative=True)
    sub = index_op("arith.subi", operator.sub, identity=0)
    mul = index_op("arith.muli", operator.mul, identity=1, fixes=(0, 0), commutative=True)
    div = index_op("arith.divui", operator.floordiv, identity=1, doc="unsigned division of non-negative index values")
    rem = index_op("arith.remui", operator.mod, fixes=(1, 0), doc="unsigned remainder of non-negative index values")
    xor = index_op("arith.xori", operator.xor, identity=0, commutative=True,
                   doc="bitwise exclusive or of non-negative index values")
    min = index_op("arith.minsi", builtins.min)
    max = index_op("arith.maxsi", builtins.max)

    def cmp(self, pred: str, a, b, hint="ok"):
        """Signed index comparison -> i1 (or a Python bool when both sides are known)."""
        if isinstance(a, int) and isinstance(b, int):
            return {"slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b,
                    "eq": a == b, "ne": a != b}[pred]
        return self.pure(hint, f"arith.cmpi {pred}, {self.v(a)}, {self.v(b)} : index")

    def and_(self, a, b, hint="ok"):
        return self._logic("andi", True, a, b, hint)

    def or_(self, a, b, hint="ok"):
        return self._logic("ori", False, a, b, hint)

    def _logic(self, op, unit, a, b, hint):
        """i1 ``arith.andi``/``arith.ori`` folding known operands: ``unit`` is the identity, its negation absorbs."""
        if a is unit:
            return b
        if b is unit:
            return a
        if a is (not unit) or b is (not unit):
            return not unit
        return self.pure(hint, f"arith.{op} {a}, {b} : i1")

    def select(self, cond, a, b, ty="index", hint="sel"):
        if cond is True:
            return a
        if cond is False:
            return b
        va = self.v(a) if ty == "index" else a
        vb = self.v(b) if ty == "index" else b
        return self.pure(hint, f"arith.select {cond}, {va}, {vb} : {ty}")

    # -- tensor-core instructions
    MMA_NAMES = {"tf32": "acc", "f16": "acc", "a_bits": "a_i", "a_pair": "a_p", "b_bits": "b_i", "b_pair": "b_p",
                 "c_elt": "c_e", "d": "d", "d_elt": "d_e", "bf16": "acc"}

    def mma_sync(self, a: str, b: str, acc: str, a_type: str, k: int, names: dict | None = None) -> str:
        """One ``mma.sync.m16n8k{k}`` with FP32 accumulation (``vector<2x2xf32>``) for ``a_type``
        tf32, f16 or bf16; ``names`` overrides the SSA name hints of ``MMA_NAMES``."""
        nm = self.MMA_NAMES | (names or {})
        if a_type == "tf32":
            return self.let(nm["tf32"], f"nvgpu.mma.sync({a}, {b}, {acc}) {{mmaShape = [16, 8, {k}], tf32Enabled}} : "
                                        "(vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>")
        if a_type == "f16":
            return self.let(nm["f16"], f"nvgpu.mma.sync({a}, {b}, {acc}) {{mmaShape = [16, 8, {k}]}} : "
                                       "(vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>")
        # bf16: nvgpu.mma.sync cannot lower bf16 operands in MLIR 22 ("failed to deduce operand
        # PTX types"), so this one instruction is written in the NVVM dialect on packed i32 halves.
        ar = [self.let(nm["a_bits"], f"llvm.bitcast {self.let(nm['a_pair'], f'vector.extract {a}[{r}] : vector<2xbf16> from vector<4x2xbf16>')} "
                                     ": vector<2xbf16> to i32") for r in range(4)]
        br = [self.let(nm["b_bits"], f"llvm.bitcast {self.let(nm['b_pair'], f'vector.extract {b}[{r}] : vector<2xbf16> from vector<2x2xbf16>')} "
                                     ": vector<2xbf16> to i32") for r in range(2)]
        cs = [self.let(nm["c_elt"], f"vector.extract {acc}[{r}, {c}] : f32 from vector<2x2xf32>") for r in (0, 1) for c in (0, 1)]
        st = "!llvm.struct<(f32, f32, f32, f32)>"
        d = self.let(nm["d"], f"nvvm.mma.sync A[{', '.join(ar)}] B[{', '.join(br)}] C[{', '.join(cs)}] "
                              "{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
                              "multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, "
                              f"shape = #nvvm.shape<m = 16, n = 8, k = {k}>}} : (i32, i32, f32) -> {st}")
        ds = [self.let(nm["d_elt"], f"llvm.extractvalue {d}[{e}] : {st}") for e in range(4)]
        return self.let(nm["bf16"], f"vector.from_elements {', '.join(ds)} : vector<2x2xf32>")
