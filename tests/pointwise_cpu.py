"""Run a generated pointwise kernel's own code on the CPU (tests without a GPU).

A pointwise kernel (``nova/kernels/pointwise/emit.py``) addresses its operands as static one-axis
memrefs and its threads share nothing, so its ``gpu.func`` body, with ``gpu.block_id`` and
``gpu.thread_id`` made arguments, is a CPU function: MLIR's execution engine compiles it and
``run_pointwise`` calls it once per (CTA, thread) of the schedule's grid, on torch tensors' host
memory (each operand's memref starts at its tensor's first element and spans what the kernel
addresses).  Every grid-stride trip, vector load and store, window clamp, gather and iota of the real
kernel runs.
"""
from __future__ import annotations

import ctypes
import re

PIPELINE = ("builtin.module(func.func(arith-expand{include-bf16=true}),expand-strided-metadata,convert-scf-to-cf,"
            "convert-vector-to-llvm,convert-math-to-llvm,finalize-memref-to-llvm,convert-arith-to-llvm,"
            "convert-index-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)")


def host_module(text: str) -> str:
    """The kernel module's ``gpu.func`` as ``func.func @host(<its memrefs>, %host_bid, %host_tid)``."""
    m = re.search(r"gpu\.func @\w+\((.*?)\) kernel attributes \{.*?\} \{\n", text, re.S)
    args = m.group(1)
    body = text[m.end():text.rindex("gpu.return")]
    body = body.replace("gpu.thread_id x", "arith.addi %host_tid, %host_zero : index")
    body = body.replace("gpu.block_id x", "arith.addi %host_bid, %host_zero : index")
    return (f"module {{\nfunc.func @host({args}, %host_bid: index, %host_tid: index) attributes "
            f"{{llvm.emit_c_interface}} {{\n%host_zero = arith.constant 0 : index\n{body}return\n}}\n}}\n")


def _descriptor(tensor, elements: int):
    """A ranked rank-1 memref descriptor of ``elements`` elements starting at ``tensor``'s first one."""
    from mlir.runtime.np_to_memref import make_nd_memref_descriptor
    cls = make_nd_memref_descriptor(1, ctypes.c_byte)
    d = cls()
    address = tensor.data_ptr()
    d.allocated = ctypes.c_longlong(address)
    d.aligned = ctypes.cast(ctypes.c_void_p(address), ctypes.POINTER(ctypes.c_byte))
    d.offset = ctypes.c_longlong(0)
    d.shape = (ctypes.c_longlong * 1)(elements)
    d.strides = (ctypes.c_longlong * 1)(1)
    return d


def run_pointwise(problem, schedule, inputs, outputs) -> None:
    """Every thread of every CTA of ``problem``'s kernel under ``schedule`` on host tensors (inputs,
    then outputs, the kernel's argument order; strided views address their own storage)."""
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine
    from mlir.passmanager import PassManager
    from nova.kernels.pointwise.emit import build_module
    text = build_module(problem, schedule)
    spans = [x.span(problem.shape) for x in problem.inputs] + [x.span(problem.shape) for x in problem.output_operands()]
    descriptors = [_descriptor(t, n) for t, n in zip(list(inputs) + list(outputs), spans)]
    with ir.Context():
        module = ir.Module.parse(host_module(text))
        PassManager.parse(PIPELINE).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2)
        pointers = [ctypes.pointer(ctypes.pointer(d)) for d in descriptors]
        for b in range(schedule.grid):
            for t in range(schedule.threads):
                bid, tid = ctypes.c_longlong(b), ctypes.c_longlong(t)
                engine.invoke("host", *pointers, ctypes.pointer(bid), ctypes.pointer(tid))
