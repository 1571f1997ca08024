"""MLIR text of one multi-tensor sum kernel (``nova_multi_tensor_sum``), written with the rows family's
``RowsIr`` (its FP32 math, prologue evaluation, warp shuffles and shared memory).

    gpu.func @nova_multi_tensor_sum(%table: !llvm.ptr<1>, %work: !llvm.ptr<1>)

``table`` is the argument table (``sum_problem.py``), ``work`` the workspace: the partial-sum slots and
the completion counter.  CTA ``b`` walks the chunks ``[b K, (b + 1) K)`` of the global chunk order in
turn, carrying the row ``t`` it used last (found by a forward scan from the row of its first chunk, a
table word) and each thread's running sum.  In a chunk, thread ``i`` owns the vectors at ``(c - chunk_begin) * chunk + u *
threads * vector + i * vector`` (``u < unroll``): whole vectors are loaded for every ``u`` before the
first add, a vector straddling the tensor's end element by element; the tensor's entry (its row's
``entry`` word, an ``scf.index_switch``) evaluates the prologue per element, adds the summed value to the
thread's sum in element order and writes the stored value.  When the row changes, and after the last
chunk, the CTA adds its threads' sums (a fixed xor-shuffle tree in each warp, then the warps in order
through shared memory) and thread 0 writes the CTA's partial for that tensor to slot ``b + t``.

A store-only entry (``SumEntry.reduces`` False) only writes its stored value: nothing is added for
its tensors, and a rule of store-only entries alone (a multi-tensor map: autocast's parameter casts)
ends there -- no partials, no ticket, no last CTA.

Then thread 0 fences (``membar.gl``) and takes a ticket from the i32 completion counter
(``atom.global.add``): the CTA that takes the last one fences again and adds each tensor's partials --
a warp per tensor, lane ``l`` the slots ``l, l + 32, ...`` in order, then the xor tree -- rounds the
sum to its element type, applies the entry's epilogue (each op rounded to its type) and writes the
result; it resets the counter to zero for the next launch.  Every sum is added in the same order on
every run whichever CTA finishes last: no float atomics, the same bits.
"""
from __future__ import annotations

from nova.codegen.builder import SMEM
from nova.kernels.optimizer.schedule import MultiTensorSchedule
from nova.kernels.optimizer.sum_problem import HEADER, SumEntry, SumRule, first_row_word
from nova.kernels.rows.emit import RowsIr, evaluate
from nova.kernels.rows.prologue import Prologue

KERNEL_NAME = "nova_multi_tensor_sum"
PTR = "!llvm.ptr<1>"
PARAMS = ("table", "work")
BYTES = {"f32": 4, "bf16": 2, "f16": 2}


class _SumEmitter:
    def __init__(self, rule: SumRule, schedule: MultiTensorSchedule):
        self.rule, self.s = rule, schedule
        self.ir = RowsIr()
        self.ir.reserve(*PARAMS)
        self.fields = rule.fields()
        self.warps = schedule.threads // 32

    # ---------------------------------------------------------------- table and memory
    def i64(self, x) -> str:
        return self.ir.pure("w", f"arith.index_cast {self.ir.v(x)} : index to i64")

    def index(self, word: str) -> str:
        return self.ir.pure("n", f"arith.index_cast {word} : i64 to index")

    def gep(self, base: str, offset, elem: str) -> str:
        return self.ir.pure("ptr", f"llvm.getelementptr {base}[{self.i64(offset)}] : ({PTR}, i64) -> {PTR}, {elem}")

    def load(self, ptr: str, ty: str, align: int, volatile: bool = False) -> str:
        return self.ir.let("ld", f"llvm.load {'volatile ' if volatile else ''}{ptr} {{alignment = {align} : i64}} : "
                                 f"{PTR} -> {ty}")

    def store(self, value: str, ptr: str, ty: str, align: int) -> None:
        self.ir.emit(f"llvm.store {value}, {ptr} {{alignment = {align} : i64}} : {ty}, {PTR}")

    def word(self, index) -> str:
        return self.load(self.gep("%table", index, "i64"), "i64", 8)

    def row_word(self, row, name: str) -> str:
        base = self.ir.add(len(HEADER), self.ir.mul(row, len(self.fields), "row"), "row_base")
        return self.word(self.ir.add(base, self.fields.index(name), "field"))

    def pointer(self, row, name: str) -> str:
        return self.ir.pure("p", f"llvm.inttoptr {self.row_word(row, name)} : i64 to {PTR}")

    def fence(self) -> None:
        """``membar.gl``: this thread's writes before it are seen GPU-wide before its writes after it."""
        self.ir.emit('llvm.inline_asm has_side_effects "membar.gl;", "" : () -> ()')

    # ---------------------------------------------------------------- values
    def loaded(self, ptr: str, at, dtype: str, count: int) -> list[str]:
        """``count`` elements of ``dtype`` from element ``at`` of ``ptr``, as FP32 values."""
        ir = self.ir
        p = self.gep(ptr, at, dtype)
        if count == 1:
            x = self.load(p, dtype, BYTES[dtype])
            return [x if dtype == "f32" else ir.pure("xf", f"arith.extf {x} : {dtype} to f32")]
        vty = f"vector<{count}x{dtype}>"
        x = self.load(p, vty, count * BYTES[dtype])
        if dtype != "f32":
            x = ir.pure("xf", f"arith.extf {x} : {vty} to vector<{count}xf32>")
        return [ir.pure("e", f"vector.extract {x}[{j}] : f32 from vector<{count}xf32>") for j in range(count)]

    def written(self, ptr: str, at, dtype: str, values: list[str]) -> None:
        """FP32 ``values`` rounded to ``dtype``, written from element ``at`` of ``ptr``."""
        ir = self.ir
        p = self.gep(ptr, at, dtype)
        if len(values) == 1:
            x = values[0] if dtype == "f32" else ir.pure("st", f"arith.truncf {values[0]} : f32 to {dtype}")
            self.store(x, p, dtype, BYTES[dtype])
            return
        n = len(values)
        x = ir.let("pk", f"vector.from_elements {', '.join(values)} : vector<{n}xf32>")
        if dtype != "f32":
            x = ir.pure("pk_t", f"arith.truncf {x} : vector<{n}xf32> to vector<{n}x{dtype}>")
        self.store(x, p, f"vector<{n}x{dtype}>", n * BYTES[dtype])

    def elements(self, entry: SumEntry, ptrs: dict, at, count: int, acc: str) -> str:
        """``count`` consecutive elements from ``at`` (every operand's loads first), added to ``acc``."""
        operands = [self.loaded(ptrs[f"in{k}"], at, dt, count) for k, dt in enumerate(entry.dtypes)]
        return self.combine(entry, ptrs, at, operands, count, acc)

    def entry_chunk(self, entry: SumEntry, ptrs: dict, starts: list, numel: str, acc: str) -> str:
        """One chunk of a tensor summed as ``entry``: whole vectors when every one lies inside the tensor,
        else each vector whole where it fits and element by element where it straddles the end."""
        ir, v = self.ir, self.s.vector
        whole = ir.pure("whole", f"arith.cmpi sle, {ir.v(ir.add(starts[-1], v, 'last'))}, {numel} : index")
        res = ir.fresh("chunk_sum")
        ir.emit(f"{res} = scf.if {whole} -> (f32) {{")
        with ir.scope():
            out = acc
            loaded = [(e, [self.loaded(ptrs[f"in{k}"], e, dt, v) for k, dt in enumerate(entry.dtypes)])
                      for e in starts]                              # every load issued before the first add
            for e, operands in loaded:
                out = self.combine(entry, ptrs, e, operands, v, out)
            ir.emit(f"scf.yield {out} : f32")
        with ir.region("} else {", close="}"):
            out = acc
            for e in starts:
                end = ir.add(e, v, "end")
                fits = ir.pure("fits", f"arith.cmpi sle, {ir.v(end)}, {numel} : index")
                part = ir.fresh("part_sum")
                ir.emit(f"{part} = scf.if {fits} -> (f32) {{")
                with ir.scope():
                    ir.emit(f"scf.yield {self.elements(entry, ptrs, e, v, out)} : f32")
                with ir.region("} else {", close="}"):
                    with ir.loop(ir.sub(ir.max(ir.min(end, numel, "stop"), e, "stop"), e, "count"), [out], "k") \
                            as (k, (carried,), state):
                        state["out"] = [self.elements(entry, ptrs, ir.add(e, k, "ek"), 1, carried)]
                    ir.emit(f"scf.yield {state['results'][0]} : f32")
                out = part
            ir.emit(f"scf.yield {out} : f32")
        return res

    def combine(self, entry: SumEntry, ptrs: dict, at, operands: list, count: int, acc: str) -> str:
        """The already loaded ``operands`` (one list of ``count`` values each) evaluated and added."""
        ir = self.ir
        index = entry.prologue.reduce[0][0] if entry.reduces else None
        stored = []
        for j in range(count):
            vals = evaluate(ir, entry.prologue, {f"in{k}": operands[k][j] for k in range(len(entry.dtypes))})
            if index is not None:                                   # a store-only entry adds nothing
                acc = ir.fadd(acc, vals[index], "acc")
            if entry.stored:
                stored.append(vals[entry.prologue.store[0][0]])
        if entry.stored:
            self.written(ptrs["st0"], at, entry.stored, stored)
        return acc

    def switch(self, entry_index: str, body, default: str) -> str:
        """``body(k, entry) -> f32`` for the row's entry (``scf.index_switch``; inline for one entry)."""
        ir = self.ir
        if len(self.rule.entries) == 1:
            return body(0, self.rule.entries[0])
        res = ir.fresh("by_entry")
        ir.emit(f"{res} = scf.index_switch {entry_index} -> f32")
        for k, entry in enumerate(self.rule.entries):
            with ir.region(f"case {k} {{"):
                ir.emit(f"scf.yield {body(k, entry)} : f32")
        with ir.region("default {"):
            ir.emit(f"scf.yield {default} : f32")
        return res

    # ---------------------------------------------------------------- the CTA's pass
    def scan(self, c: str, t: str, first: str) -> str:
        """The row holding chunk ``c``, scanning forward from ``max(t, first)`` (``first``: the row of the
        CTA's first chunk, from the table)."""
        ir = self.ir
        start = ir.max(t, first, "from")
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

    def chunk(self, c: str, row: str, acc: str) -> str:
        ir, s = self.ir, self.s
        entry = self.index(self.row_word(row, "entry"))
        numel = self.index(self.row_word(row, "numel"))
        begin = self.index(self.row_word(row, "chunk_begin"))
        ptrs = {name: self.pointer(row, name) for name in self.rule.pointers() if name != "out"}
        base = ir.add(ir.mul(ir.sub(c, begin, "local"), s.chunk, "chunk0"), ir.mul(self.tid, s.vector, "lane0"), "e0")
        starts = [ir.add(base, u * s.threads * s.vector, "e") for u in range(s.unroll)]
        return self.switch(entry, lambda k, e: self.entry_chunk(e, ptrs, starts, numel, acc), acc)

    def warp_sum(self, x: str) -> str:
        """The sum of ``x`` over the warp's lanes, in every lane (a fixed xor tree)."""
        ir = self.ir
        for offset in (1, 2, 4, 8, 16):
            x = ir.fadd(x, ir.shfl_xor(x, offset), "red")
        return x

    def flush(self, acc: str, row: str) -> None:
        """The CTA's sum of ``acc`` (warps in order) written by thread 0 to slot ``bid + row``."""
        ir = self.ir
        x = self.warp_sum(acc)
        ir.guarded(ir.cmp("eq", self.lane, 0, "wlead"),
                   lambda: ir.emit(f"memref.store {x}, {self.sm}[{ir.v(self.warp)}] : {self.smty}"))
        ir.emit("gpu.barrier")

        def write():
            total = None
            for w in range(self.warps):
                v = ir.let("wv", f"memref.load {self.sm}[{ir.v(w)}] : {self.smty}")
                total = v if total is None else ir.fadd(total, v, "cta")
            self.written("%work", ir.add(self.bid, row, "slot"), "f32", [total])
        ir.guarded(ir.cmp("eq", self.tid, 0, "first"), write)
        ir.emit("gpu.barrier")

    # ---------------------------------------------------------------- the last CTA
    def epilogue(self, entry: SumEntry, total: str) -> str:
        """The sum rounded to its type, then each epilogue op rounded to its own."""
        ops, prev = [], "r"
        for op, dtype in ((f"cast_{entry.total}", None),) + entry.epilogue:
            if op.startswith("cast_"):
                ops.append((op, (prev,)))
            else:
                ops.append((op, (prev,)))
                prev = f"%{len(ops) - 1}"
                ops.append((f"cast_{dtype}", (prev,)))
            prev = f"%{len(ops) - 1}"
        return evaluate(self.ir, Prologue(tuple(ops)), {"r": total})[-1]

    def final(self, tensors: str, per_cta: str) -> None:
        """A warp per tensor adds its slots in order; lane 0 writes the entry's result."""
        ir = self.ir
        t = ir.fresh("t")
        with ir.region(f"scf.for {t} = {self.warp} to {tensors} step {ir.v(self.warps)} {{"):
            ir.reserve(t.lstrip("%"))
            begin = self.index(self.row_word(t, "chunk_begin"))
            end = self.index(self.row_word(t, "chunk_end"))
            met = ir.pure("met", f"arith.cmpi sgt, {end}, {begin} : index")
            b0 = ir.div(begin, per_cta, "b0")
            b1 = ir.div(ir.sub(ir.max(end, 1, "end1"), 1, "last_chunk"), per_cta, "b1")
            count = ir.select(met, ir.add(ir.sub(b1, b0, "span"), 1, "span1"), 0, hint="slots")
            first = ir.add(b0, t, "first_slot")
            j, inner, res = ir.fresh("j"), ir.fresh("j_acc"), ir.fresh("j_sum")
            ir.reserve(j.lstrip("%"), inner.lstrip("%"))
            with ir.region(f"{res} = scf.for {j} = {self.lane} to {count} step {ir.v(32)} "
                           f"iter_args({inner} = {ir.f(0.0)}) -> (f32) {{"):
                (x,) = self.loaded_volatile(ir.add(first, j, "slot"))
                ir.emit(f"scf.yield {ir.fadd(inner, x, 'acc')} : f32")
            total = self.warp_sum(res)
            entry = self.index(self.row_word(t, "entry"))
            out = self.pointer(t, "out")

            def result(k, e):
                if not e.reduces:                                   # store-only: no result
                    return total
                r = self.epilogue(e, total)
                ir.guarded(ir.cmp("eq", self.lane, 0, "lead"), lambda: self.written(out, 0, e.out, [r]))
                return r
            self.switch(entry, result, total)

    def loaded_volatile(self, slot) -> list[str]:
        """A partial written by another CTA (volatile: not from this SM's L1)."""
        return [self.load(self.gep("%work", slot, "f32"), "f32", 4, volatile=True)]

    # ---------------------------------------------------------------- kernel
    def build(self) -> str:
        ir, s = self.ir, self.s
        ir.emit(f"// Nova multi-tensor sum: {self.rule.describe()}; vec {s.vector}, {s.threads} threads, unroll "
                f"{s.unroll}, grid {s.grid}")
        ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        with ir.kernel(KERNEL_NAME, [f"%{p}: {PTR}" for p in PARAMS], s.threads, maxnreg=s.max_regs):
            self.tid = ir.let("tid", "gpu.thread_id x")
            self.bid = ir.let("bid", "gpu.block_id x")
            self.lane = ir.rem(self.tid, 32, "lane")
            self.warp = ir.div(self.tid, 32, "warp")
            self.sm = ir.smem_f32(0, self.warps + 1)
            self.smty = f"memref<{self.warps + 1}xf32, #smem>"
            tensors = self.index(self.word(HEADER.index("tensors")))
            chunks = self.index(self.word(HEADER.index("chunks")))
            per_cta = self.index(self.word(HEADER.index("per_cta")))
            counter = self.index(self.word(HEADER.index("counter")))
            c0 = ir.mul(self.bid, per_cta, "c0")
            first = self.index(self.word(ir.add(ir.add(first_row_word(self.rule, 0, 0), self.bid, "cta_word"),
                                                ir.mul(tensors, len(self.fields), "rows_words"), "first_word")))
            c1 = ir.min(ir.add(c0, per_cta, "c_end"), chunks, "c1")
            c, row, acc, walk = ir.fresh("c"), ir.fresh("row_c"), ir.fresh("acc_c"), ir.fresh("walk")
            ir.reserve(c.lstrip("%"), row.lstrip("%"), acc.lstrip("%"))
            with ir.region(f"{walk}:2 = scf.for {c} = {c0} to {c1} step {ir.v(1)} iter_args({row} = {ir.v(-1)}, "
                           f"{acc} = {ir.f(0.0)}) -> (index, f32) {{"):
                found = self.scan(c, row, first)
                changed = ir.and_(ir.cmp("ne", found, row, "moved"), ir.cmp("sge", row, 0, "had_row"))
                kept = ir.fresh("kept")
                ir.emit(f"{kept} = scf.if {changed} -> (f32) {{")
                with ir.scope():
                    if self.rule.reduces:
                        self.flush(acc, row)
                    ir.emit(f"scf.yield {ir.f(0.0)} : f32")
                with ir.region("} else {", close="}"):
                    ir.emit(f"scf.yield {acc} : f32")
                ir.emit(f"scf.yield {found}, {self.chunk(c, found, kept)} : index, f32")
            if self.rule.reduces:                       # (every entry store-only: no partials, no last CTA)
                self.finish(walk, tensors, per_cta, counter)
            ir.emit("gpu.return")
        return ir.text()

    def finish(self, walk: str, tensors: str, per_cta: str, counter: str) -> None:
        """The CTA's last partial, then the completion ticket; the CTA that takes the last one adds
        every tensor's partials (``final``) and resets the counter."""
        ir, s = self.ir, self.s
        ir.guarded(ir.cmp("sge", f"{walk}#0", 0, "walked"), lambda: self.flush(f"{walk}#1", f"{walk}#0"))
        count = self.gep("%work", counter, "i32")

        def ticket():
            self.fence()
            old = ir.let("ticket", f"llvm.atomicrmw add {count}, {ir.const(1, 'i32')} acq_rel : {PTR}, i32")
            last = ir.pure("last", f"arith.cmpi eq, {old}, {ir.const(s.grid - 1, 'i32')} : i32")
            ir.emit(f"memref.store {ir.fsel(last, ir.f(1.0), ir.f(0.0))}, {self.sm}[{ir.v(self.warps)}] : "
                    f"{self.smty}")
        ir.guarded(ir.cmp("eq", self.tid, 0, "first"), ticket)
        ir.emit("gpu.barrier")
        flag = ir.let("flag", f"memref.load {self.sm}[{ir.v(self.warps)}] : {self.smty}")

        def last_cta():
            self.fence()
            ir.guarded(ir.cmp("eq", self.tid, 0, "first"),
                       lambda: self.store(ir.const(0, "i32"), count, "i32", 4))
            self.final(tensors, per_cta)
        ir.guarded(ir.fcmp("oeq", flag, ir.f(1.0), "is_last"), last_cta)


def build_module(rule: SumRule, schedule: MultiTensorSchedule) -> str:
    """The kernel's MLIR module text (module docstring)."""
    return _SumEmitter(rule, schedule).build()


def smem_bytes(schedule: MultiTensorSchedule) -> int:
    """Dynamic shared memory: one f32 a warp (the CTA's sums) and the last-CTA flag."""
    return 4 * (schedule.threads // 32 + 1)
