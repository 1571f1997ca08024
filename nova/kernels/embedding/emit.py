"""The embedding kernels' MLIR builders: ``(EmbeddingProblem, EmbeddingSchedule, role) -> MLIR text``.

``gather``: thread ``tid`` of CTA ``bx`` copies output row ``bx * rows_per_cta + tid / threads_per_row``,
lane ``tid % threads_per_row`` of it: the row's index is read once (its offset in the index view from the
flat position, axis by axis), clamped into the table, and in chunk ``c`` the lane moves the ``vec``
elements from column ``(c * threads_per_row + lane) * vec`` as one vector load and store in the storage
type (consecutive lanes, consecutive 16-byte vectors: coalesced).

The backward's stable LSD radix sort, pass ``k`` of ``digit_bits`` bits (digit = key >> (k * bits) & mask;
pass 0 reads the indices and their positions, later passes the previous pass's keys and positions):
``histogram``: CTA ``t`` zeroes ``digits`` shared counters, adds one per key of its tile (shared-memory
integer atomics: the counts are exact whatever the order) and writes them to column ``t`` of the
[digit, tile] table.  ``scan``: one CTA; thread ``s`` adds ``per_thread`` consecutive counts, a warp
shuffle scan and one shared word per warp give its exclusive prefix, and a second walk writes the
exclusive sums in place (from the counts the first walk loaded, kept in registers: reloading each
after the store before it made the walk one L2 round trip per count, 7.6 us a scan in run 40 of
2026-12-04).  ``scatter``: CTA ``t`` ranks each key among the equal digits before it in its
tile: within the warp from ``match.any.sync`` (the lanes with the same digit) and ``%lanemask_lt``, across
the warps from per-warp digit counts in shared memory (the group's first lane writes its size); the key
and its position go to offset[digit, t] + rank.  Equal digits keep their order: the sort is stable, and
after the last pass the keys ascend with equal keys in index order.
``accumulate``: the owner lanes of table row ``v`` find its segment ``[start, end)`` in the sorted keys
by a (lanes + 1)-ary search (``segment_bounds``: each lane probes a key a round, a warp ballot counts
the probes below ``v``; both ends at once), then walk it once for all chunks (a walk per chunk past
``MAX_UNROLL`` chunks), loading ``tokens_per_trip`` of dy's rows at the stored positions before adding
them in FP32 in that order, and write the row once (zero when the segment is empty), rounded to the
storage type.
"""
from __future__ import annotations

from contextlib import contextmanager

from nova.kernels.embedding.abi import kernel_name, params, split_role, workspace_layout
from nova.kernels.embedding.problem import FLOAT_DTYPES
from nova.kernels.embedding.schedule import MAX_UNROLL
from nova.kernels.rows.emit import RowsIr

MAX_REGS = 64           # the accumulate's register cap (nvvm.maxnreg): ptxas otherwise trades registers for spills


class EmbeddingIr(RowsIr):
    """``RowsIr`` (typed memrefs, FP32 loads and stores) with integer loads, stores and the warp intrinsics."""

    def load_index(self, name: str, offset) -> str:
        """One integer element of ``name`` as an index value."""
        mty, ty = self.types[name]
        x = self.let(f"{name}_v", f"memref.load %{name}[{self.v(offset)}] : {mty}")
        return self.pure(f"{name}_ix", f"arith.index_cast {x} : {ty} to index")

    def store_i32(self, name: str, offset, value) -> None:
        mty, _ = self.types[name]
        self.emit(f"memref.store {self.to_i32(value)}, %{name}[{self.v(offset)}] : {mty}")

    def to_i32(self, x) -> str:
        if isinstance(x, int):
            return self.const(x, "i32")
        return self.pure("w", f"arith.index_cast {x} : index to i32")

    def to_index(self, x: str) -> str:
        return self.pure("ix", f"arith.index_cast {x} : i32 to index")

    def ibin(self, op: str, a, b, hint: str) -> str:
        """An index ``arith.<op>`` (shrui, andi) the folding ops of ``Ir`` do not cover."""
        return self.pure(hint, f"arith.{op} {self.v(a)}, {self.v(b)} : index")

    def i32(self, op: str, a, b, hint: str) -> str:
        return self.pure(hint, f"arith.{op} {a}, {b} : i32")

    def load_raw_vec(self, name: str, offset, vec: int) -> str:
        """``vec`` elements as stored: one vector load (a scalar load where ``vec`` is 1)."""
        mty, ty = self.types[name]
        if vec == 1:
            return self.let("cp", f"memref.load %{name}[{self.v(offset)}] : {mty}")
        vty, align = f"vector<{vec}x{ty}>", vec * FLOAT_DTYPES[ty]
        return self.let("cp", f"vector.load %{name}[{self.v(offset)}] {{alignment = {align}}} : {mty}, {vty}")

    def store_raw_vec(self, name: str, offset, x: str, vec: int) -> None:
        mty, ty = self.types[name]
        if vec == 1:
            self.emit(f"memref.store {x}, %{name}[{self.v(offset)}] : {mty}")
            return
        vty, align = f"vector<{vec}x{ty}>", vec * FLOAT_DTYPES[ty]
        self.emit(f"vector.store {x}, %{name}[{self.v(offset)}] {{alignment = {align}}} : {mty}, {vty}")

    def smem_i32(self, count: int) -> tuple[str, str]:
        """A ``memref<count x i32>`` view of dynamic shared memory (and its type)."""
        dsm = self.pure("dsm", "gpu.dynamic_shared_memory : memref<?xi8, #smem>")
        ty = f"memref<{count}xi32, #smem>"
        return self.pure("sm", f"memref.view {dsm}[{self.v(0)}][] : memref<?xi8, #smem> to {ty}"), ty

    def asm_i32(self, instr: str, args: list[str], hint: str, constraint: str) -> str:
        ins = ", ".join(args)
        types = ", ".join("i32" for _ in args)
        return self.let(hint, f'llvm.inline_asm has_side_effects "{instr}", "{constraint}" {ins} : ({types}) -> i32')

    @contextmanager
    def for_loop(self, count: int, carry: list[tuple[str, str]], hint: str = "j"):
        """``scf.for`` over 0..count carrying ``(value, type)`` pairs; the body sets ``state["out"]``."""
        it, res = self.fresh(hint), self.fresh(f"{hint}_r")
        inner = [self.fresh(f"{hint}_c") for _ in carry]
        self.reserve(it.lstrip("%"), *(a.lstrip("%") for a in inner))
        tys = ", ".join(t for _, t in carry)
        iters = ", ".join(f"{a} = {v}" for a, (v, _) in zip(inner, carry))
        head = f"{res}:{len(carry)} = " if carry else ""
        state = {"out": None}
        with self.region(f"{head}scf.for {it} = {self.v(0)} to {self.v(count)} step {self.v(1)}"
                         + (f" iter_args({iters}) -> ({tys})" if carry else "") + " {"):
            yield it, inner, state
            if carry:
                self.emit(f"scf.yield {', '.join(state['out'])} : {tys}")
        state["results"] = [f"{res}#{i}" for i in range(len(carry))]


def param_types(p, s, role: str) -> list[tuple[str, int, str]]:
    """``(name, extent, element type)`` of each parameter of kernel ``role``."""
    ws, _ = workspace_layout(p, s)
    source = (p.source_rows - 1) * p.stride + p.dim
    operand = {"idx": (p.index_extent, p.index_dtype), "table": (source, p.dtype), "out": (p.count * p.dim, p.dtype),
               "dy": (source, p.dtype), "grad": (p.vocab * p.dim, p.dtype), "base": (p.vocab * p.dim, p.base)}
    return [(name, ws[what[3:]][1], "i32") if what.startswith("ws:") else (name, *operand[what])
            for name, what in params(p, s, role)]


def index_offset(ir: EmbeddingIr, p, i):
    """Element offset in the index view of flat position ``i``: sum over axes of (i / inner % n) * stride."""
    off, inner = 0, 1
    for n, stride in reversed(list(zip(p.index_shape, p.index_strides))):
        coord = ir.rem(ir.div(i, inner, "iq"), n, "ic") if len(p.index_shape) > 1 else i
        off = ir.add(off, ir.mul(coord, stride, "is"), "ioff")
        inner *= n
    return off


def table_row(ir: EmbeddingIr, p, i):
    """The table row named at flat index position ``i``, clamped into [0, vocab)."""
    v = ir.load_index("idx", index_offset(ir, p, i))
    return ir.min(ir.max(v, 0, "vlo"), p.vocab - 1, "vrow")


class _Rows:
    """The row geometry gather and accumulate share: thread, row, lane, per-chunk columns."""

    def __init__(self, ir: EmbeddingIr, p, t):
        self.ir, self.p, self.t = ir, p, t
        self.tid = tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        self.lane = ir.rem(tid, t.threads_per_row, "lane") if t.threads_per_row < t.threads else tid
        slot = ir.div(tid, t.threads_per_row, "slot") if t.threads_per_row < t.threads else 0
        self.row = ir.add(ir.mul(bx, t.rows_per_cta, "row0"), slot, "row")
        self.row_ok = ir.cmp("slt", self.row, t.rows, "row_ok") if t.rows % t.rows_per_cta else True
        self.srow = ir.select(self.row_ok, self.row, 0, hint="srow")

    def chunks(self, body) -> None:
        """``body(col, ok, safe_col)`` per chunk: unrolled up to MAX_UNROLL chunks, else an scf.for."""
        ir, t = self.ir, self.t
        step = t.threads_per_row * t.vec
        lane_col = ir.mul(self.lane, t.vec, "lane_col")

        def one(c, full):
            col = ir.add(ir.mul(c, step, "cstep"), lane_col, "col")
            in_row = True if full else ir.cmp("slt", col, self.p.dim, "in_row")
            body(col, ir.and_(self.row_ok, in_row), ir.select(in_row, col, 0, hint="safe_col"))
        if t.chunks <= MAX_UNROLL:
            for c in range(t.chunks):
                one(c, (c + 1) * step <= self.p.dim)
        else:
            with ir.for_loop(t.chunks, [], "ch") as (c, _, _):
                one(c, self.p.dim % step == 0)


def build_gather(p, s) -> str:
    ir, t = EmbeddingIr(), s.rows
    ir.emit(f"// Nova embedding gather: {p.describe()}; {t.threads_per_row} lanes a row, {t.rows_per_cta} rows a "
            f"CTA, vec {t.vec}, {t.chunks} chunks")
    with ir.rows_kernel(kernel_name("gather"), param_types(p, s, "gather"), t.threads):
        g = _Rows(ir, p, t)
        v = table_row(ir, p, g.srow)
        src = ir.mul(v, p.stride, "src_row")
        dst = ir.mul(g.srow, p.dim, "dst_row")
        pending = []                    # unrolled chunks: every load issued before the first store

        def chunk(col, ok, safe_col):
            x = ir.load_raw_vec("table", ir.add(src, safe_col, "src"), t.vec)
            pending.append((ok, ir.add(dst, col, "dst"), x))
            if t.chunks > MAX_UNROLL:
                flush()

        def flush():
            for ok, at, x in pending:
                ir.guarded(ok, lambda at=at, x=x: ir.store_raw_vec("out", at, x, t.vec))
            pending.clear()
        g.chunks(chunk)
        flush()
    return ir.text()


def _digit(ir: EmbeddingIr, key, k: int, bits: int):
    shifted = ir.ibin("shrui", key, k * bits, "sh") if k else key
    return ir.ibin("andi", shifted, (1 << bits) - 1, "digit")


def _sort_key(ir: EmbeddingIr, p, k: int, i):
    """The key at position ``i`` of pass ``k``'s input: the clamped index (pass 0) or the previous pass's key."""
    return table_row(ir, p, i) if k == 0 else ir.load_index("keys_in", i)


def _zero_smem(ir: EmbeddingIr, sm: str, smty: str, words: int, tid, threads: int) -> None:
    zero = ir.const(0, "i32")
    for r in range(-(-words // threads)):
        e = ir.add(tid, r * threads, "ze")
        ok = True if (r + 1) * threads <= words else ir.cmp("slt", e, words, "ze_ok")
        ir.guarded(ok, lambda: ir.emit(f"memref.store {zero}, {sm}[{ir.v(e)}] : {smty}"))


def build_histogram(p, s, k: int) -> str:
    ir, sp = EmbeddingIr(), s.sort
    ir.emit(f"// Nova embedding sort histogram, pass {k} of {sp.passes} ({sp.digit_bits}-bit digits): {p.describe()}")
    with ir.rows_kernel(kernel_name("histogram"), param_types(p, s, f"histogram{k}"), sp.tile):
        tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        sm, smty = ir.smem_i32(sp.digits)
        _zero_smem(ir, sm, smty, sp.digits, tid, sp.tile)
        ir.emit("gpu.barrier")
        i = ir.add(ir.mul(bx, sp.tile, "t0"), tid, "i")
        ok = True if p.count % sp.tile == 0 else ir.cmp("slt", i, p.count, "i_ok")
        d = _digit(ir, _sort_key(ir, p, k, ir.select(ok, i, 0, hint="si")), k, sp.digit_bits)
        one = ir.const(1, "i32")
        ir.guarded(ok, lambda: ir.let("old", f"memref.atomic_rmw addi {one}, {sm}[{d}] : (i32, {smty}) -> i32"))
        ir.emit("gpu.barrier")
        for r in range(-(-sp.digits // sp.tile)):
            e = ir.add(tid, r * sp.tile, "de")
            e_ok = True if (r + 1) * sp.tile <= sp.digits else ir.cmp("slt", e, sp.digits, "de_ok")

            def write(e=e):
                c = ir.let("cnt", f"memref.load {sm}[{ir.v(e)}] : {smty}")
                ir.emit(f"memref.store {c}, %counts[{ir.v(ir.add(ir.mul(e, sp.tiles, 'dt'), bx, 'dti'))}] : "
                        f"{ir.types['counts'][0]}")
            ir.guarded(e_ok, write)
    return ir.text()


def build_scan(p, s, k: int) -> str:
    ir, sp = EmbeddingIr(), s.sort
    n, threads, per = sp.entries, sp.scan_threads, sp.scan_per_thread
    warps = threads // 32
    mty = None
    ir.emit(f"// Nova embedding sort scan, pass {k}: {n} counts, {threads} threads x {per}")
    with ir.rows_kernel(kernel_name("scan"), param_types(p, s, f"scan{k}"), threads):
        mty = ir.types["counts"][0]
        tid = ir.let("tid", "gpu.thread_id x")
        lane, warp = ir.rem(tid, 32, "lane"), ir.div(tid, 32, "warp")
        base = ir.mul(tid, per, "base")
        zero = ir.const(0, "i32")

        def count_at(j):
            e = ir.add(base, j, "e")
            ok = True if threads * per == n else ir.cmp("slt", e, n, "e_ok")
            x = ir.let("c", f"memref.load %counts[{ir.v(ir.select(ok, e, 0, hint='se'))}] : {mty}")
            return e, ok, (x if ok is True else ir.pure("cz", f"arith.select {ok}, {x}, {zero} : i32"))

        total = zero
        kept = []                  # unrolled: the counts stay in registers for the writing walk
        if per <= MAX_UNROLL:
            kept = [count_at(j) for j in range(per)]
            for _, _, x in kept:
                total = ir.i32("addi", total, x, "tot")
        else:
            with ir.for_loop(per, [(zero, "i32")], "sj") as (j, (acc,), state):
                state["out"] = [ir.i32("addi", acc, count_at(j)[2], "tot")]
            total = state["results"][0]
        inclusive = total
        for off in (1, 2, 4, 8, 16):
            up = ir.fresh("up")
            ir.emit(f"{up}, {ir.fresh('up_ok')} = gpu.shuffle up {inclusive}, {ir.const(off, 'i32')}, "
                    f"{ir.const(32, 'i32')} : i32")
            has = ir.cmp("sge", lane, off, "has")
            inclusive = ir.i32("addi", inclusive, ir.pure("upz", f"arith.select {has}, {up}, {zero} : i32"), "incl")
        sm, smty = ir.smem_i32(warps)
        ir.guarded(ir.cmp("eq", lane, 31, "last"), lambda: ir.emit(f"memref.store {inclusive}, {sm}[{warp}] : {smty}"))
        ir.emit("gpu.barrier")
        prefix = zero
        for w in range(warps - 1):
            x = ir.let("wt", f"memref.load {sm}[{ir.v(w)}] : {smty}")
            before = ir.cmp("slt", w, warp, "before")
            prefix = ir.i32("addi", prefix, ir.pure("wz", f"arith.select {before}, {x}, {zero} : i32"), "pre")
        start = ir.i32("subi", ir.i32("addi", prefix, inclusive, "pi"), total, "excl")

        def write(j, running):
            e, ok, x = kept[j] if kept else count_at(j)
            ir.guarded(ok, lambda: ir.emit(f"memref.store {running}, %counts[{ir.v(e)}] : {mty}"))
            return ir.i32("addi", running, x, "run")
        running = start
        if per <= MAX_UNROLL:
            for j in range(per):
                running = write(j, running)
        else:
            with ir.for_loop(per, [(start, "i32")], "wj") as (j, (acc,), state):
                state["out"] = [write(j, acc)]
    return ir.text()


def build_scatter(p, s, k: int) -> str:
    ir, sp = EmbeddingIr(), s.sort
    warps, digits = sp.tile // 32, sp.digits
    ir.emit(f"// Nova embedding sort scatter, pass {k} of {sp.passes} ({sp.digit_bits}-bit digits): {p.describe()}")
    with ir.rows_kernel(kernel_name("scatter"), param_types(p, s, f"scatter{k}"), sp.tile):
        tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        lane, warp = ir.rem(tid, 32, "lane"), ir.div(tid, 32, "warp")
        sm, smty = ir.smem_i32(warps * digits)
        _zero_smem(ir, sm, smty, warps * digits, tid, sp.tile)
        ir.emit("gpu.barrier")
        i = ir.add(ir.mul(bx, sp.tile, "t0"), tid, "i")
        ok = True if p.count % sp.tile == 0 else ir.cmp("slt", i, p.count, "i_ok")
        si = ir.select(ok, i, 0, hint="si")
        key = _sort_key(ir, p, k, si)
        position = si if k == 0 else ir.load_index("perm_in", si)
        d = _digit(ir, key, k, sp.digit_bits)
        matched = ir.to_i32(ir.select(ok, d, digits, hint="dm"))     # past the end: a digit no key has
        peers = ir.asm_i32("match.any.sync.b32 $0, $1, -1;", [matched], "peers", "=r,r")
        lower = ir.let("lanes_lt", 'llvm.inline_asm "mov.u32 $0, %lanemask_lt;", "=r" : () -> i32')
        before = ir.i32("andi", peers, lower, "before")
        rank_warp = ir.to_index(ir.let("rank_w", f"llvm.intr.ctpop({before}) : (i32) -> i32"))
        first = ir.pure("first", f"arith.cmpi eq, {before}, {ir.const(0, 'i32')} : i32")
        size = ir.let("group", f"llvm.intr.ctpop({peers}) : (i32) -> i32")
        slot = ir.add(ir.mul(warp, digits, "wd"), d, "slot")
        ir.guarded(ir.and_(ok, first, "lead"), lambda: ir.emit(f"memref.store {size}, {sm}[{slot}] : {smty}"))
        ir.emit("gpu.barrier")
        rank = rank_warp
        for w in range(warps - 1):
            x = ir.to_index(ir.let("wc", f"memref.load {sm}[{ir.v(ir.add(d, w * digits, 'wslot'))}] : {smty}"))
            rank = ir.add(rank, ir.select(ir.cmp("slt", w, warp, "earlier"), x, 0, hint="wcz"), "rank")
        offset = ir.load_index("counts", ir.add(ir.mul(d, sp.tiles, "dt"), bx, "dti"))
        pos = ir.add(offset, rank, "pos")

        def write():
            ir.store_i32("keys_out", pos, key)
            ir.store_i32("perm_out", pos, position)
        ir.guarded(ok, write)
    return ir.text()


def segment_bounds(ir: EmbeddingIr, p, t, g: "_Rows", v) -> tuple[str, str]:
    """``[start, end)`` of table row ``v``'s keys in the sorted keys: the lower bounds of ``v`` and ``v + 1``
    by ``t.search_steps`` rounds of a (L + 1)-ary search, L = ``threads_per_row``.  Each bound is kept as
    [lo, hi] (it is in there, hi = count: no key that large); in a round lane j probes
    q_j = lo + (j + 1) * n / (L + 1), n = hi - lo; the probes below the target form a prefix of the lanes
    (the keys ascend), so their count c (a warp ballot, the row's lanes' bits) gives lo = q_(c-1) + 1
    where c > 0 and hi = q_c where c < L, each computed from c: no shuffle."""
    lanes = t.threads_per_row
    shift = ir.to_i32(ir.sub(ir.rem(g.tid, 32, "wlane"), g.lane, "gshift")) if lanes < 32 else None
    mask = ir.const((1 << lanes) - 1, "i32") if lanes < 32 else None
    bounds = [(0, p.count), (0, p.count)]
    targets = [v, ir.add(v, 1, "v1")]
    for _ in range(t.search_steps):
        probes = []
        for (lo, hi), target in zip(bounds, targets):       # the two searches' loads in flight together
            n = ir.sub(hi, lo, "n")
            q = ir.add(lo, ir.div(ir.mul(ir.add(g.lane, 1, "j1"), n, "jn"), lanes + 1, "jq"), "q")
            kv = ir.load_index("keys", ir.min(q, p.count - 1, "sq"))
            probes.append((n, ir.and_(ir.cmp("slt", lo, hi, "open"), ir.cmp("slt", kv, target, "below"), "less")))
        new = []
        for (lo, hi), (n, less) in zip(bounds, probes):
            bit = ir.pure("lessw", f"arith.extui {less} : i1 to i32")
            votes = ir.asm_i32("{ .reg .pred p; setp.ne.u32 p, $1, 0; vote.sync.ballot.b32 $0, p, -1; }",
                               [bit], "votes", "=r,r")
            if shift is not None:
                votes = ir.i32("andi", ir.i32("shrui", votes, shift, "gvotes"), mask, "mine")
            c = ir.to_index(ir.let("below", f"llvm.intr.ctpop({votes}) : (i32) -> i32"))
            q_before = ir.add(ir.add(lo, ir.div(ir.mul(c, n, "cn"), lanes + 1, "cq"), "qc"), 1, "qc1")
            q_at = ir.add(lo, ir.div(ir.mul(ir.add(c, 1, "c1"), n, "c1n"), lanes + 1, "c1q"), "qa")
            new.append((ir.select(ir.cmp("eq", c, 0, "none"), lo, q_before, hint="lo"),
                        ir.select(ir.cmp("eq", c, lanes, "all"), hi, q_at, hint="hi")))
        bounds = new
    return bounds[0][0], bounds[1][0]


def build_accumulate(p, s) -> str:
    ir, t = EmbeddingIr(), s.rows
    ir.emit(f"// Nova embedding accumulate: {p.describe()}; {t.threads_per_row} lanes a table row, "
            f"{t.rows_per_cta} rows a CTA, vec {t.vec}, {t.chunks} chunks; segment search in {t.search_steps} "
            f"rounds, {t.tokens_per_trip} dy rows a trip; rows added in index order")
    with ir.rows_kernel(kernel_name("accumulate"), param_types(p, s, "accumulate"), t.threads, MAX_REGS):
        g = _Rows(ir, p, t)
        v = g.srow
        start, end = segment_bounds(ir, p, t, g, v)
        trip = t.tokens_per_trip
        trips = ir.div(ir.add(ir.sub(end, start, "seg_len"), trip - 1, "seg_up"), trip, "trips")
        zero = ir.f(0.0)

        def walk(chunks):
            """dy's rows of the segment added into each chunk's sums, ``trip`` rows loaded a trip, added in
            index order (a row past the segment's end is loaded from its start and not added)."""
            width = len(chunks) * t.vec
            with ir.for_loop(trips, [(zero, "f32")] * width, "tr") as (k, sums, state):
                first = ir.add(start, ir.mul(k, trip, "kt"), "at")
                rows = []
                for u in range(trip):
                    pos = ir.add(first, u, "pos")
                    inside = ir.cmp("slt", pos, end, "inside") if trip > 1 else True
                    src = ir.load_index("perm", ir.select(inside, pos, start, hint="spos"))
                    rows.append((inside, [ir.load("dy", ir.add(ir.mul(src, p.stride, "dy_row"), safe_col, "dy_off"),
                                                  t.vec) for _, _, safe_col in chunks]))
                out = list(sums)
                for inside, loaded in rows:
                    xs = [x for chunk in loaded for x in chunk]
                    out = [ir.fsel(inside, ir.fadd(a, x, "acc"), a) if inside is not True else ir.fadd(a, x, "acc")
                           for a, x in zip(out, xs)]
                state["out"] = out
            sums = state["results"]
            for c, (col, ok, safe_col) in enumerate(chunks):
                row_sums = sums[c * t.vec:(c + 1) * t.vec]
                if p.base:                          # the row's sum, then the base: add(sum, base) as the IR adds
                    at = ir.add(ir.mul(v, p.dim, "g_row"), safe_col, "b_off")
                    row_sums = [ir.fadd(x, b, "with_base") for x, b in zip(row_sums, ir.load("base", at, t.vec))]
                ir.guarded(ok, lambda col=col, row_sums=row_sums: ir.store(
                    "grad", ir.add(ir.mul(v, p.dim, "g_row"), col, "g_off"), row_sums))

        if t.chunks <= MAX_UNROLL:                  # every chunk in one walk of the segment
            chunks = []
            g.chunks(lambda col, ok, safe_col: chunks.append((col, ok, safe_col)))
            walk(chunks)
        else:                                       # a walk per chunk (an scf.for over the chunks)
            g.chunks(lambda col, ok, safe_col: walk([(col, ok, safe_col)]))
    return ir.text()


def build_module(p, s, role: str) -> str:
    base, k = split_role(role)
    if base == "gather":
        return build_gather(p, s)
    if base == "accumulate":
        return build_accumulate(p, s)
    return {"histogram": build_histogram, "scan": build_scan, "scatter": build_scatter}[base](p, s, k)
