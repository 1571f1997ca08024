"""What every rows kernel builder shares: ``RowsIr`` (the ``Ir`` scaffold with FP32 scalar math, warp
shuffles and typed global accesses) and ``Prologue`` evaluation.

Global operands are 1-D memrefs over their extent (bare pointers, static shapes), read as vectors of
``vec`` elements where the schedule allows (``vector.load`` with the vector's alignment: one
``ld.global.v4``/``v2``) and converted to FP32 (``arith.extf``); results are rounded to their storage
type (``arith.truncf``, round to nearest even) as they are written.  Transcendentals use the MUFU
instructions directly (``ex2``/``lg2``/``rsqrt``/``tanh``.approx: MLIR's math ops would become libdevice
functions, which the pipeline does not link); division and square root are IEEE (``div.rn``, ``sqrt.rn``).
"""
from __future__ import annotations

from contextlib import contextmanager

from nova.codegen.builder import SMEM, Ir
from nova.kernels import activations
from nova.kernels.rows.problem import FLOAT_DTYPES, Operand, RowsProblem

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
LOWEST = -3.0e38        # the max-reduction's start: finite, so no inf - inf appears in exp(x - max)


class RowsCodegenError(RuntimeError):
    """The builder cannot generate this problem/schedule (a configurator bug, not a user error)."""


def extent(p: RowsProblem, o: Operand) -> int:
    """Elements of the operand's 1-D view: [rows-1]*stride + n for rows, else its element count."""
    return {"row": (p.rows - 1) * o.stride + p.n, "col": p.n, "per_row": p.rows, "scalar": 1}[o.layout]


class RowsIr(Ir):
    """``Ir`` with the rows kernels' spellings: constants by value, FP32 scalar math, typed memory."""
    index_hint = "ix"

    def __init__(self):
        super().__init__()
        self.types: dict[str, tuple[str, str]] = {}      # parameter name -> (memref type, element type)

    @contextmanager
    def rows_kernel(self, name: str, params: list[tuple[str, int, str]], threads: int, max_regs: int = 0):
        """``gpu.func @name`` with one memref parameter per ``(name, extent, element type)``; ``max_regs``:
        the register cap (``nvvm.maxnreg``: ptxas otherwise may pick fewer registers and spill)."""
        args = []
        for pname, n, ty in params:
            self.types[pname] = (f"memref<{n}x{ty}>", ty)
            args.append(f"%{pname}: memref<{n}x{ty}>")
        self.reserve(*(p for p, _, _ in params))
        self.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        attrs = {"maxnreg": max_regs} if max_regs else {}
        with self.kernel(name, args, threads, **attrs):
            yield
            self.emit("gpu.return")

    def spell_const(self, value, ty: str) -> tuple[str, str]:
        if ty in ("index", "i32", "i64"):
            prefix = {"index": "c", "i32": "i", "i64": "l"}[ty]
            return prefix + (str(value) if value >= 0 else f"_neg{-value}"), str(int(value))
        return "f", "%.9e" % float(value)

    # ---------------------------------------------------------------- FP32 scalars
    def f(self, x: float) -> str:
        return self.const(float(x), "f32")

    def fop(self, op: str, a, b, hint="x") -> str:
        return self.pure(hint, f"arith.{op} {a}, {b} : f32")

    def fadd(self, a, b, hint="s"):
        return self.fop("addf", a, b, hint)

    def fsub(self, a, b, hint="d"):
        return self.fop("subf", a, b, hint)

    def fmul(self, a, b, hint="m"):
        return self.fop("mulf", a, b, hint)

    def fdiv(self, a, b, hint="q"):
        return self.fop("divf", a, b, hint)

    def fmax(self, a, b, hint="mx"):
        return self.fop("maximumf", a, b, hint)

    def fmin(self, a, b, hint="mn"):
        return self.fop("minimumf", a, b, hint)

    def fneg(self, a, hint="ng"):
        return self.pure(hint, f"arith.negf {a} : f32")

    def fsel(self, cond, a, b, hint="sel"):
        if cond is True:
            return a
        if cond is False:
            return b
        return self.pure(hint, f"arith.select {cond}, {a}, {b} : f32")

    def fcmp(self, pred: str, a, b, hint="fc"):
        return self.pure(hint, f"arith.cmpf {pred}, {a}, {b} : f32")

    def asm(self, instr: str, x, hint: str) -> str:
        return self.pure(hint, f'llvm.inline_asm "{instr} $0, $1;", "=f,f" {x} : (f32) -> f32')

    def exp(self, x, hint="e"):
        """e^x = 2^(x log2 e) on the MUFU (ex2.approx: 2 ulp)."""
        return self.asm("ex2.approx.ftz.f32", self.fmul(x, self.f(LOG2E), "xl"), hint)

    def log(self, x, hint="lg"):
        return self.fmul(self.asm("lg2.approx.ftz.f32", x, "lg2"), self.f(LN2), hint)

    def rsqrt(self, x, hint="rs"):
        return self.asm("rsqrt.approx.ftz.f32", x, hint)

    def sqrt(self, x, hint="sq"):
        return self.asm("sqrt.rn.f32", x, hint)

    def tanh(self, x, hint="th"):
        """tanh x = 1 - 2 / (e^(2x) + 1): a few ulp of 1 in absolute terms (ex2.approx: 2 ulp), as the
        pointwise kernels' ``math.tanh`` (``tanh.approx.f32`` is off by up to 2^-11 relative; a rows
        prologue's values are stored for the GEMMs too); +-1 at the ends (e^(2x) is inf or 0)."""
        one = self.f(1.0)
        e2 = self.exp(self.fadd(x, x, "x2"), "e2x")
        return self.fsub(one, self.fdiv(self.f(2.0), self.fadd(e2, one, "e2x1"), "q"), hint)

    def shfl_xor(self, x, offset: int) -> str:
        name = self.fresh("shfl")
        self.emit(f"{name}, {self.fresh('shfl_ok')} = gpu.shuffle xor {x}, {self.const(offset, 'i32')}, "
                  f"{self.const(32, 'i32')} : f32")
        return name

    def round_to(self, x, dtype: str) -> str:
        """x rounded to ``dtype`` storage and back (the IR's cast inside an FP32 expression)."""
        if dtype == "f32":
            return x
        t = self.pure("rd", f"arith.truncf {x} : f32 to {dtype}")
        return self.pure("rx", f"arith.extf {t} : {dtype} to f32")

    # ---------------------------------------------------------------- global memory
    def load(self, name: str, offset, vec: int = 1) -> list[str]:
        """``vec`` elements of parameter ``name`` from element ``offset``, as FP32 scalars."""
        mty, ty = self.types[name]
        if vec == 1:
            x = self.let(f"{name}_v", f"memref.load %{name}[{self.v(offset)}] : {mty}")
            return [x if ty == "f32" else self.let(f"{name}_f", f"arith.extf {x} : {ty} to f32")]
        vty = f"vector<{vec}x{ty}>"
        align = vec * FLOAT_DTYPES[ty]
        x = self.let(f"{name}_v", f"vector.load %{name}[{self.v(offset)}] {{alignment = {align}}} : {mty}, {vty}")
        if ty != "f32":
            x = self.let(f"{name}_f", f"arith.extf {x} : {vty} to vector<{vec}xf32>")
        return [self.let(f"{name}_{j}", f"vector.extract {x}[{j}] : f32 from vector<{vec}xf32>") for j in range(vec)]

    def load_raw(self, name: str, offset) -> str:
        """One element of ``name`` as stored (targets: i64/i32)."""
        mty, _ = self.types[name]
        return self.let(f"{name}_v", f"memref.load %{name}[{self.v(offset)}] : {mty}")

    def store(self, name: str, offset, values: list[str]) -> None:
        """FP32 ``values`` rounded to ``name``'s storage type, written from element ``offset``."""
        mty, ty = self.types[name]
        if len(values) == 1:
            x = values[0] if ty == "f32" else self.let("st", f"arith.truncf {values[0]} : f32 to {ty}")
            self.emit(f"memref.store {x}, %{name}[{self.v(offset)}] : {mty}")
            return
        vec = len(values)
        x = self.let("pk", f"vector.from_elements {', '.join(values)} : vector<{vec}xf32>")
        if ty != "f32":
            x = self.let("pk_t", f"arith.truncf {x} : vector<{vec}xf32> to vector<{vec}x{ty}>")
        align = vec * FLOAT_DTYPES[ty]
        self.emit(f"vector.store {x}, %{name}[{self.v(offset)}] {{alignment = {align}}} : {mty}, vector<{vec}x{ty}>")

    def smem_f32(self, byte_offset: int, count: int) -> str:
        """A ``memref<count x f32>`` view of dynamic shared memory at ``byte_offset``."""
        dsm = self.pure("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
        return self.pure("sm", f"memref.view {dsm}[{self.v(byte_offset)}][] : memref<?xi8, {SMEM}> to "
                               f"memref<{count}xf32, {SMEM}>")

    @contextmanager
    def loop(self, count: int, carry: list[str], hint: str = "k"):
        """``scf.for`` over 0..count carrying f32 values: yields (index, carried names, results); the body
        must call ``yield_(values)`` (appended to ``loop_out``) before leaving."""
        it = self.fresh(hint)
        res = self.fresh(f"{hint}_r")
        inner = [self.fresh(f"{hint}_c") for _ in carry]
        iters = ", ".join(f"{a} = {b}" for a, b in zip(inner, carry))
        head = f"{res}:{len(carry)} = " if carry else ""
        tys = ", ".join("f32" for _ in carry)
        self.reserve(it.lstrip("%"), *(a.lstrip("%") for a in inner))
        state = {"out": None}
        with self.region(f"{head}scf.for {it} = {self.v(0)} to {self.v(count)} step {self.v(1)}"
                         + (f" iter_args({iters}) -> ({tys})" if carry else "") + " {"):
            yield it, inner, state
            if carry:
                self.emit(f"scf.yield {', '.join(state['out'])} : {tys}")
        state["results"] = [f"{res}#{i}" for i in range(len(carry))]


def evaluate(ir: RowsIr, prologue, env: dict) -> list[str]:
    """The prologue's values (FP32 SSA names) for one element whose operands are ``env``."""
    vals: list[str] = []

    def arg(a: str):
        if a.startswith("%"):
            return vals[int(a[1:])]
        if a.startswith("#"):
            return ir.f(float(a[1:]))
        return env[a]
    for op, args in prologue.ops:
        xs = [arg(a) for a in args]
        vals.append(_pointwise(ir, op, xs, args))
    return vals


class _Arith:
    """``activations.Arith`` over a rows kernel's FP32 IR."""

    def __init__(self, ir: RowsIr):
        self.ir = ir

    def add(self, a, b):
        return self.ir.fadd(a, b)

    def sub(self, a, b):
        return self.ir.fsub(a, b)

    def mul(self, a, b):
        return self.ir.fmul(a, b)

    def tanh(self, a):
        return self.ir.tanh(a)

    def const(self, value):
        return self.ir.f(value)


def _pointwise(ir: RowsIr, op: str, xs: list[str], args) -> str:
    one = ir.f(1.0)
    if op in ("gelu_tanh_backward", "tanh_backward"):
        return getattr(activations, op)(_Arith(ir), *xs)
    if op in ("add", "sub", "mul", "div"):
        return {"add": ir.fadd, "sub": ir.fsub, "mul": ir.fmul, "div": ir.fdiv}[op](*xs)
    if op in ("maximum", "minimum"):
        return (ir.fmax if op == "maximum" else ir.fmin)(*xs)
    x = xs[0]
    if op == "neg":
        return ir.fneg(x)
    if op == "exp":
        return ir.exp(x)
    if op == "log":
        return ir.log(x)
    if op == "sqrt":
        return ir.sqrt(x)
    if op == "rsqrt":
        return ir.rsqrt(x)
    if op == "reciprocal":
        return ir.fdiv(one, x)
    if op == "abs":
        return ir.asm("abs.f32", x, "ab")
    if op == "tanh":
        return ir.tanh(x)
    if op == "sigmoid":
        return ir.fdiv(one, ir.fadd(one, ir.exp(ir.fneg(x))))
    if op == "relu":
        return ir.fmax(x, ir.f(0.0))
    if op == "silu":
        return ir.fdiv(x, ir.fadd(one, ir.exp(ir.fneg(x))))
    if op.startswith("cast_"):
        return ir.round_to(x, op[5:])
    if op == "pow":
        return _pow(ir, x, float(args[1][1:]))
    raise RowsCodegenError(f"prologue op {op!r} has no spelling")


def _pow(ir: RowsIr, x: str, e: float) -> str:
    """x ** e for a constant e: products for small integers, IEEE sqrt / MUFU rsqrt for +-0.5, else
    exp2(e log2 x) (NaN for negative x, as torch for non-integer exponents)."""
    if e == 0:
        return ir.f(1.0)
    if e == 0.5:
        return ir.sqrt(x)
    if e == -0.5:
        return ir.rsqrt(x)
    if e.is_integer() and abs(e) <= 4:
        y = x
        for _ in range(int(abs(e)) - 1):
            y = ir.fmul(y, x)
        return y if e > 0 else ir.fdiv(ir.f(1.0), y)
    lg = ir.asm("lg2.approx.ftz.f32", x, "lg2")
    return ir.asm("ex2.approx.ftz.f32", ir.fmul(lg, ir.f(e)), "pw")
