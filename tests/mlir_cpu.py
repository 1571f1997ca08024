"""Run a generated multi-tensor kernel's own code on the CPU (tests without a GPU).

The kernel (``nova/kernels/optimizer/emit.py``) touches memory only through LLVM pointers read from
its argument table, and its threads share nothing: so its ``gpu.func`` body, with ``gpu.block_id`` and
``gpu.thread_id`` made arguments and the global address space made the default one, is a CPU
function.  MLIR's execution engine compiles it (``__nv_fsqrt_rn``/``__nv_dsqrt_rn`` become LLVM's
IEEE ``sqrt``; bf16 conversions are expanded into integer arithmetic, the host having no bf16
instructions, an f64 value narrowed to bf16 through f32) and ``run_kernel`` calls it once per (CTA,
thread) of the schedule's grid: every chunk, row scan, vector, tail and scalar of the real kernel
runs, on host memory.
"""
from __future__ import annotations

import ctypes
import re

PIPELINE = ("builtin.module(func.func(arith-expand{include-bf16=true}),convert-scf-to-cf,convert-vector-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,"
            "convert-index-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)")
SQRT = {"f32": "__nv_fsqrt_rn", "f64": "__nv_dsqrt_rn"}


def host_module(text: str) -> str:
    """The kernel module's ``gpu.func`` as ``func.func @host(%table, %hyper, %bid, %tid)``."""
    m = re.search(r"gpu\.func @\w+\((.*?)\) kernel attributes \{.*?\} \{\n", text, re.S)
    body = text[m.end():text.rindex("gpu.return")]
    body = body.replace("gpu.thread_id x", "arith.addi %host_tid, %host_zero : index")
    body = body.replace("gpu.block_id x", "arith.addi %host_bid, %host_zero : index")
    body = body.replace("!llvm.ptr<1>", "!llvm.ptr")
    body = re.sub(r"(%\w+) = arith\.truncf (%\w+) : f64 to bf16",
                  r"\1_f32 = arith.truncf \2 : f64 to f32\n\1 = arith.truncf \1_f32 : f32 to bf16", body)
    sqrt = "".join(f"llvm.func @{name}(%x: {ty}) -> {ty} {{\n  %r = llvm.intr.sqrt(%x) : ({ty}) -> {ty}\n"
                   f"  llvm.return %r : {ty}\n}}\n" for ty, name in SQRT.items())
    return (f"module {{\n{sqrt}func.func @host(%table: !llvm.ptr, %hyper: !llvm.ptr, %host_bid: index, "
            f"%host_tid: index) attributes {{llvm.emit_c_interface}} {{\n%host_zero = arith.constant 0 : index\n"
            f"{body}return\n}}\n}}\n")


def run_kernel(module_text: str, grid: int, threads: int, table_address: int, hyper_address: int) -> None:
    """Every thread of every CTA of the kernel in ``module_text``, one after the other."""
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine
    from mlir.passmanager import PassManager
    with ir.Context():
        module = ir.Module.parse(host_module(module_text))
        PassManager.parse(PIPELINE).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2)
        table, hyper = ctypes.c_void_p(table_address), ctypes.c_void_p(hyper_address)
        for b in range(grid):
            for t in range(threads):
                bid, tid = ctypes.c_longlong(b), ctypes.c_longlong(t)
                engine.invoke("host", ctypes.pointer(table), ctypes.pointer(hyper), ctypes.pointer(bid),
                              ctypes.pointer(tid))
