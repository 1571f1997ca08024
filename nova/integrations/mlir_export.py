"""A captured graph as MLIR on tensors: one ``func.func`` of ``linalg``/``tensor``/``arith``/``math``
ops with value semantics, for other MLIR compilers (IREE, a ``one-shot-bufferize`` pipeline, ...).

    text = graph_to_mlir(nova.compile(step).graph)          # after one call of the compiled step
    text = graph_to_mlir(graph)                               # any nova.ir.Graph

The function takes the graph's inputs in order (``%arg<i>``, their names and roles in a comment)
and returns its outputs in order.  Each IR op becomes:

* pointwise ops: one ``linalg.generic`` whose indexing maps broadcast each operand as the IR does
  (trailing alignment, size-1 axes read at 0), operands converted to the result's type in the body
  (``arith.extf``/``truncf``/``sitofp``/...), the op in ``arith``/``math``; ``gelu``, ``silu``,
  ``sigmoid`` expanded to their formulas;
* ``sum``/``mean``/``max``/``min``: a ``linalg.generic`` with reduction iterators over a
  ``linalg.fill``ed init (0, or -inf/+inf), ``keepdim`` by ``tensor.expand_shape``;
* ``matmul``: ``linalg.matmul`` / ``linalg.batch_matmul`` for plain operands, otherwise a
  contraction ``linalg.generic`` whose maps read transposed or broadcast operands in place;
* views: ``reshape`` as ``tensor.collapse_shape`` + ``tensor.expand_shape``, ``permute`` as
  ``linalg.transpose``, ``expand`` as a broadcasting ``linalg.generic``, ``slice`` as
  ``tensor.extract_slice``, ``concat`` as ``tensor.concat``;
* ``constant`` as a splat ``arith.constant``, ``iota`` as a ``linalg.generic`` of ``linalg.index``,
  ``index_select`` as a ``linalg.generic`` reading ``tensor.extract``;
* composites expanded into the ops above, in FP32 for 16-bit inputs (the IR's type rules):
  ``softmax``, ``log_softmax``, ``layer_norm`` (y, mean, rstd), ``attention`` (out and the per-row
  log-sum-exp; causal masks bottom-right aligned, grouped-query heads repeated) and ``nll_loss``
  (loss, total weight; ignored rows count zero).

Any other op (the backward composites, optimizer updates, opaque ATen nodes) is refused with one
``MlirExportError`` line naming it and where it came from.
"""
from __future__ import annotations

import math
import re
import struct

from nova.ir.types import FLOAT_TYPES, TensorType, promote

MLIR_TYPES = {"f64": "f64", "f32": "f32", "bf16": "bf16", "f16": "f16", "i64": "i64", "i32": "i32", "bool": "i1"}
FLOAT_BITS = {"f64": 64, "f32": 32, "bf16": 16, "f16": 16}
INT_BITS = {"i64": 64, "i32": 32, "bool": 1}


class MlirExportError(ValueError):
    """An op or a graph the MLIR export does not cover (one line naming it)."""


def _elem(dtype: str) -> str:
    return MLIR_TYPES[dtype]


def tensor_type(t: TensorType) -> str:
    dims = "x".join(str(d) for d in t.shape)
    return f"tensor<{dims + 'x' if dims else ''}{_elem(t.dtype)}>"


def _wide(dtype: str) -> str:
    """The compute type of composites: at least FP32 (f64 stays)."""
    return "f64" if dtype == "f64" else "f32"


def float_literal(value: float, dtype: str) -> str:
    """An MLIR float literal of ``dtype``; non-finite values as the type's bit pattern in hex."""
    if math.isfinite(value):
        return f"{value:.17e}"
    if dtype == "f64":
        return "0x" + struct.pack(">d", value).hex().upper()
    bits = struct.unpack(">I", struct.pack(">f", value))[0]
    if dtype == "f32":
        return f"0x{bits:08X}"
    if dtype == "bf16":
        return f"0x{bits >> 16:04X}"
    half = {math.inf: 0x7C00, -math.inf: 0xFC00}.get(value, 0x7E00)
    return f"0x{half:04X}"


def literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in INT_BITS:
        return str(int(value))
    return float_literal(float(value), dtype)


class V:
    """An SSA value of the function being written and its tensor type."""
    __slots__ = ("name", "type")

    def __init__(self, name: str, type: TensorType):
        self.name, self.type = name, type

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def text(self) -> str:
        return tensor_type(self.type)


class Body:
    """The scalar body of a ``linalg.generic``: arith/math ops on block arguments."""

    def __init__(self, writer: "Writer", args: list[tuple[str, str]]):
        self.writer = writer
        self.args = args                    # (ssa name, IR dtype) of each block argument
        self.lines: list[str] = []

    def fresh(self) -> str:
        return self.writer.fresh("s")

    def emit(self, text: str, dtype: str) -> tuple[str, str]:
        name = self.fresh()
        self.lines.append(f"{name} = {text}")
        return name, dtype

    def const(self, value, dtype: str):
        if dtype == "bool":                       # a bool attribute carries its type (i1)
            return self.emit(f"arith.constant {literal(value, dtype)}", dtype)
        return self.emit(f"arith.constant {literal(value, dtype)} : {_elem(dtype)}", dtype)

    def cast(self, x, dtype: str):
        name, src = x
        if src == dtype:
            return x
        s, d = _elem(src), _elem(dtype)
        if dtype == "bool":
            zero = self.const(0, src)
            op = "arith.cmpf une" if src in FLOAT_TYPES else "arith.cmpi ne"
            return self.emit(f"{op}, {name}, {zero[0]} : {s}", "bool")
        if src in FLOAT_TYPES and dtype in FLOAT_TYPES:
            if src in ("bf16", "f16") and dtype in ("bf16", "f16"):
                return self.cast(self.cast(x, "f32"), dtype)
            op = "arith.extf" if FLOAT_BITS[dtype] > FLOAT_BITS[src] else "arith.truncf"
            return self.emit(f"{op} {name} : {s} to {d}", dtype)
        if src in FLOAT_TYPES:
            return self.emit(f"arith.fptosi {name} : {s} to {d}", dtype)
        if dtype in FLOAT_TYPES:
            op = "arith.uitofp" if src == "bool" else "arith.sitofp"
            return self.emit(f"{op} {name} : {s} to {d}", dtype)
        if INT_BITS[dtype] > INT_BITS[src]:
            op = "arith.extui" if src == "bool" else "arith.extsi"
            return self.emit(f"{op} {name} : {s} to {d}", dtype)
        return self.emit(f"arith.trunci {name} : {s} to {d}", dtype)

    def binary(self, op: str, a, b):
        """``op`` in {add, sub, mul, div, max, min, pow} on two scalars of one type."""
        dtype = a[1]
        fl = dtype in FLOAT_TYPES
        names = {"add": ("arith.addf", "arith.addi"), "sub": ("arith.subf", "arith.subi"),
                 "mul": ("arith.mulf", "arith.muli"), "div": ("arith.divf", "arith.divsi"),
                 "max": ("arith.maximumf", "arith.maxsi"), "min": ("arith.minimumf", "arith.minsi"),
                 "pow": ("math.powf", "math.ipowi"), "and": (None, "arith.andi"), "or": (None, "arith.ori")}
        mlir_op = names[op][0 if fl else 1]
        return self.emit(f"{mlir_op} {a[0]}, {b[0]} : {_elem(dtype)}", dtype)

    def unary(self, op: str, x):
        return self.emit(f"{op} {x[0]} : {_elem(x[1])}", x[1])

    def compare(self, op: str, a, b):
        dtype = a[1]
        if dtype in FLOAT_TYPES:
            pred = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}[op]
            return self.emit(f"arith.cmpf {pred}, {a[0]}, {b[0]} : {_elem(dtype)}", "bool")
        pred = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}[op]
        return self.emit(f"arith.cmpi {pred}, {a[0]}, {b[0]} : {_elem(dtype)}", "bool")

    def select(self, cond, a, b):
        return self.emit(f"arith.select {cond[0]}, {a[0]}, {b[0]} : {_elem(a[1])}", a[1])


def _sanitize(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "graph"
    return name if re.match(r"[A-Za-z_]", name) else "g_" + name


class Writer:
    """Writes one function: ``ops`` lines, fresh SSA names, the affine maps it uses."""

    def __init__(self):
        self.lines: list[str] = []
        self.counter = 0

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def line(self, text: str) -> None:
        self.lines.append("  " + text)

    # ------------------------------------------------------------------ building blocks
    def empty(self, t: TensorType) -> V:
        v = V(self.fresh(), t)
        self.line(f"{v.name} = tensor.empty() : {v.text}")
        return v

    def filled(self, t: TensorType, value) -> V:
        scalar = self.fresh("c")
        suffix = "" if t.dtype == "bool" else f" : {_elem(t.dtype)}"
        self.line(f"{scalar} = arith.constant {literal(value, t.dtype)}{suffix}")
        init = self.empty(t)
        v = V(self.fresh(), t)
        self.line(f"{v.name} = linalg.fill ins({scalar} : {_elem(t.dtype)}) outs({init.name} : {init.text}) "
                  f"-> {v.text}")
        return v

    def constant(self, value, t: TensorType) -> V:
        v = V(self.fresh(), t)
        self.line(f"{v.name} = arith.constant dense<{literal(value, t.dtype)}> : {v.text}")
        return v

    @staticmethod
    def broadcast_map(in_shape, out_rank: int, out_shape) -> str:
        """The affine map reading an operand of ``in_shape`` broadcast to ``out_shape`` (trailing
        alignment; a size-1 axis against a larger one reads index 0)."""
        dims = [f"d{i}" for i in range(out_rank)]
        offset = out_rank - len(in_shape)
        results = []
        for i, d in enumerate(in_shape):
            results.append("0" if d == 1 and out_shape[offset + i] != 1 else dims[offset + i])
        return f"affine_map<({', '.join(dims)}) -> ({', '.join(results)})>"

    def generic(self, inputs: list[tuple[V, str]], out: V, iterators: list[str], body_fn, *, init: V | None = None,
                captures: tuple = ()) -> V:
        """A ``linalg.generic`` over ``inputs`` (value, map) into ``out``'s type (``init`` the outs
        operand; default ``tensor.empty``); ``body_fn(body, scalars, acc)`` returns the yielded scalar."""
        init = init or self.empty(out.type)
        out_map = f"affine_map<({', '.join(f'd{i}' for i in range(len(iterators)))}) -> " \
                  f"({', '.join(f'd{i}' for i, it in enumerate(iterators) if it == 'parallel')})>"
        maps = [m for _, m in inputs] + [out_map]
        args = [(self.fresh("a"), v.dtype) for v, _ in inputs]
        acc = (self.fresh("a"), out.dtype)
        body = Body(self, args)
        result = body_fn(body, args, acc)
        result = body.cast(result, out.dtype)
        its = ", ".join(f'"{it}"' for it in iterators)
        ins = f"ins({', '.join(v.name for v, _ in inputs)} : {', '.join(v.text for v, _ in inputs)}) " if inputs else ""
        self.line(f"{out.name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{its}]}} "
                  f"{ins}outs({init.name} : {init.text}) {{")
        block_args = ", ".join(f"{n}: {_elem(d)}" for n, d in args + [acc])
        self.lines.append(f"  ^bb0({block_args}):")
        for text in body.lines:
            self.line("  " + text)
        self.line(f"  linalg.yield {result[0]} : {_elem(out.dtype)}")
        self.line(f"}} -> {out.text}")
        return out

    def pointwise(self, inputs: list[V], dtype: str, fn, shape=None) -> V:
        """Elementwise ``fn(body, scalars)`` over the broadcast of ``inputs``, result ``dtype``."""
        from nova.ir.types import broadcast_shapes
        shape = tuple(shape) if shape is not None else broadcast_shapes(*(v.shape for v in inputs))
        out = V(self.fresh(), TensorType(shape, dtype))
        maps = [(v, self.broadcast_map(v.shape, len(shape), shape)) for v in inputs]
        return self.generic(maps, out, ["parallel"] * len(shape), lambda body, args, acc: fn(body, args))

    def reduce(self, x: V, axes, kind: str, keepdim: bool = False, dtype: str | None = None) -> V:
        """``kind`` in sum/max/min over ``axes``; the result in ``dtype`` (default x's)."""
        dtype = dtype or x.dtype
        axes = sorted({a % x.type.rank for a in axes}) if x.type.rank else []
        if not axes:
            return self.cast(x, dtype)
        kept = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        start = {"sum": 0, "max": -math.inf if dtype in FLOAT_TYPES else -(2 ** (INT_BITS.get(dtype, 64) - 1)),
                 "min": math.inf if dtype in FLOAT_TYPES else 2 ** (INT_BITS.get(dtype, 64) - 1) - 1}[kind]
        if dtype == "bool":
            raise MlirExportError(f"{kind} over bool values is not exported")
        init = self.filled(TensorType(kept, dtype), start)
        out = V(self.fresh(), TensorType(kept, dtype))
        iterators = ["reduction" if i in axes else "parallel" for i in range(x.type.rank)]
        identity = f"affine_map<({', '.join(f'd{i}' for i in range(x.type.rank))}) -> " \
                   f"({', '.join(f'd{i}' for i in range(x.type.rank))})>"

        def body(b, args, acc):
            value = b.cast(args[0], dtype)
            return b.binary({"sum": "add", "max": "max", "min": "min"}[kind], value, acc)
        result = self.generic([(x, identity)], out, iterators, body, init=init)
        if keepdim:
            result = self.reshape(result, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return result

    def cast(self, x: V, dtype: str) -> V:
        if x.dtype == dtype:
            return x
        return self.pointwise([x], dtype, lambda b, a: b.cast(a[0], dtype), shape=x.shape)

    def reshape(self, x: V, shape) -> V:
        shape = tuple(int(d) for d in shape)
        if x.shape == shape:
            return x
        t = x.type.with_shape(shape)
        flat = x
        if x.type.rank == 0:
            source = x
        elif x.type.rank == 1:
            source = x
        else:
            flat = V(self.fresh(), x.type.with_shape((x.type.numel,)))
            self.line(f"{flat.name} = tensor.collapse_shape {x.name} [[{', '.join(str(i) for i in range(x.type.rank))}]]"
                      f" : {x.text} into {flat.text}")
            source = flat
        out = V(self.fresh(), t)
        if len(shape) == 0:
            self.line(f"{out.name} = tensor.collapse_shape {source.name} [] : {source.text} into {out.text}")
        elif source.type.rank == 0:
            self.line(f"{out.name} = tensor.expand_shape {source.name} [] output_shape [{', '.join(map(str, shape))}]"
                      f" : {source.text} into {out.text}")
        elif len(shape) == 1:
            return source if source.shape == shape else out
        else:
            self.line(f"{out.name} = tensor.expand_shape {source.name} [[{', '.join(str(i) for i in range(len(shape)))}]]"
                      f" output_shape [{', '.join(map(str, shape))}] : {source.text} into {out.text}")
        return out

    def permute(self, x: V, perm) -> V:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(len(perm))):
            return x
        t = x.type.with_shape(tuple(x.shape[p] for p in perm))
        init = self.empty(t)
        out = V(self.fresh(), t)
        self.line(f"{out.name} = linalg.transpose ins({x.name} : {x.text}) outs({init.name} : {init.text}) "
                  f"permutation = [{', '.join(map(str, perm))}]")
        return out

    def expand(self, x: V, shape) -> V:
        shape = tuple(int(d) for d in shape)
        if x.shape == shape:
            return x
        return self.pointwise([x], x.dtype, lambda b, a: a[0], shape=shape)

    def slice(self, x: V, axis: int, start: int, end: int, step: int = 1) -> V:
        axis %= x.type.rank
        size = len(range(start, end, step))
        offsets = [start if i == axis else 0 for i in range(x.type.rank)]
        sizes = [size if i == axis else d for i, d in enumerate(x.shape)]
        strides = [step if i == axis else 1 for i in range(x.type.rank)]
        out = V(self.fresh(), x.type.with_shape(tuple(sizes)))
        self.line(f"{out.name} = tensor.extract_slice {x.name}[{', '.join(map(str, offsets))}] "
                  f"[{', '.join(map(str, sizes))}] [{', '.join(map(str, strides))}] : {x.text} to {out.text}")
        return out

    def matmul(self, a: V, b: V, transpose_a=False, transpose_b=False, out_dtype=None) -> V:
        from nova.ir.types import broadcast_shapes
        dtype = out_dtype or promote(a.dtype, b.dtype)
        m, k = (a.shape[-1], a.shape[-2]) if transpose_a else a.shape[-2:]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        t = TensorType(batch + (m, n), dtype)
        init = self.filled(t, 0)
        out = V(self.fresh(), t)
        plain = not transpose_a and not transpose_b and a.dtype == b.dtype == dtype
        if plain and a.type.rank == b.type.rank == 2:
            self.line(f"{out.name} = linalg.matmul ins({a.name}, {b.name} : {a.text}, {b.text}) "
                      f"outs({init.name} : {init.text}) -> {out.text}")
            return out
        if plain and a.type.rank == b.type.rank == 3 and a.shape[0] == b.shape[0]:
            self.line(f"{out.name} = linalg.batch_matmul ins({a.name}, {b.name} : {a.text}, {b.text}) "
                      f"outs({init.name} : {init.text}) -> {out.text}")
            return out
        nb = len(batch)
        dims = [f"d{i}" for i in range(nb + 3)]         # batch..., m, n, k
        dm, dn, dk = dims[nb], dims[nb + 1], dims[nb + 2]

        def operand_map(v: V, rows: str, cols: str, transposed: bool) -> str:
            lead = v.type.rank - 2
            batch_dims = []
            for i, d in enumerate(v.shape[:-2]):
                j = nb - lead + i
                batch_dims.append("0" if d == 1 and batch[j] != 1 else dims[j])
            inner = [cols, rows] if transposed else [rows, cols]
            return f"affine_map<({', '.join(dims)}) -> ({', '.join(batch_dims + inner)})>"
        maps = [(a, operand_map(a, dm, dk, transpose_a)), (b, operand_map(b, dk, dn, transpose_b))]
        iterators = ["parallel"] * (nb + 2) + ["reduction"]

        def body(bd, args, acc):
            x, y = bd.cast(args[0], dtype), bd.cast(args[1], dtype)
            return bd.binary("add", acc, bd.binary("mul", x, y))
        return self.generic(maps, out, iterators, body, init=init)


# ====================================================================== the IR ops
POINTWISE_UNARY_MATH = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "rsqrt": "math.rsqrt",
                        "tanh": "math.tanh", "erf": "math.erf", "sin": "math.sin", "cos": "math.cos"}
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "max", "minimum": "min"}


def _float_of(dtype: str) -> str:
    return dtype if dtype in FLOAT_TYPES else "f32"


def _unary_float(body: Body, op: str, x):
    """A float unary op (``x`` already in the result type)."""
    if op in POINTWISE_UNARY_MATH:
        return body.unary(POINTWISE_UNARY_MATH[op], x)
    one = body.const(1.0, x[1])
    if op == "reciprocal":
        return body.binary("div", one, x)
    if op == "abs":
        return body.unary("math.absf", x)
    if op == "neg":
        return body.unary("arith.negf", x)
    if op == "relu":
        return body.binary("max", x, body.const(0.0, x[1]))
    if op == "sigmoid":
        return body.binary("div", one, body.binary("add", one, body.unary("math.exp", body.unary("arith.negf", x))))
    if op == "silu":
        return body.binary("mul", x, _unary_float(body, "sigmoid", x))
    if op == "gelu_tanh":               # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = body.binary("mul", x, body.binary("mul", x, x))
        inner = body.binary("mul", body.const(math.sqrt(2 / math.pi), x[1]),
                            body.binary("add", x, body.binary("mul", body.const(0.044715, x[1]), cube)))
        return body.binary("mul", body.binary("mul", body.const(0.5, x[1]), x),
                           body.binary("add", one, body.unary("math.tanh", inner)))
    if op == "gelu_erf":                # 0.5 x (1 + erf(x / sqrt(2)))
        inner = body.binary("mul", x, body.const(1 / math.sqrt(2), x[1]))
        return body.binary("mul", body.binary("mul", body.const(0.5, x[1]), x),
                           body.binary("add", one, body.unary("math.erf", inner)))
    raise MlirExportError(f"op {op} is not exported")


FLOAT_UNARY = tuple(POINTWISE_UNARY_MATH) + ("reciprocal", "sigmoid", "silu", "gelu_tanh", "gelu_erf")


def _pointwise(w: Writer, node, ins: list[V]) -> V:
    op, out_t = node.op, node.outputs[0].type
    dtype = out_t.dtype
    if op == "cast":
        return w.cast(ins[0], dtype)
    if op in COMPARISONS:
        common = promote(*(v.dtype for v in ins))
        return w.pointwise(ins, "bool", lambda b, a: b.compare(op, b.cast(a[0], common), b.cast(a[1], common)),
                           shape=out_t.shape)
    if op in ("logical_and", "logical_or"):
        return w.pointwise(ins, "bool", lambda b, a: b.binary("and" if op == "logical_and" else "or",
                                                             b.cast(a[0], "bool"), b.cast(a[1], "bool")),
                           shape=out_t.shape)
    if op == "logical_not":
        return w.pointwise(ins, "bool", lambda b, a: b.compare("eq", b.cast(a[0], "bool"), b.const(False, "bool")),
                           shape=out_t.shape)
    if op == "where":
        return w.pointwise(ins, dtype, lambda b, a: b.select(a[0], b.cast(a[1], dtype), b.cast(a[2], dtype)),
                           shape=out_t.shape)
    if op in BINARY:
        return w.pointwise(ins, dtype, lambda b, a: b.binary(BINARY[op], b.cast(a[0], dtype), b.cast(a[1], dtype)),
                           shape=out_t.shape)
    if op == "neg" or op == "abs" or op == "relu":
        if dtype in FLOAT_TYPES:
            return w.pointwise(ins, dtype, lambda b, a: _unary_float(b, op, a[0]), shape=out_t.shape)

        def int_op(b, a):
            zero = b.const(0, dtype)
            if op == "neg":
                return b.binary("sub", zero, a[0])
            if op == "relu":
                return b.binary("max", a[0], zero)
            return b.select(b.compare("lt", a[0], zero), b.binary("sub", zero, a[0]), a[0])
        return w.pointwise(ins, dtype, int_op, shape=out_t.shape)
    if op in FLOAT_UNARY:
        if dtype not in FLOAT_TYPES:
            raise MlirExportError(f"op {op} on {dtype} values is not exported{_where(node)}")
        return w.pointwise(ins, dtype, lambda b, a: _unary_float(b, op, b.cast(a[0], dtype)), shape=out_t.shape)
    raise MlirExportError(f"op {op} is not exported to MLIR{_where(node)}")


def _softmax(w: Writer, x: V, axis: int, log: bool) -> V:
    wide = _wide(x.dtype)
    xw = w.cast(x, wide)
    top = w.reduce(xw, (axis,), "max", keepdim=True)
    shifted = w.pointwise([xw, top], wide, lambda b, a: b.binary("sub", a[0], a[1]))
    e = w.pointwise([shifted], wide, lambda b, a: b.unary("math.exp", a[0]))
    total = w.reduce(e, (axis,), "sum", keepdim=True)
    if log:
        y = w.pointwise([shifted, total], wide, lambda b, a: b.binary("sub", a[0], b.unary("math.log", a[1])))
    else:
        y = w.pointwise([e, total], wide, lambda b, a: b.binary("div", a[0], a[1]))
    return w.cast(y, x.dtype)


def _layer_norm(w: Writer, node, ins: list[V]) -> list[V]:
    x = ins[0]
    attrs = node.attrs
    rest = list(ins[1:])
    weight = rest.pop(0) if attrs.get("has_weight", True) else None
    bias = rest.pop(0) if attrs.get("has_bias", True) else None
    n = len(attrs["normalized_shape"])
    axes = tuple(range(x.type.rank - n, x.type.rank))
    wide = _wide(x.dtype)
    count = math.prod(x.shape[x.type.rank - n:])
    xw = w.cast(x, wide)
    mean = w.pointwise([w.reduce(xw, axes, "sum", keepdim=True)], wide,
                       lambda b, a: b.binary("div", a[0], b.const(count, wide)))
    centered = w.pointwise([xw, mean], wide, lambda b, a: b.binary("sub", a[0], a[1]))
    square_sum = w.reduce(w.pointwise([centered], wide, lambda b, a: b.binary("mul", a[0], a[0])), axes, "sum",
                          keepdim=True)
    eps = float(attrs["eps"])
    rstd = w.pointwise([square_sum], wide, lambda b, a: b.unary(
        "math.rsqrt", b.binary("add", b.binary("div", a[0], b.const(count, wide)), b.const(eps, wide))))
    y = w.pointwise([centered, rstd], wide, lambda b, a: b.binary("mul", a[0], a[1]))
    if weight is not None:
        y = w.pointwise([y, weight], wide, lambda b, a: b.binary("mul", a[0], b.cast(a[1], wide)))
    if bias is not None:
        y = w.pointwise([y, bias], wide, lambda b, a: b.binary("add", a[0], b.cast(a[1], wide)))
    return [w.cast(y, x.dtype), mean, rstd]


def _attention(w: Writer, node, ins: list[V]) -> list[V]:
    if len(ins) != 3:
        raise MlirExportError(f"attention with a bias (an attention mask) is not exported to MLIR{_where(node)}")
    q, k, v = ins
    scale, causal = float(node.attrs["scale"]), bool(node.attrs.get("causal"))
    wide = _wide(q.dtype)
    heads = q.shape[1]

    def repeat(x: V) -> V:                        # grouped-query: head h reads K/V head h // groups
        b, hk, s, d = x.shape
        if hk == heads:
            return x
        g = heads // hk
        return w.reshape(w.expand(w.reshape(x, (b, hk, 1, s, d)), (b, hk, g, s, d)), (b, heads, s, d))
    k, v = repeat(k), repeat(v)
    s = w.matmul(w.cast(q, wide), w.cast(k, wide), transpose_b=True)
    s = w.pointwise([s], wide, lambda b, a: b.binary("mul", a[0], b.const(scale, wide)))
    t_q, t_k = s.shape[-2:]
    if causal:                                    # keep column <= row + (t_k - t_q): bottom-right aligned
        rank = s.type.rank

        def mask(b, a):
            row = b.emit(f"linalg.index {rank - 2} : index", "index")
            col = b.emit(f"linalg.index {rank - 1} : index", "index")
            row_i = b.emit(f"arith.index_cast {row[0]} : index to i64", "i64")
            col_i = b.emit(f"arith.index_cast {col[0]} : index to i64", "i64")
            limit = b.binary("add", row_i, b.const(t_k - t_q, "i64"))
            keep = b.compare("le", col_i, limit)
            return b.select(keep, a[0], b.const(-math.inf, wide))
        s = w.pointwise([s], wide, mask)
    top = w.reduce(s, (3,), "max", keepdim=True)
    top = w.pointwise([top], wide, lambda b, a: b.select(b.compare("eq", a[0], b.const(-math.inf, wide)),
                                                         b.const(0.0, wide), a[0]))
    e = w.pointwise([s, top], wide, lambda b, a: b.unary("math.exp", b.binary("sub", a[0], a[1])))
    total = w.reduce(e, (3,), "sum", keepdim=True)
    p = w.pointwise([e, total], wide, lambda b, a: b.binary("div", a[0], a[1]))
    out = w.cast(w.matmul(p, w.cast(v, wide)), q.dtype)
    lse = w.pointwise([total, top], wide, lambda b, a: b.binary("add", b.unary("math.log", a[0]), a[1]))
    return [out, w.reshape(lse, lse.shape[:3])]


def _nll_loss(w: Writer, node, ins: list[V]) -> list[V]:
    logp, target = ins
    reduction, ignore = node.attrs.get("reduction", "mean"), int(node.attrs.get("ignore_index", -100))
    n = logp.shape[0]
    dtype = logp.dtype

    def picked(b, a):                             # -logp[i, target[i]] (0 where target is ignored)
        t = b.cast(a[0], "i64")
        ignored = b.compare("eq", t, b.const(ignore, "i64"))
        safe = b.select(ignored, b.const(0, "i64"), t)
        row = b.emit("linalg.index 0 : index", "index")
        col = b.emit(f"arith.index_cast {safe[0]} : i64 to index", "index")
        value = b.emit(f"tensor.extract {logp.name}[{row[0]}, {col[0]}] : {logp.text}", dtype)
        return b.select(ignored, b.const(0.0, dtype), b.unary("arith.negf", value))
    losses = w.pointwise([target], dtype, picked, shape=(n,))
    weights = w.pointwise([target], dtype, lambda b, a: b.select(
        b.compare("eq", b.cast(a[0], "i64"), b.const(ignore, "i64")), b.const(0.0, dtype), b.const(1.0, dtype)),
        shape=(n,))
    total_weight = w.reduce(weights, (0,), "sum")
    if reduction == "none":
        return [losses, total_weight]
    total = w.reduce(losses, (0,), "sum")
    if reduction == "sum":
        return [total, total_weight]
    return [w.pointwise([total, total_weight], dtype, lambda b, a: b.binary("div", a[0], a[1])), total_weight]


def _index_select(w: Writer, node, ins: list[V]) -> V:
    x, index = ins
    axis = node.attrs["axis"] % x.type.rank
    out_t = node.outputs[0].type
    rank, irank = out_t.rank, index.type.rank
    dims = [f"d{i}" for i in range(rank)]
    index_map = f"affine_map<({', '.join(dims)}) -> ({', '.join(dims[axis:axis + irank])})>"
    out = V(w.fresh(), out_t)

    def body(b, args, acc):
        position = b.emit(f"arith.index_cast {b.cast(args[0], 'i64')[0]} : i64 to index", "index")
        coords = []
        for i in range(x.type.rank):
            if i == axis:
                coords.append(position[0])
            else:
                j = i if i < axis else i - 1 + irank
                coords.append(b.emit(f"linalg.index {j} : index", "index")[0])
        return b.emit(f"tensor.extract {x.name}[{', '.join(coords)}] : {x.text}", x.dtype)
    return w.generic([(index, index_map)], out, ["parallel"] * rank, body)


def _iota(w: Writer, node) -> V:
    attrs = node.attrs
    t = node.outputs[0].type
    out = V(w.fresh(), t)
    start, step = attrs.get("start", 0), attrs.get("step", 1)

    def body(b, args, acc):
        i = b.emit("linalg.index 0 : index", "index")
        value = b.emit(f"arith.index_cast {i[0]} : index to i64", "i64")
        value = b.binary("add", b.binary("mul", value, b.const(step, "i64")), b.const(start, "i64"))
        return b.cast(value, t.dtype)
    return w.generic([], out, ["parallel"], body)


def _where(node) -> str:
    return f" ({node.origin})" if node.origin else ""


def _node(w: Writer, node, ins: list[V]) -> list[V]:
    from nova.ir.ops import kind
    op, attrs = node.op, node.attrs
    if op == "matmul":
        return [w.matmul(ins[0], ins[1], attrs.get("transpose_a", False), attrs.get("transpose_b", False),
                         attrs.get("out_dtype"))]
    if op in ("sum", "max", "min", "mean"):
        x = w.cast(ins[0], attrs.get("dtype") or ins[0].dtype)
        if op != "mean":
            return [w.reduce(x, attrs["axes"], op, attrs.get("keepdim", False))]
        axes = attrs["axes"]
        count = math.prod(x.shape[a % x.type.rank] for a in axes) if x.type.rank and axes else 1
        total = w.reduce(x, axes, "sum", attrs.get("keepdim", False))
        return [w.pointwise([total], total.dtype, lambda b, a: b.binary("div", a[0], b.const(count, total.dtype)))]
    if op == "reshape":
        return [w.reshape(ins[0], attrs["shape"])]
    if op == "permute":
        return [w.permute(ins[0], attrs["perm"])]
    if op == "expand":
        return [w.expand(ins[0], attrs["shape"])]
    if op == "slice":
        return [w.slice(ins[0], attrs["axis"], attrs["start"], attrs["end"], attrs.get("step", 1))]
    if op == "concat":
        out = V(w.fresh(), node.outputs[0].type)
        parts = [w.cast(v, out.dtype) for v in ins]
        w.line(f"{out.name} = tensor.concat dim({attrs['axis'] % out.type.rank}) {', '.join(v.name for v in parts)} : "
               f"({', '.join(v.text for v in parts)}) -> {out.text}")
        return [out]
    if op == "constant":
        return [w.constant(attrs["value"], node.outputs[0].type)]
    if op == "iota":
        return [_iota(w, node)]
    if op == "index_select":
        return [_index_select(w, node, ins)]
    if op in ("softmax", "log_softmax"):
        return [_softmax(w, ins[0], attrs["axis"], op == "log_softmax")]
    if op == "layer_norm":
        return _layer_norm(w, node, ins)
    if op == "attention":
        return _attention(w, node, ins)
    if op == "nll_loss":
        return _nll_loss(w, node, ins)
    if kind(op) == "pointwise":
        return [_pointwise(w, node, ins)]
    what = f"opaque ATen op {attrs.get('target')}" if op == "aten" else f"op {op}"
    raise MlirExportError(f"{what} is not exported to MLIR{_where(node)}; the export covers pointwise ops, "
                          f"reductions, matmul, views, softmax, layer_norm, attention and nll_loss")


def graph_to_mlir(graph, name: str | None = None) -> str:
    """``graph`` (a ``nova.ir.Graph``, or a compiled step after a call) as an MLIR module text."""
    graph = getattr(graph, "graph", graph)
    if graph is None:
        raise MlirExportError("nothing captured yet: call the compiled step once before exporting it")
    w = Writer()
    env = {}
    args = []
    comments = []
    for i, spec in enumerate(graph.inputs):
        v = V(f"%arg{i}", spec.value.type)
        env[spec.value] = v
        args.append(f"{v.name}: {v.text}")
        comments.append(f"// {v.name}: {spec.name} ({spec.role})")
    for node in graph.nodes:
        ins = [env[x] for x in node.inputs]
        outs = _node(w, node, ins)
        for value, v in zip(node.outputs, outs):
            if v.type != value.type:
                raise MlirExportError(f"exporting {node.op}{_where(node)} produced {v.type}, the graph has {value.type}")
            env[value] = v
    results = [env[o.value] for o in graph.outputs]
    for k, o in enumerate(graph.outputs):
        comments.append(f"// result {k}: {o.name} ({o.role})")
    func = _sanitize(name or graph.name)
    header = (f"  func.func @{func}({', '.join(args)}) -> ({', '.join(r.text for r in results)}) {{"
              if results else f"  func.func @{func}({', '.join(args)}) {{")
    ret = f"  return {', '.join(r.name for r in results)} : {', '.join(r.text for r in results)}" if results \
        else "  return"
    lines = [f"// {graph.name}: exported by Nova (nova.integrations.mlir_export), linalg on tensors", *comments,
             "module {", header, *["  " + l for l in w.lines], "  " + ret, "  }", "}"]
    return "\n".join(lines) + "\n"
