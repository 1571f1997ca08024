"""MLIR text of one multi-tensor optimizer kernel (``nova_multi_tensor``), written with the ``Ir`` scaffold.

    gpu.func @nova_multi_tensor(%table: !llvm.ptr<1>, %hyper: !llvm.ptr<1>)

``table`` is the argument table (``table.py``: tensors, chunks, one row per tensor), ``hyper`` the
optimizer group's f64 hyper-parameter vector; both are read at run time, so neither the tensors nor
any number is part of the kernel.  CTA ``b`` walks the global chunks ``b, b + grid, ...`` below the
table's chunk count, carrying the row ``t`` it used last: a forward scan (``scf.while``) moves ``t`` to
the row whose ``[chunk_begin, chunk_end)`` holds the chunk.  Scalars that depend on the tensor (Adam's
bias corrections from its step count, ``pow`` in f64 like the reference's) are recomputed only when
``t`` changes and carried with it.

In a chunk, thread ``i`` owns the vectors at ``e_u = (c - chunk_begin) * chunk + u * threads * vector + i *
vector``, ``u < unroll``.  When all of them lie inside the tensor it loads every operand's vectors
first (16-byte ``ld.global.v4``), then computes and stores; otherwise each vector is loaded whole
where it fits and element by element where it straddles the end.  Pointers are 64-bit table words
turned into global pointers (``llvm.inttoptr``), so the loads and stores are LLVM dialect ops.

With ``grad_scale`` the per-tensor scalars also hold the gradient's scale (read from its table pointer
when ``t`` changes): each gradient element is multiplied by it and rounded to the storage type (the IR's
``mul``) before the update reads it; with ``grad_out`` that scaled gradient is written too.

Math per element runs in f32 for f32/bf16/f16 storage (f64 in f64), the per-tensor and per-group
scalars computed in f64 from the hyper-parameters and cast once, as ``ref_adamw``/``ref_sgd`` do
with their 0-d f64 tensors; the square root is IEEE (``__nv_fsqrt_rn``, not the approximate one).
"""
from __future__ import annotations

from nova.codegen.builder import Ir
from nova.kernels.optimizer.problem import UpdateRule
from nova.kernels.optimizer.schedule import MultiTensorSchedule
from nova.kernels.optimizer.table import HEADER, row_fields, row_words

KERNEL_NAME = "nova_multi_tensor"
PTR = "!llvm.ptr<1>"
STORAGE = {"f64": "f64", "f32": "f32", "bf16": "bf16", "f16": "f16"}
COMPUTE = {"f64": "f64", "f32": "f32", "bf16": "f32", "f16": "f32"}
STEP = {"f32": "f32", "f64": "f64", "i64": "i64", "i32": "i32"}
BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4}
SQRT = {"f32": "__nv_fsqrt_rn", "f64": "__nv_dsqrt_rn"}
PARAMS = ("table", "hyper")


class _Emitter:
    def __init__(self, rule: UpdateRule, schedule: MultiTensorSchedule):
        self.rule, self.s = rule, schedule
        self.ir = Ir(reserved=PARAMS)
        self.st, self.ct = STORAGE[rule.dtype], COMPUTE[rule.dtype]
        self.fields = row_fields(rule)

    # ---------------------------------------------------------------- scalars and memory
    def f(self, op: str, ty: str, *xs) -> str:
        return self.ir.pure("t", f"{op} {', '.join(xs)} : {ty}")

    def fconst(self, value: float, ty: str) -> str:
        return self.ir.const(float(value), ty)

    def i64(self, x) -> str:
        return self.ir.pure("w", f"arith.index_cast {self.ir.v(x)} : index to i64")

    def index(self, word: str) -> str:
        return self.ir.pure("n", f"arith.index_cast {word} : i64 to index")

    def gep(self, base: str, offset, elem: str) -> str:
        return self.ir.pure("ptr", f"llvm.getelementptr {base}[{self.i64(offset)}] : ({PTR}, i64) -> {PTR}, {elem}")

    def load(self, ptr: str, ty: str, align: int) -> str:
        return self.ir.let("ld", f"llvm.load {ptr} {{alignment = {align} : i64}} : {PTR} -> {ty}")

    def store(self, value: str, ptr: str, ty: str, align: int) -> None:
        self.ir.emit(f"llvm.store {value}, {ptr} {{alignment = {align} : i64}} : {ty}, {PTR}")

    def word(self, index) -> str:
        """The i64 table word at ``index`` (an int or an index SSA value)."""
        return self.load(self.gep("%table", index, "i64"), "i64", 8)

    def row_word(self, row, name: str) -> str:
        base = self.ir.add(len(HEADER), self.ir.mul(row, row_words(self.rule), "row"), "row_base")
        return self.word(self.ir.add(base, self.fields.index(name), "field"))

    def pointer(self, row, name: str) -> str:
        return self.ir.pure("p", f"llvm.inttoptr {self.row_word(row, name)} : i64 to {PTR}")

    def to_compute(self, x: str, dtype: str) -> str:
        """A storage-typed scalar as the compute type."""
        return x if STORAGE[dtype] == self.ct else self.f("arith.extf", f"{STORAGE[dtype]} to {self.ct}", x)

    def from_f64(self, x: str, ty: str) -> str:
        return x if ty == "f64" else self.ir.pure("s", f"arith.truncf {x} : f64 to {ty}")

    def sqrt(self, x: str, ty: str) -> str:
        return self.ir.pure("sqrt", f"llvm.call @{SQRT[ty]}({x}) : ({ty}) -> {ty}")

    # ---------------------------------------------------------------- the update's scalars
    def hyper(self) -> dict[str, str]:
        """The hyper-parameters (f64, loaded once per thread) by name."""
        return {name: self.load(self.gep("%hyper", k, "f64"), "f64", 8) for k, name in enumerate(self.rule.hyper)}

    def group_scalars(self, h: dict) -> dict[str, str]:
        """Scalars of the whole group in the compute type, each computed in f64 first (``ref_*``'s 0-d
        f64 tensors) and cast once."""
        ct, f, one = self.ct, self.f, self.fconst(1.0, "f64")
        out = {}
        if self.rule.op == "adamw":
            out["beta2"] = self.from_f64(h["beta2"], ct)
            out["one_minus_beta2"] = self.from_f64(f("arith.subf", "f64", one, h["beta2"]), ct)
            out["eps"] = self.from_f64(h["eps"], ct)
            out["weight_decay"] = self.from_f64(h["weight_decay"], ct)
            out["decay"] = self.from_f64(f("arith.subf", "f64", one, f("arith.mulf", "f64", h["lr"], h["weight_decay"])), ct)
            # ref_adamw: exp_avg.lerp(grad, (1 - beta1).to(exp_avg.dtype)); ATen's lerp picks its formula by |w| < 0.5
            weight = f("arith.subf", "f64", one, h["beta1"])
            if self.rule.dtype != "f64":
                weight = self.ir.pure("w_st", f"arith.truncf {weight} : f64 to {self.st}")
                weight = self.to_compute(weight, self.rule.dtype)
            out["weight"] = weight
            out["one_minus_weight"] = f("arith.subf", ct, self.fconst(1.0, ct), weight)
            out["weight_small"] = self.ir.pure("small", f"arith.cmpf olt, {f('math.absf', ct, weight)}, "
                                                        f"{self.fconst(0.5, ct)} : {ct}")
        else:
            out["lr"] = self.from_f64(h["lr"], ct)
            out["momentum"] = self.from_f64(h["momentum"], ct)
            out["one_minus_dampening"] = self.from_f64(f("arith.subf", "f64", one, h["dampening"]), ct)
            out["weight_decay"] = self.from_f64(h["weight_decay"], ct)
        return out

    def tensor_scalar_names(self) -> list[str]:
        """The per-tensor scalars carried with the row: Adam's two from its step count, the gradient's scale."""
        return (["step_size", "bc2"] if self.rule.op == "adamw" else []) + (["scale"] if self.rule.grad_scale else [])

    def tensor_scalars(self, h: dict, row) -> list[str]:
        """The per-tensor scalars of row ``row``: Adam's from its step count t, [lr / (1 - beta1^t),
        sqrt(1 - beta2^t)], then the gradient's scale (grad_scale) in the compute type."""
        scale = []
        if self.rule.grad_scale:
            raw = self.load(self.pointer(row, "grad_scale"), self.st, BYTES[self.rule.dtype])
            scale = [self.to_compute(raw, self.rule.dtype)]
        if self.rule.op != "adamw":
            return scale
        return self.adam_scalars(h, row) + scale

    def adam_scalars(self, h: dict, row) -> list[str]:
        """Adam's per-tensor scalars from its step count t: [lr / (1 - beta1^t), sqrt(1 - beta2^t)]."""
        f, one = self.f, self.fconst(1.0, "f64")
        raw = self.load(self.pointer(row, "step"), STEP[self.rule.step_dtype], BYTES[self.rule.step_dtype])
        sd = self.rule.step_dtype
        t = raw if sd == "f64" else self.ir.pure("t64", f"arith.extf {raw} : f32 to f64") if sd == "f32" else \
            self.ir.pure("t64", f"arith.sitofp {raw} : {sd} to f64")
        bc1 = f("arith.subf", "f64", one, self.power(h["beta1"], t))
        bc2_sqrt = self.sqrt(f("arith.subf", "f64", one, self.power(h["beta2"], t)), "f64")
        return [self.from_f64(f("arith.divf", "f64", h["lr"], bc1), self.ct), self.from_f64(bc2_sqrt, self.ct)]

    def power(self, base: str, exponent: str) -> str:
        """``base ** exponent`` in f64 as exp(exponent * log(base)) (libdevice's inlined exp and log; its
        pow is an out-of-line call whose saved registers ptxas spills)."""
        return self.f("math.exp", "f64", self.f("arith.mulf", "f64", exponent, self.f("math.log", "f64", base)))

    # ---------------------------------------------------------------- one element
    def update(self, x: dict, g: dict, per_tensor: list[str]) -> dict:
        """The new values (compute type) of one element from the values ``x`` it reads."""
        ct, f, r = self.ct, self.f, self.rule
        grad, param = x["grad"], x["param"]
        scaled = {}
        if r.grad_scale:                        # the IR's mul: the product rounded to the storage type
            grad = f("arith.mulf", ct, grad, per_tensor[-1])
            if self.st != ct:
                grad = self.to_compute(self.from_compute(grad), r.dtype)
            scaled = {"grad": grad} if r.grad_out else {}
        if r.maximize:
            grad = f("arith.negf", ct, grad)
        if r.op == "adamw":
            step_size, bc2_sqrt = per_tensor[:2]
            if r.decoupled:
                param = f("arith.mulf", ct, param, g["decay"])
            else:
                grad = f("arith.addf", ct, grad, f("arith.mulf", ct, g["weight_decay"], param))
            m = x["exp_avg"]
            diff = f("arith.subf", ct, grad, m)
            small = f("arith.addf", ct, m, f("arith.mulf", ct, g["weight"], diff))
            large = f("arith.subf", ct, grad, f("arith.mulf", ct, diff, g["one_minus_weight"]))
            m = self.ir.pure("lerp", f"arith.select {g['weight_small']}, {small}, {large} : {ct}")
            v = f("arith.addf", ct, f("arith.mulf", ct, x["exp_avg_sq"], g["beta2"]),
                  f("arith.mulf", ct, f("arith.mulf", ct, grad, grad), g["one_minus_beta2"]))
            denom = f("arith.addf", ct, f("arith.divf", ct, self.sqrt(v, ct), bc2_sqrt), g["eps"])
            param = f("arith.subf", ct, param, f("arith.mulf", ct, step_size, f("arith.divf", ct, m, denom)))
            return {"param": param, "exp_avg": m, "exp_avg_sq": v, **scaled}
        grad = f("arith.addf", ct, grad, f("arith.mulf", ct, g["weight_decay"], param))
        out = {}
        if r.with_momentum:
            if r.first_step:
                buf = grad
            else:
                buf = f("arith.addf", ct, f("arith.mulf", ct, x["momentum_buffer"], g["momentum"]),
                        f("arith.mulf", ct, grad, g["one_minus_dampening"]))
            grad = f("arith.addf", ct, grad, f("arith.mulf", ct, g["momentum"], buf)) if r.nesterov else buf
            out["momentum_buffer"] = buf
        out["param"] = f("arith.subf", ct, param, f("arith.mulf", ct, g["lr"], grad))
        return {**out, **scaled}

    # ---------------------------------------------------------------- a chunk
    def vectors(self, ptrs: dict, starts: list, g: dict, per_tensor: list[str]) -> None:
        """Whole vectors at each of ``starts``: every load issued before the first store."""
        ir, v, st = self.ir, self.s.vector, self.st
        vec = f"vector<{v}x{st}>"
        align = v * BYTES[self.rule.dtype]
        loaded = [{name: self.load(self.gep(ptrs[name], e, st), vec, align) for name in self.rule.reads()}
                  for e in starts]
        for e, raw in zip(starts, loaded):
            lanes = []
            for lane in range(v):
                x = {name: self.to_compute(ir.pure("e", f"vector.extract {raw[name]}[{lane}] : {st} from {vec}"),
                                           self.rule.dtype) for name in self.rule.reads()}
                lanes.append(self.update(x, g, per_tensor))
            for name in self.rule.writes():
                values = [self.from_compute(lane[name]) for lane in lanes]
                packed = ir.let("vout", f"vector.from_elements {', '.join(values)} : {vec}")
                self.store(packed, self.gep(ptrs[f"{name}_out"], e, st), vec, align)

    def from_compute(self, x: str) -> str:
        return x if self.st == self.ct else self.ir.pure("y", f"arith.truncf {x} : {self.ct} to {self.st}")

    def elements(self, ptrs: dict, start, stop, g: dict, per_tensor: list[str]) -> None:
        """Element by element from ``start`` to ``stop`` (the end of a tensor inside one vector)."""
        ir, st, size = self.ir, self.st, BYTES[self.rule.dtype]
        k = ir.fresh("k")
        with ir.region(f"scf.for {k} = {ir.v(start)} to {ir.v(stop)} step {ir.v(1)} {{"):
            x = {name: self.to_compute(self.load(self.gep(ptrs[name], k, st), st, size), self.rule.dtype)
                 for name in self.rule.reads()}
            new = self.update(x, g, per_tensor)
            for name in self.rule.writes():
                self.store(self.from_compute(new[name]), self.gep(ptrs[f"{name}_out"], k, st), st, size)

    def chunk(self, c: str, row: str, g: dict, per_tensor: list[str]) -> None:
        ir, s = self.ir, self.s
        ptrs = {name: self.pointer(row, name) for name in self.rule.pointers() if name not in self.rule.scalars()}
        numel = self.index(self.row_word(row, "numel"))
        begin = self.index(self.row_word(row, "chunk_begin"))
        base = ir.add(ir.mul(ir.sub(c, begin, "local"), s.chunk, "chunk0"), ir.mul("%tid", s.vector, "lane0"), "e0")
        starts = [ir.add(base, u * s.threads * s.vector, "e") for u in range(s.unroll)]
        last = ir.add(starts[-1], s.vector, "last")
        whole = ir.pure("whole", f"arith.cmpi sle, {ir.v(last)}, {numel} : index")
        ir.emit(f"scf.if {whole} {{")
        with ir.scope():
            self.vectors(ptrs, starts, g, per_tensor)
        with ir.region("} else {", close="}"):
            for e in starts:
                end = ir.add(e, s.vector, "end")
                fits = ir.pure("fits", f"arith.cmpi sle, {ir.v(end)}, {numel} : index")
                ir.emit(f"scf.if {fits} {{")
                with ir.scope():
                    self.vectors(ptrs, [e], g, per_tensor)
                with ir.region("} else {", close="}"):
                    self.elements(ptrs, e, ir.min(end, numel, "stop"), g, per_tensor)

    # ---------------------------------------------------------------- kernel
    def scan(self, c: str, t: str) -> str:
        """The row holding chunk ``c``, scanning forward from ``max(t, 0)``."""
        ir = self.ir
        start = ir.max(t, 0, "from")
        w, w2, found = ir.fresh("w_row"), ir.fresh("w_next"), ir.fresh("row")
        ir.emit(f"{found} = scf.while ({w} = {ir.v(start)}) : (index) -> index {{")
        with ir.scope():
            end = self.index(self.row_word(w, "chunk_end"))
            more = ir.pure("more", f"arith.cmpi sge, {c}, {end} : index")
            ir.emit(f"scf.condition({more}) {w} : index")
        ir.emit("} do {")
        with ir.scope():
            ir.emit(f"^bb0({w2}: index):")
            ir.emit(f"scf.yield {ir.add(w2, 1, 'next')} : index")
        ir.emit("}")
        return found

    def build(self) -> str:
        ir, s, ct = self.ir, self.s, self.ct
        with ir.kernel(KERNEL_NAME, [f"%{p}: {PTR}" for p in PARAMS], s.threads):
            ir.reserve("tid")
            ir.emit("%tid = gpu.thread_id x")
            bid = ir.let("bid", "gpu.block_id x")
            chunks = self.index(self.word(HEADER.index("chunks")))
            h = self.hyper()
            g = self.group_scalars(h)
            names = self.tensor_scalar_names()
            c, t = ir.fresh("c"), ir.fresh("t")
            carried = [(t, ir.v(-1), "index")]
            carried += [(ir.fresh(name), self.fconst(0.0, ct), ct) for name in names]
            result = ir.fresh("walk")
            iter_args = ", ".join(f"{n} = {init}" for n, init, _ in carried)
            types = ", ".join(ty for _, _, ty in carried)
            with ir.region(f"{result}:{len(carried)} = scf.for {c} = {bid} to {chunks} step {ir.v(s.grid)} "
                           f"iter_args({iter_args}) -> ({types}) {{"):
                row = self.scan(c, t)
                per_tensor, yielded = [], [row]
                if names:
                    cts = ", ".join([ct] * len(names))
                    same = ir.pure("same", f"arith.cmpi eq, {row}, {t} : index")
                    scalars = ir.fresh("scalars")
                    ir.emit(f"{scalars}:{len(names)} = scf.if {same} -> ({cts}) {{")
                    with ir.scope():
                        ir.emit(f"scf.yield {', '.join(name for name, _, _ in carried[1:])} : {cts}")
                    with ir.region("} else {", close="}"):
                        fresh = self.tensor_scalars(h, row)
                        ir.emit(f"scf.yield {', '.join(fresh)} : {cts}")
                    per_tensor = [f"{scalars}#{k}" for k in range(len(names))]
                    yielded += per_tensor
                self.chunk(c, row, g, per_tensor)
                ir.emit(f"scf.yield {', '.join(yielded)} : {types}")
            ir.emit("gpu.return")
        text = ir.text()
        decls = "".join(f"    llvm.func @{SQRT[ty]}({ty}) -> {ty}\n" for ty in sorted({self.ct, "f64"}))
        anchor = "  gpu.module @nova_kernels {\n"
        return text.replace(anchor, anchor + decls, 1)


def build_module(rule: UpdateRule, schedule: MultiTensorSchedule) -> str:
    """The kernel's MLIR module text (module docstring)."""
    return _Emitter(rule, schedule).build()
