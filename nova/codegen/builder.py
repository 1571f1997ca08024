"""A small MLIR text emitter shared by the kernel families' builders (``Ir``).

It names SSA values after what they hold and folds compile-time index arithmetic, so the MLIR that
``nova compile --emit mlir`` prints is readable.  Family-independent: it knows MLIR, not GEMM.
"""
from __future__ import annotations

from contextlib import contextmanager

SMEM = "#smem"  # alias for #gpu.address_space<workgroup>, declared at the top of the module


# ----------------------------------------------------------------------------------------------
# A tiny MLIR text emitter
# ----------------------------------------------------------------------------------------------
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
        self._taken: dict[str, int] = {n: 1 for n in reserved}
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

    def fresh(self, hint: str) -> str:
        n = self._taken.get(hint, 0)
        self._taken[hint] = n + 1
        return f"%{hint}" if n == 0 else f"%{hint}_{n}"

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
        if ty == "i1":
            return ("true" if value else "false"), ("true" if value else "false")
        if ty.startswith("vector"):
            return ("zero_acc" if value == 0.0 else "cst_vec"), f"dense<{float(value)!r}>"
        return f"cst_{ty}", repr(float(value))

    def v(self, x) -> str:
        """Materialize an index value (int -> constant)."""
        return self.const(x) if isinstance(x, int) else x

    # -- index arithmetic with folding
    def add(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self.pure(hint or self.index_hint, f"arith.addi {self.v(a)}, {self.v(b)} : index")

    def sub(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if isinstance(b, int) and b == 0:
            return a
        return self.pure(hint or self.index_hint, f"arith.subi {self.v(a)}, {self.v(b)} : index")

    def mul(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        for x, y in ((a, b), (b, a)):
            if isinstance(x, int):
                if x == 0:
                    return 0
                if x == 1:
                    return y
        return self.pure(hint or self.index_hint, f"arith.muli {self.v(a)}, {self.v(b)} : index")

    def div(self, a, b, hint=None):
        """Unsigned division of non-negative index values."""
        if isinstance(a, int) and isinstance(b, int):
            return a // b
        if isinstance(b, int) and b == 1:
            return a
        return self.pure(hint or self.index_hint, f"arith.divui {self.v(a)}, {self.v(b)} : index")

    def rem(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return a % b
        if isinstance(b, int) and b == 1:
            return 0
        return self.pure(hint or self.index_hint, f"arith.remui {self.v(a)}, {self.v(b)} : index")

    def xor(self, a, b, hint=None):
        """Bitwise exclusive or of non-negative index values."""
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self.pure(hint or self.index_hint, f"arith.xori {self.v(a)}, {self.v(b)} : index")

    def min(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.pure(hint or self.index_hint, f"arith.minsi {self.v(a)}, {self.v(b)} : index")

    def max(self, a, b, hint=None):
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return self.pure(hint or self.index_hint, f"arith.maxsi {self.v(a)}, {self.v(b)} : index")

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
