"""A small MLIR text writer for the attention kernels (Nova's kernels are emitted as text and parsed
by the MLIR Python bindings in ``nova.codegen.lower.to_ptx``).

Index values are Python ints (compile-time constants, folded here) or SSA names.  Every SSA name
is unique in the function; side-effect-free ops are reused within the scope that defined them;
constants are printed once at the top of the kernel.
"""
from __future__ import annotations

from contextlib import contextmanager

SMEM = "#smem"


class Text:
    def __init__(self):
        self.lines: list[str] = []
        self.level = 0
        self._count: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}
        self._const_lines: list[str] = []
        self._anchor = None
        self._memo: list[dict] = [{}]

    # ---- text and names
    def emit(self, s: str) -> None:
        self.lines.append("  " * self.level + s)

    def comment(self, s: str) -> None:
        self.emit("// " + s)

    def fresh(self, hint: str) -> str:
        n = self._count.get(hint, 0)
        self._count[hint] = n + 1
        return f"%{hint}" if n == 0 else f"%{hint}_{n}"

    def let(self, hint: str, rhs: str) -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {rhs}")
        return name

    def pure(self, hint: str, rhs: str) -> str:
        for scope in reversed(self._memo):
            if rhs in scope:
                return scope[rhs]
        name = self.let(hint, rhs)
        self._memo[-1][rhs] = name
        return name

    @contextmanager
    def region(self, header: str, close: str = "}"):
        self.emit(header)
        self.level += 1
        self._memo.append({})
        yield
        self._memo.pop()
        self.level -= 1
        self.emit(close)

    def else_(self):
        """Switch from the then-region of an ``scf.if`` to its else-region (inside ``region``)."""
        self._memo[-1] = {}
        self.level -= 1
        self.emit("} else {")
        self.level += 1

    @contextmanager
    def kernel(self, name: str, args: list[str], threads: int, **nvvm):
        extra = "".join(f", nvvm.{k} = {v} : i32" for k, v in nvvm.items())
        for a in args:                      # argument names are taken
            self._count.setdefault(a.split(":")[0].strip().lstrip("%"), 1)
        self.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        with self.region("module attributes {gpu.container_module} {"):
            with self.region("gpu.module @nova_kernels {"):
                with self.region(f"gpu.func @{name}({', '.join(args)}) kernel attributes "
                                 f"{{known_block_size = array<i32: {threads}, 1, 1>{extra}}} {{"):
                    self._anchor = (len(self.lines), self.level)
                    yield
                    self.emit("gpu.return")

    def text(self) -> str:
        lines = list(self.lines)
        if self._anchor is not None:
            pos, level = self._anchor
            lines[pos:pos] = ["  " * level + s for s in self._const_lines]
        return "\n".join(lines) + "\n"

    # ---- constants
    def const(self, value, ty: str = "index") -> str:
        key = (ty, repr(value))
        if key not in self._consts:
            if ty in ("index", "i32"):
                name = self.fresh(("c" if ty == "index" else "i") + (str(value) if value >= 0 else f"_neg{-value}"))
                lit = str(int(value))
            elif ty.startswith("vector"):
                name = self.fresh("zeros" if value == 0 else "cvec")
                lit = "dense<%.17e>" % float(value)
            else:
                name = self.fresh(f"f_{ty}")
                lit = "%.17e" % float(value)
            self._consts[key] = name
            self._const_lines.append(f"{name} = arith.constant {lit} : {ty}")
        return self._consts[key]

    def f(self, x: float) -> str:
        return self.const(float(x), "f32")

    def v(self, x) -> str:
        return self.const(x) if isinstance(x, int) else x

    # ---- index arithmetic (folded when constant)
    def add(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if a == 0:
            return b
        if b == 0:
            return a
        return self.pure(hint, f"arith.addi {self.v(a)}, {self.v(b)} : index")

    def sub(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        return self.pure(hint, f"arith.subi {self.v(a)}, {self.v(b)} : index")

    def mul(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if a == 0 or b == 0:
            return 0
        if a == 1:
            return b
        if b == 1:
            return a
        return self.pure(hint, f"arith.muli {self.v(a)}, {self.v(b)} : index")

    def div(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return a // b
        if b == 1:
            return a
        return self.pure(hint, f"arith.divui {self.v(a)}, {self.v(b)} : index")

    def rem(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return a % b
        if b == 1:
            return 0
        return self.pure(hint, f"arith.remui {self.v(a)}, {self.v(b)} : index")

    def min(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.pure(hint, f"arith.minsi {self.v(a)}, {self.v(b)} : index")

    def max(self, a, b, hint="ix"):
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return self.pure(hint, f"arith.maxsi {self.v(a)}, {self.v(b)} : index")

    def cmp(self, pred, a, b, hint="ok"):
        if isinstance(a, int) and isinstance(b, int):
            return {"slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b, "eq": a == b, "ne": a != b}[pred]
        return self.pure(hint, f"arith.cmpi {pred}, {self.v(a)}, {self.v(b)} : index")

    def and_(self, a, b, hint="ok"):
        if a is True:
            return b
        if b is True:
            return a
        if a is False or b is False:
            return False
        return self.pure(hint, f"arith.andi {a}, {b} : i1")

    def or_(self, a, b, hint="ok"):
        if a is False:
            return b
        if b is False:
            return a
        if a is True or b is True:
            return True
        return self.pure(hint, f"arith.ori {a}, {b} : i1")

    def select(self, cond, a, b, ty="index", hint="sel"):
        if cond is True:
            return a
        if cond is False:
            return b
        if ty == "index":
            a, b = self.v(a), self.v(b)
        return self.pure(hint, f"arith.select {cond}, {a}, {b} : {ty}")

    # ---- f32 scalars
    def fop(self, op, a, b, hint="x"):
        return self.let(hint, f"arith.{op} {a}, {b} : f32")

    def fma(self, a, b, c, hint="x"):
        """One fused multiply-add (the LLVM intrinsic: math.fma would become a libdevice call, and
        separate mulf/addf become mul.rn/add.rn, which ptxas may not contract)."""
        return self.let(hint, f"llvm.intr.fma({a}, {b}, {c}) : (f32, f32, f32) -> f32")

    def asm1(self, instr: str, x: str, hint: str) -> str:
        return self.let(hint, f'llvm.inline_asm "{instr} $0, $1;", "=f,f" {x} : (f32) -> f32')

    def exp2(self, x):
        return self.asm1("ex2.approx.ftz.f32", x, "e")

    def log2(self, x):
        return self.asm1("lg2.approx.ftz.f32", x, "lg")

    def rcp(self, x):
        return self.asm1("rcp.approx.ftz.f32", x, "rcp")

    def shfl_xor(self, x, offset: int, ty="f32"):
        name = self.fresh("shfl")
        self.emit(f"{name}, {self.fresh('shfl_ok')} = gpu.shuffle xor {x}, {self.const(offset, 'i32')}, "
                  f"{self.const(32, 'i32')} : {ty}")
        return name
