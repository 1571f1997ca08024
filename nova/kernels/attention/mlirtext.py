"""A small MLIR text writer for the attention kernels (Nova's kernels are emitted as text and parsed
by the MLIR Python bindings in ``nova.codegen.lower.to_ptx``).

Index values are Python ints (compile-time constants, folded here) or SSA names.  Every SSA name
is unique in the function; side-effect-free ops are reused within the scope that defined them;
constants are printed once at the top of the kernel.
"""
from __future__ import annotations

from contextlib import contextmanager

from nova.codegen.builder import SMEM, Ir


class Text(Ir):
    """``nova.codegen.builder.Ir`` with the attention kernels' spellings: index values named ``ix``,
    constants named by value (``c4``, ``i32``'s ``i4``, ``f_f32``), arguments reserved by ``kernel``."""
    index_hint = "ix"

    @contextmanager
    def kernel(self, name: str, args: list[str], threads: int, **nvvm):
        """``Ir.kernel`` with the arguments' names reserved, the shared-memory alias declared first
        and ``gpu.return`` written last."""
        self.reserve(*(a.split(":")[0].strip().lstrip("%") for a in args))   # argument names are taken
        self.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        with super().kernel(name, args, threads, **nvvm):
            yield
            self.emit("gpu.return")

    # ---- constants
    def spell_const(self, value, ty: str) -> tuple[str, str]:
        if ty in ("index", "i32"):
            return ("c" if ty == "index" else "i") + (str(value) if value >= 0 else f"_neg{-value}"), str(int(value))
        if ty.startswith("vector"):
            return ("zeros" if value == 0 else "cvec"), "dense<%.17e>" % float(value)
        return f"f_{ty}", "%.17e" % float(value)

    def f(self, x: float) -> str:
        return self.const(float(x), "f32")

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
