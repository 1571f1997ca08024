"""MLIR text of one fused pointwise kernel (``nova_pointwise``), written with the ``Ir`` scaffold.

    gpu.func @nova_pointwise(%in0: memref<SPANxT>, ..., %out0: memref<SPANxT>, ...)

Bare pointers, static shapes.  Thread ``b * threads + t`` walks vectors ``j`` of ``vector`` consecutive
flat elements in a grid-stride loop.  Per vector, each input is read

* once before the loop when every stride is 0 (a scalar broadcast),
* as one aligned ``vector.load`` when its innermost stride is 1 (the derivation made it legal),
* as one scalar load splatted over the lanes when its innermost stride is 0,
* as ``vector`` scalar loads (a gather) otherwise,

at the offset ``sum_a ((e / inner_a) % shape_a) * stride_a`` of the vector's first flat element ``e``
(static divisors; an operand laid out like the outputs reads at ``e`` itself); an input with a
``Window`` reads its axis coordinate less the window's start, clamped into the window (into
``[0, extent - vector]`` for a vector along it: the derivation made the window's bounds multiples of
the vector, so a vector lies in or out of the window whole), lane by lane when it is gathered along
it.  A table input is never read at the coordinates: ``gather`` loads its element at the index value,
clamped into the table; ``iota`` computes ``start + step * ((e' / inner) % extent)`` of the lane's flat
element ``e'``.  Math runs per lane in
f32 for f32/bf16/f16 storage (f64 stays f64, integers and bool as themselves), converted only where the
IR's types convert (``cast`` rounds through its storage type); outputs are stored as vectors at the
same offset of their own strides (an output laid out contiguous at ``e`` itself), or one store per lane
when their innermost stride is not 1 (a scatter).
"""
from __future__ import annotations

import math
import struct

from nova.codegen.builder import Ir, finite_float_literal
from nova.kernels import activations
from nova.kernels.pointwise.problem import PointwiseProblem
from nova.kernels.pointwise.schedule import PointwiseSchedule
from nova.kernels.pointwise.types import promote

KERNEL_NAME = "nova_pointwise"
STORAGE = {"f64": "f64", "f32": "f32", "bf16": "bf16", "f16": "f16", "i64": "i64", "i32": "i32", "bool": "i8"}
COMPUTE = {"f64": "f64", "f32": "f32", "bf16": "f32", "f16": "f32", "i64": "i64", "i32": "i32", "bool": "i1"}
FLOAT = ("f32", "f64")
FLOAT_BINARY = {"add": "arith.addf", "sub": "arith.subf", "mul": "arith.mulf", "div": "arith.divf",
                "maximum": "arith.maximumf", "minimum": "arith.minimumf"}
INT_BINARY = {"add": "arith.addi", "sub": "arith.subi", "mul": "arith.muli", "maximum": "arith.maxsi",
              "minimum": "arith.minsi"}
FLOAT_UNARY = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "rsqrt": "math.rsqrt", "abs": "math.absf",
               "tanh": "math.tanh", "erf": "math.erf", "sin": "math.sin", "cos": "math.cos", "neg": "arith.negf"}
COMPARE = {"eq": ("oeq", "eq"), "ne": ("une", "ne"), "lt": ("olt", "slt"), "le": ("ole", "sle"),
           "gt": ("ogt", "sgt"), "ge": ("oge", "sge")}
COMPOSED = ("reciprocal", "sigmoid", "relu", "silu", "gelu_tanh", "gelu_erf", "pow", "gelu_tanh_backward",
            "gelu_erf_backward", "relu_backward", "silu_backward", "sigmoid_backward", "tanh_backward")


def params(problem: PointwiseProblem) -> tuple[str, ...]:
    return tuple(f"in{k}" for k in range(len(problem.inputs))) + tuple(f"out{k}" for k in range(len(problem.outputs)))


def unsupported(problem: PointwiseProblem) -> str:
    """Why no kernel of this family computes ``problem`` ("" when one does)."""
    for ins in problem.program:
        ct = COMPUTE[ins.dtype]
        args = [COMPUTE[problem.dtype_of(a)] for a in ins.args]
        if ins.op in ("constant", "cast", "where", "logical_not", "logical_and", "logical_or", "iota") or \
                ins.op in COMPARE:
            continue
        if ins.op == "gather" and ins.args[0] < len(problem.inputs) and problem.inputs[ins.args[0]].table \
                and args[1] in ("i32", "i64"):
            continue
        if ct in FLOAT and (ins.op in FLOAT_BINARY or ins.op in FLOAT_UNARY or ins.op in COMPOSED):
            continue
        if ct in ("i32", "i64") and (ins.op in INT_BINARY or ins.op in ("neg", "relu", "abs")) and \
                all(a in ("i32", "i64", "i1") for a in args):
            continue
        return f"{ins.op} on {ins.dtype} values"
    return ""


class _Emitter:
    def __init__(self, problem: PointwiseProblem, schedule: PointwiseSchedule):
        self.p, self.s = problem, schedule
        names = params(problem)
        self.ir = Ir(reserved=tuple(names))
        self.names = names
        self.memrefs = [f"memref<{x.span(problem.shape)}x{STORAGE[x.dtype]}>" for x in problem.inputs] + \
                       [f"memref<{x.span(problem.shape)}x{STORAGE[x.dtype]}>" for x in problem.output_operands()]

    # ---------------------------------------------------------------- scalars
    def fconst(self, value: float, ty: str) -> str:
        ir = self.ir
        key = (ty, repr(float(value)))
        if key not in ir._consts:
            if math.isfinite(value):
                lit = finite_float_literal(value)
            else:
                bits = struct.unpack("<Q", struct.pack("<d", value))[0] if ty == "f64" else \
                    struct.unpack("<I", struct.pack("<f", value))[0]
                lit = f"0x{bits:X}"
            name = ir.fresh(f"cst_{ty}")
            ir._consts[key] = name
            ir._const_lines.append(f"{name} = arith.constant {lit} : {ty}")
        return ir._consts[key]

    def const(self, value, ct: str) -> str:
        if ct in FLOAT:
            return self.fconst(float(value), ct)
        if ct == "i1":
            return self.ir.const(bool(value), "i1")
        key = (ct, repr(int(value)))
        ir = self.ir
        if key not in ir._consts:
            name = ir.fresh(f"c{int(value)}_{ct}".replace("-", "neg"))
            ir._consts[key] = name
            ir._const_lines.append(f"{name} = arith.constant {int(value)} : {ct}")
        return ir._consts[key]

    def op(self, hint: str, text: str) -> str:
        return self.ir.pure(hint, text)

    def convert(self, x: str, src: str, dst: str) -> str:
        """``x`` of compute type ``src`` as compute type ``dst`` (torch's conversion rules)."""
        if src == dst:
            return x
        if src in FLOAT and dst in FLOAT:
            return self.op("cvt", f"arith.{'extf' if dst == 'f64' else 'truncf'} {x} : {src} to {dst}")
        if src in FLOAT:
            if dst == "i1":
                return self.op("nz", f"arith.cmpf une, {x}, {self.fconst(0.0, src)} : {src}")
            return self.op("cvt", f"arith.fptosi {x} : {src} to {dst}")
        if dst in FLOAT:
            return self.op("cvt", f"arith.{'uitofp' if src == 'i1' else 'sitofp'} {x} : {src} to {dst}")
        if dst == "i1":
            return self.op("nz", f"arith.cmpi ne, {x}, {self.const(0, src)} : {src}")
        if src == "i1":
            return self.op("cvt", f"arith.extui {x} : i1 to {dst}")
        wider = int(dst[1:]) > int(src[1:])
        return self.op("cvt", f"arith.{'extsi' if wider else 'trunci'} {x} : {src} to {dst}")

    def load_value(self, raw: str, dtype: str) -> str:
        st, ct = STORAGE[dtype], COMPUTE[dtype]
        if dtype == "bool":
            return self.op("b", f"arith.cmpi ne, {raw}, {self.const(0, 'i8')} : i8")
        if st != ct:
            return self.op("x", f"arith.extf {raw} : {st} to {ct}")
        return raw

    def store_value(self, x: str, dtype: str) -> str:
        st, ct = STORAGE[dtype], COMPUTE[dtype]
        if dtype == "bool":
            return self.op("byte", f"arith.extui {x} : i1 to i8")
        if st != ct:
            return self.op("y", f"arith.truncf {x} : {ct} to {st}")
        return x

    # ---------------------------------------------------------------- math
    def f(self, mlir_op: str, ty: str, *xs) -> str:
        return self.op("t", f"{mlir_op} {', '.join(xs)} : {ty}")

    def sigmoid(self, x: str, ty: str) -> str:
        e = self.f("math.exp", ty, self.f("arith.negf", ty, x))
        return self.f("arith.divf", ty, self.fconst(1.0, ty), self.f("arith.addf", ty, self.fconst(1.0, ty), e))

    def arith(self, ty: str) -> "_Arith":
        """This emitter's arithmetic in ``ty`` for the shared activation formulas (``nova/kernels/activations.py``)."""
        return _Arith(self, ty)

    def composed(self, op: str, xs: list[str], ty: str, ins) -> str:
        f, c = self.f, lambda v: self.fconst(v, ty)
        one = c(1.0)
        if op == "reciprocal":
            return f("arith.divf", ty, one, xs[0])
        if op == "sigmoid":
            return self.sigmoid(xs[0], ty)
        if op == "relu":
            return f("arith.maximumf", ty, xs[0], c(0.0))
        if op == "silu":
            return f("arith.mulf", ty, xs[0], self.sigmoid(xs[0], ty))
        if op == "gelu_tanh":
            return activations.gelu_tanh(self.arith(ty), xs[0])
        if op == "gelu_erf":
            cdf = f("arith.mulf", ty, c(0.5), f("arith.addf", ty, one, f("math.erf", ty, f("arith.mulf", ty, xs[0], c(math.sqrt(0.5))))))
            return f("arith.mulf", ty, xs[0], cdf)
        if op == "pow":
            return self.power(xs, ty, ins)
        dy, x = xs
        if op == "gelu_tanh_backward":
            return activations.gelu_tanh_backward(self.arith(ty), dy, x)
        if op == "gelu_erf_backward":
            cdf = f("arith.mulf", ty, c(0.5), f("arith.addf", ty, one, f("math.erf", ty, f("arith.mulf", ty, x, c(math.sqrt(0.5))))))
            pdf = f("arith.mulf", ty, c(1 / math.sqrt(2 * math.pi)),
                    f("math.exp", ty, f("arith.mulf", ty, c(-0.5), f("arith.mulf", ty, x, x))))
            return f("arith.mulf", ty, dy, f("arith.addf", ty, cdf, f("arith.mulf", ty, x, pdf)))
        if op == "relu_backward":            # threshold_backward(dy, y, 0): y <= 0 -> 0
            le = self.op("le", f"arith.cmpf ole, {x}, {c(0.0)} : {ty}")
            return self.op("t", f"arith.select {le}, {c(0.0)}, {dy} : {ty}")
        if op == "silu_backward":
            s = self.sigmoid(x, ty)
            grow = f("arith.addf", ty, one, f("arith.mulf", ty, x, f("arith.subf", ty, one, s)))
            return f("arith.mulf", ty, dy, f("arith.mulf", ty, s, grow))
        if op == "sigmoid_backward":         # (dy, y = sigmoid(x)) -> dy * y * (1 - y)
            return f("arith.mulf", ty, dy, f("arith.mulf", ty, x, f("arith.subf", ty, one, x)))
        if op == "tanh_backward":            # (dy, y = tanh(x)) -> dy * (1 - y^2)
            return activations.tanh_backward(self.arith(ty), dy, x)
        raise AssertionError(op)

    def power(self, xs, ty, ins) -> str:
        """x ** e: a constant integer exponent up to 4 as products, 0.5 as sqrt, -1 as a reciprocal;
        else ``math.powf``."""
        n = len(self.p.inputs)
        e_value = ins.args[1]
        exp_instr = self.p.program[e_value - n] if e_value >= n else None
        if exp_instr is not None and exp_instr.op == "constant":
            e = float(exp_instr.attr("value"))
            x = xs[0]
            if e == 0.5:
                return self.f("math.sqrt", ty, x)
            if e == -1.0:
                return self.f("arith.divf", ty, self.fconst(1.0, ty), x)
            if e.is_integer() and 1 <= e <= 4:
                out = x
                for _ in range(int(e) - 1):
                    out = self.f("arith.mulf", ty, out, x)
                return out
        return self.f("math.powf", ty, *xs)

    def instruction(self, ins, args: list[tuple[str, str]]) -> str:
        """SSA value (compute type ``COMPUTE[ins.dtype]``) of one instruction; args are (value, compute type)."""
        ct = COMPUTE[ins.dtype]
        op = ins.op
        if op == "constant":
            return self.const(ins.attr("value"), ct)
        if op == "iota":
            return self.iota(ins, ct)
        if op == "gather":
            return self.gather(ins, args[1])
        if op == "cast":
            (x, src), = args
            y = self.convert(x, src, ct)
            if ins.dtype in ("bf16", "f16"):           # round through the storage type
                y = self.op("round", f"arith.extf {self.op('narrow', f'arith.truncf {y} : f32 to {ins.dtype}')} : "
                                     f"{ins.dtype} to f32")
            return y
        if op in COMPARE:
            common = COMPUTE[promote(*(self.p.dtype_of(a) for a in ins.args))]
            a, b = (self.convert(x, t, common) for x, t in args)
            if common in FLOAT:
                return self.op("cmp", f"arith.cmpf {COMPARE[op][0]}, {a}, {b} : {common}")
            return self.op("cmp", f"arith.cmpi {COMPARE[op][1]}, {a}, {b} : {common}")
        if op in ("logical_not", "logical_and", "logical_or"):
            bs = [self.convert(x, t, "i1") for x, t in args]
            if op == "logical_not":
                return self.op("not", f"arith.xori {bs[0]}, {self.const(True, 'i1')} : i1")
            return self.op("logic", f"arith.{'andi' if op == 'logical_and' else 'ori'} {bs[0]}, {bs[1]} : i1")
        if op == "where":
            cond = self.convert(*args[0], "i1")
            a, b = (self.convert(x, t, ct) for x, t in args[1:])
            return self.op("sel", f"arith.select {cond}, {a}, {b} : {ct}")
        xs = [self.convert(x, t, ct) for x, t in args]
        if ct in FLOAT:
            if op in FLOAT_BINARY:
                return self.f(FLOAT_BINARY[op], ct, *xs)
            if op in FLOAT_UNARY:
                return self.f(FLOAT_UNARY[op], ct, *xs)
            return self.composed(op, xs, ct, ins)
        if op in INT_BINARY:
            return self.f(INT_BINARY[op], ct, *xs)
        if op == "neg":
            return self.f("arith.subi", ct, self.const(0, ct), xs[0])
        if op == "relu":
            return self.f("arith.maxsi", ct, xs[0], self.const(0, ct))
        return self.f("math.absi", ct, xs[0])

    def iota(self, ins, ct: str) -> str:
        """``start + step * ((e' / inner) % extent)`` of this lane's flat element ``e'`` (computed in i64)."""
        ir = self.ir
        inner, extent = ins.attr("inner"), ins.attr("extent")
        q = ir.div(ir.add(self.element[0], self.element[1], "element"), inner, "q")
        coord = q if inner * extent >= self.p.numel else ir.rem(q, extent, "coord")
        value = self.op("position", f"arith.index_cast {ir.v(coord)} : index to i64")
        if ins.attr("step") != 1:
            value = self.f("arith.muli", "i64", value, self.const(ins.attr("step"), "i64"))
        if ins.attr("start") != 0:
            value = self.f("arith.addi", "i64", value, self.const(ins.attr("start"), "i64"))
        return self.convert(value, "i64", ct)

    def gather(self, ins, index) -> str:
        """The table input's element at ``index`` (an integer value and its compute type), the index
        clamped into ``[0, elements)``."""
        ir = self.ir
        k = ins.args[0]
        x = self.p.inputs[k]
        elements, stride = x.table
        i = self.convert(*index, "i64")
        i = self.f("arith.minsi", "i64", self.f("arith.maxsi", "i64", i, self.const(0, "i64")),
                   self.const(elements - 1, "i64"))
        row = self.op("row", f"arith.index_cast {i} : i64 to index")
        raw = ir.let(f"t{k}", f"memref.load %in{k}[{ir.v(ir.mul(row, stride, 'at'))}] : {self.memrefs[k]}")
        return self.load_value(raw, x.dtype)

    # ---------------------------------------------------------------- addressing
    def offset(self, strides, e, window=None, lanes: int = 1):
        """Element offset of flat element ``e`` in an operand of ``strides`` (and ``window``: its axis
        coordinate less the start, clamped into ``[0, extent - lanes]``)."""
        ir, shape = self.ir, self.p.shape
        if window is None and tuple(strides) == self.p.contiguous_strides:
            return e
        total, inner = 0, 1
        terms = []
        for axis in reversed(range(len(shape))):
            if strides[axis]:
                coord = ir.div(e, inner, "q") if inner > 1 else e
                if axis > 0:
                    coord = ir.rem(coord, shape[axis], "coord")
                if window is not None and axis == window.axis:
                    coord = ir.sub(coord, window.start, "local")
                    if window.start > 0:
                        coord = ir.max(coord, 0, "clamp")
                    if window.start + window.extent < shape[axis]:
                        coord = ir.min(coord, window.extent - lanes, "clamp")
                terms.append(ir.mul(coord, strides[axis], "part"))
            inner *= shape[axis]
        for t in terms:
            total = ir.add(total, t, "off")
        return total

    def load_input(self, k: int, e, lanes: int) -> list[str]:
        ir, x = self.ir, self.p.inputs[k]
        st, ref, name = STORAGE[x.dtype], self.memrefs[k], f"%in{k}"
        inner = x.strides[-1]
        along = x.window is not None and x.window.axis == len(self.p.shape) - 1    # windowed along the lanes
        off = self.offset(x.strides, e, x.window, lanes if along and lanes > 1 and inner == 1 else 1)
        if lanes > 1 and inner == 1:
            vec = f"vector<{lanes}x{st}>"
            v = ir.let(f"v{k}", f"vector.load {name}[{ir.v(off)}] {{alignment = {lanes * x.itemsize}}} : {ref}, {vec}")
            raws = [ir.let(f"e{k}", f"vector.extract {v}[{t}] : {st} from {vec}") for t in range(lanes)]
        elif inner == 0 or lanes == 1:
            raws = [ir.let(f"s{k}", f"memref.load {name}[{ir.v(off)}] : {ref}")] * lanes
        elif along:                                      # each lane clamped into the window on its own
            raws = [ir.let(f"g{k}", f"memref.load {name}[{ir.v(self.offset(x.strides, ir.add(e, t, 'lane'), x.window))}]"
                                    f" : {ref}") for t in range(lanes)]
        else:
            raws = [ir.let(f"g{k}", f"memref.load {name}[{ir.v(ir.add(off, t * inner, 'gather'))}] : {ref}")
                    for t in range(lanes)]
        return [self.load_value(r, x.dtype) for r in raws]

    def store_output(self, i: int, values: list[str], e, lanes: int) -> None:
        ir = self.ir
        out = self.p.output_operands()[i]
        dtype = out.dtype
        st, ref, name = STORAGE[dtype], self.memrefs[len(self.p.inputs) + i], f"%out{i}"
        stored = [self.store_value(v, dtype) for v in values]
        off = self.offset(out.strides, e)
        inner = out.strides[-1]
        if lanes == 1:
            ir.emit(f"memref.store {stored[0]}, {name}[{ir.v(off)}] : {ref}")
            return
        if inner != 1:                                   # a scatter: one store per lane
            for t, x in enumerate(stored):
                ir.emit(f"memref.store {x}, {name}[{ir.v(ir.add(off, t * inner, 'scatter'))}] : {ref}")
            return
        vec = f"vector<{lanes}x{st}>"
        v = ir.let(f"w{i}", f"vector.from_elements {', '.join(stored)} : {vec}")
        size = {"i8": 1, "bf16": 2, "f16": 2, "f32": 4, "i32": 4, "f64": 8, "i64": 8}[st]
        ir.emit(f"vector.store {v}, {name}[{ir.v(off)}] {{alignment = {lanes * size}}} : {ref}, {vec}")

    # ---------------------------------------------------------------- kernel
    def build(self) -> str:
        p, s, ir = self.p, self.s, self.ir
        args = [f"%{n}: {m}" for n, m in zip(self.names, self.memrefs)]
        n_in = len(p.inputs)
        with ir.kernel(KERNEL_NAME, args, s.threads):
            tid = ir.let("tid", "gpu.thread_id x")
            bid = ir.let("bid", "gpu.block_id x")
            start = ir.add(ir.mul(bid, s.threads, "block0"), tid, "first")
            hoisted = {k: self.load_input(k, 0, 1)[0] for k, x in enumerate(p.inputs)
                       if not any(x.strides) and not x.table}
            vectors = p.numel // s.vector
            with ir.region(f"scf.for %j = {ir.v(start)} to {ir.v(vectors)} step {ir.v(s.grid * s.threads)} {{"):
                ir.reserve("j")
                e = ir.mul("%j", s.vector, "e")
                lanes_in = {k: ([None] * s.vector if x.table else [hoisted[k]] * s.vector if k in hoisted
                                else self.load_input(k, e, s.vector)) for k, x in enumerate(p.inputs)}
                results = [[] for _ in p.outputs]
                for lane in range(s.vector):
                    self.element = (e, lane)
                    env = {k: (lanes_in[k][lane], COMPUTE[x.dtype]) for k, x in enumerate(p.inputs)}
                    for idx, ins in enumerate(p.program):
                        env[n_in + idx] = (self.instruction(ins, [env[a] for a in ins.args]), COMPUTE[ins.dtype])
                    for i, v in enumerate(p.outputs):
                        results[i].append(self.convert(env[v][0], env[v][1], COMPUTE[p.dtype_of(v)]))
                for i in range(len(p.outputs)):
                    self.store_output(i, results[i], e, s.vector)
            ir.emit("gpu.return")
        return ir.text()


class _Arith:
    """``activations.Arith`` over a pointwise emitter in one compute type (``math.tanh`` for tanh)."""

    def __init__(self, emitter: "_Emitter", ty: str):
        self.e, self.ty = emitter, ty

    def add(self, a, b):
        return self.e.f("arith.addf", self.ty, a, b)

    def sub(self, a, b):
        return self.e.f("arith.subf", self.ty, a, b)

    def mul(self, a, b):
        return self.e.f("arith.mulf", self.ty, a, b)

    def tanh(self, a):
        return self.e.f("math.tanh", self.ty, a)

    def const(self, value):
        return self.e.fconst(value, self.ty)


def build_module(problem: PointwiseProblem, schedule: PointwiseSchedule) -> str:
    """The kernel's MLIR module text (module docstring)."""
    return _Emitter(problem, schedule).build()
