"""MLIR text of the skinny GEMM (``nova_gemm_skinny``), written with the rows family's ``RowsIr``
scaffold (FP32 scalars, typed global accesses, shuffles).

Parameters, bare pointers over static extents: ``(A, B, C[, bias])``, and when K is split also
``(W, T)``: the partials' workspace (each column block's ``[splits, M, columns]`` FP32 region, padded
to whole 128-byte lines) and one 32-bit counter per column block (zero before the first launch; the
kernel leaves it zero).  A is ``[M, K]`` (``trans_a``: stored ``[K, M]``), B ``[K, N]`` (``trans_b``:
stored ``[N, K]``), C ``[M, N]`` row-major; the bias is FP32 for tf32 problems, else the output's type.

Per CTA and K slice (thread layouts in ``skinny_schedule.py``):

* **A staged.**  ``a_chunk`` columns of A at a time: every thread loads its share, ``stage_loads`` at
  a time (coalesced in A's storage order, zero past the slice; ``a_vec`` columns of a row a load where
  ``skinny.staging_vector`` allows, stored as shared vectors), converts to FP32 and stores it in
  shared memory as ``[a_chunk, m_pad]`` (lanes along N: a row's M values read as 16-byte vectors, the
  same address for a warp: a broadcast) or ``[M, a_chunk]`` (lanes along K: a lane reads its ``vec``
  columns).
* **B first** (``b_first``).  A chunk's first trip issues its loads of B before the chunk's staging of
  A: B does not depend on A, so the two loads' latencies overlap (one wait a chunk, not two); its FMAs
  follow the staging's barrier.  That trip is predicated like a tail trip unless the chunk is known
  at compile time to be a whole trip long; the chunk's other trips start one trip further on.
* **B streamed.**  Each trip (after the first, with ``b_first``) issues ``unroll`` (x ``rows``)
  independent vector loads of B, then the FMAs: ``acc[m][c] += A[m, k] * B[k, c]`` in FP32 (``math.fma``: one rounding per product-add).  The
  K range of a chunk is whole trips (no predicates) and, only where the chunk does not end on a
  whole trip (known at compile time, else an ``scf.if`` at run time), one tail trip whose steps past
  the chunk load row / column 0 with B's values selected to zero; A is read as staged, zero past the
  chunk (a trip never reaches past ``a_chunk``), so such a step adds 0 x 0 however large the values
  read elsewhere.  Columns past N are clamped to a valid address and
  their sums never stored.  The trip loops are never unrolled by ptxas (``NOUNROLL``).
* **Sums met.**  Lanes along N: the ``threads_k`` stacked threads' sums of a column are stored in
  shared memory and added in ``tk`` order.  Lanes along K: a butterfly of ``gpu.shuffle xor`` adds
  the lanes' sums; lane 0 stores its warp's columns.
* **Written.**  One slice: bias, activation (relu, gelu-tanh, silu: ``x * sigmoid``, the MUFU ``ex2``
  as the tensor-core kernels' epilogue) and the output type into C.  Several: the FP32 partials into
  the column block's region; every thread fences its stores (``membar.gl``), the CTA meets at a
  barrier and thread 0 takes a ticket (``atom.global.add`` on the block's counter).  The CTA with the
  last ticket fences again and adds the region's slices in order (``ld.relaxed.gpu``: the memory
  model's loads, never an L1 line from before the fence): thread group g of
  ``reduce_groups`` adds slices ``[g * per, (g + 1) * per)`` of its outputs (a thread's loads of all
  its outputs' partials in runs of ``REDUCE_UNROLL``, each output's added in slice order), the
  groups' sums meet in shared memory in group order, the epilogue writes C, and thread 0 resets the
  counter.  No float atomics: the same bits on every run, whichever CTA is last.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from nova.codegen.builder import SMEM
from nova.codegen.errors import CodegenError
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.skinny import REDUCE_UNROLL
from nova.kernels.gemm.skinny_schedule import FLAG_WORDS, WARP, SkinnySchedule, cdiv
from nova.kernels.rows.emit import RowsIr

KERNEL_NAME = "nova_gemm_skinny"
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
GELU_C = math.sqrt(2.0 / math.pi)
SMEM_VECTOR_BYTES = 16          # the widest shared-memory access (ld.shared.v4.b32); the buffer is 16-byte aligned
# LLVM's loop metadata, emitted as ``.pragma "nounroll"`` in the PTX loop header (ptxas honours it)
NOUNROLL = "{loop_annotation = #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>>}"
# [PTX] membar.gl: this thread's earlier global writes are seen by the whole GPU before its later accesses
FENCE = 'llvm.inline_asm has_side_effects "membar.gl;", "" : () -> ()'


def main_params(p: GemmProblem, s: SkinnySchedule) -> tuple[str, ...]:
    return ("A", "B", "C") + (("bias",) if p.bias else ()) + (("W", "T") if s.split else ())


def check_supported(p: GemmProblem, s: SkinnySchedule) -> None:
    """Raise CodegenError naming the offending field when this builder cannot realise ``s``."""
    def fail(msg):
        raise CodegenError(f"cannot generate the skinny kernel of {p.describe()} on {s.arch}: {msg}")
    if s.arch not in SUPPORTED_ARCHES:
        fail(f"unsupported arch {s.arch!r}; supported: {', '.join(SUPPORTED_ARCHES)}")
    if p.batch > 1:
        fail(f"a batch of {p.batch}: the skinny kernel takes one GEMM")
    if s.lanes_along != ("k" if p.trans_b else "n"):
        fail(f"lanes along {s.lanes_along} do not match B stored {'[N, K]' if p.trans_b else '[K, N]'}")
    row = p.K if p.trans_b else p.N
    if s.vec < 1 or (row % s.vec and not s.row_shift) or s.vec * p.in_bytes > 16:
        fail(f"vec={s.vec} does not divide B's rows of {row} elements in one load of at most 16 bytes")
    if s.row_shift and s.lanes_along == "k" and s.threads_n % s.vec:
        fail(f"shifted rows along K need warps ({s.threads_n}) a multiple of vec={s.vec}")
    if s.row_shift and s.lanes_along == "n" and (s.threads % s.threads_n or (s.threads // s.threads_n) % s.vec):
        fail(f"shifted rows along N need the threads along K ({s.threads // max(1, s.threads_n)}) a multiple of "
             f"vec={s.vec}: one shift for all of a thread's rows")
    if s.threads % WARP or (s.lanes_along == "n" and s.threads % s.threads_n):
        fail(f"{s.threads} threads do not split into {s.threads_n} along N")
    if s.lanes_along == "k" and s.threads_n * WARP != s.threads:
        fail(f"lanes along K: {s.threads} threads are not {s.threads_n} warps")
    extent = s.k_extent(p.K)
    if s.k_slice % s.span or s.a_chunk % s.span or s.splits != cdiv(extent, s.k_slice) or \
            s.a_chunk * cdiv(s.k_slice, s.a_chunk) < s.k_slice:
        fail(f"slices of {s.k_slice} and chunks of {s.a_chunk} are not whole trips of {s.span} covering K = {extent} "
             f"in {s.splits} slices")
    if s.a_vec < 1 or s.a_vec != 1 and (s.lanes_along != "k" or s.a_vec * p.in_bytes > 16 or s.a_vec & (s.a_vec - 1)
                                        or p.trans_a or s.halo or p.K % s.a_vec or s.a_chunk % s.a_vec
                                        or s.k_slice % s.a_vec or s.stage_loads % s.a_vec):
        fail(f"a_vec={s.a_vec}: A's staging vectors need lanes along K, A stored [M, K] without a halo, K ({p.K}), the chunks "
             f"({s.a_chunk}), the slices ({s.k_slice}) and a round's elements ({s.stage_loads}) multiples of it, "
             "in one load of at most 16 bytes")
    if s.lanes_along == "n" and (s.m_pad < p.M or (s.m_pad > 2 and s.m_pad % 4)):
        fail(f"m_pad={s.m_pad}: A's rows of {p.M} values must pad to 1, 2 or a multiple of 4")
    need = 4 * (s.a_chunk + s.halo) * (s.m_pad if s.lanes_along == "n" else p.M)
    if s.lanes_along == "n" and s.threads_k > 1:
        need = max(need, 4 * s.threads * p.M * s.vec)
    if s.split:
        need = max(need, s.reduction_smem_bytes(p.M))
        if s.reduce_groups < 1 or s.reduce_groups > s.splits or \
                (s.reduce_groups > 1 and s.reduce_groups * p.M * s.columns > s.threads):
            fail(f"reduce_groups={s.reduce_groups}: groups x {p.M * s.columns} outputs must fit {s.threads} threads")
    if s.smem_bytes < need:
        fail(f"smem_bytes={s.smem_bytes} is less than the {need} bytes A's chunk or the partial sums take")


class SkinnyIr(RowsIr):
    """``RowsIr`` with FMAs, loops over dynamic ranges and shared-memory vectors."""

    def fma(self, a: str, b: str, c: str, hint: str = "acc") -> str:
        return self.let(hint, f"math.fma {a}, {b}, {c} : f32")

    @contextmanager
    def range_loop(self, lo, hi, step: int, carry: list[str], hint: str):
        """``scf.for`` from ``lo`` to ``hi`` (ints or SSA index values) by ``step`` carrying f32 values:
        yields (index, carried names, state); the body sets ``state["out"]``; ``state["results"]`` after.
        Never unrolled (``NOUNROLL``): a trip already holds its unrolled loads, and ptxas unrolling a
        loop of known trip count hoists loads across trips into more registers than the schedule has."""
        it, res = self.fresh(hint), self.fresh(f"{hint}_r")
        inner = [self.fresh(f"{hint}_c") for _ in carry]
        self.reserve(it.lstrip("%"), *(a.lstrip("%") for a in inner))
        tys = ", ".join("f32" for _ in carry)
        iters = ", ".join(f"{a} = {b}" for a, b in zip(inner, carry))
        state = {"out": None}
        head = f"{res}:{len(carry)} = " if carry else ""
        with self.region(f"{head}scf.for {it} = {self.v(lo)} to {self.v(hi)} step {self.v(step)}"
                         + (f" iter_args({iters}) -> ({tys})" if carry else "") + " {", close=f"}} {NOUNROLL}"):
            yield it, inner, state
            if carry:
                self.emit(f"scf.yield {', '.join(state['out'])} : {tys}")
        state["results"] = [f"{res}#{i}" for i in range(len(carry))]

    def when(self, cond, carry: list[str], body, hint: str) -> list[str]:
        """``body(carry)``'s f32 values where the i1 ``cond`` holds, else ``carry`` unchanged: one
        ``scf.if`` with results (inline where ``cond`` is known True; ``carry`` where known False)."""
        if cond is True:
            return body(carry)
        if cond is False:
            return carry
        res, tys = self.fresh(f"{hint}_r"), ", ".join("f32" for _ in carry)
        with self.region(f"{res}:{len(carry)} = scf.if {cond} -> ({tys}) {{", close="} else {"):
            self.emit(f"scf.yield {', '.join(body(carry))} : {tys}")
        with self.scope():
            self.emit(f"scf.yield {', '.join(carry)} : {tys}")
        self.emit("}")
        return [f"{res}#{i}" for i in range(len(carry))]

    def smem_read(self, sm: str, count: int, offset, width: int) -> list[str]:
        """``width`` consecutive f32 of the shared buffer ``sm`` (``count`` elements) from ``offset``."""
        ty = f"memref<{count}xf32, {SMEM}>"
        if width == 1:
            return [self.let("a_s", f"memref.load {sm}[{self.v(offset)}] : {ty}")]
        vty = f"vector<{width}xf32>"
        align = min(4 * width, SMEM_VECTOR_BYTES)
        v = self.let("a_v", f"vector.load {sm}[{self.v(offset)}] {{alignment = {align}}} : {ty}, {vty}")
        return [self.let("a_e", f"vector.extract {v}[{j}] : f32 from {vty}") for j in range(width)]

    def smem_write(self, sm: str, count: int, offset, x: str) -> None:
        self.emit(f"memref.store {x}, {sm}[{self.v(offset)}] : memref<{count}xf32, {SMEM}>")

    def smem_write_vector(self, sm: str, count: int, offset, xs: list[str]) -> None:
        """``xs`` as consecutive f32 of ``sm`` from ``offset`` (a multiple of ``len(xs)``): one vector
        store of at most SMEM_VECTOR_BYTES at a time."""
        width = SMEM_VECTOR_BYTES // 4
        for q in range(0, len(xs), width):
            part = xs[q:q + width]
            if len(part) == 1:
                self.smem_write(sm, count, self.add(offset, q, "st_q"), part[0])
                continue
            vty = f"vector<{len(part)}xf32>"
            v = self.let("st_v", f"vector.from_elements {', '.join(part)} : {vty}")
            self.emit(f"vector.store {v}, {sm}[{self.v(self.add(offset, q, 'st_q'))}] {{alignment = {4 * len(part)}}} "
                      f": memref<{count}xf32, {SMEM}>, {vty}")

    def load_relaxed(self, name: str, offset) -> str:
        """One f32 of global parameter ``name`` by ``ld.relaxed.gpu`` (generic address): a load of the
        memory model at GPU scope, never served from a line this SM's L1 holds from earlier (another
        CTA's partials, fenced and counted before this read)."""
        mty, _ = self.types[name]
        base = self.pure(f"{name}_base", f"memref.extract_aligned_pointer_as_index %{name} : {mty} -> index")
        at = self.pure(f"{name}_addr", f"arith.index_cast {self.v(self.add(base, self.mul(offset, 4, 'w_bytes'), 'w_ptr'))} "
                                       ": index to i64")
        return self.let(f"{name}_v", f'llvm.inline_asm has_side_effects "ld.relaxed.gpu.f32 $0, [$1];", "=f,l" {at} '
                                     ": (i64) -> f32")


class _Epilogue:
    """Bias, activation and the store into C (the output type's rounding in ``RowsIr.store``)."""

    def __init__(self, ir: SkinnyIr, p: GemmProblem):
        self.ir, self.p = ir, p

    def sigmoid_times(self, x: str, z: str) -> str:
        """x * sigmoid(z) = x / (1 + 2^(-z log2 e))."""
        ir = self.ir
        return ir.fdiv(x, ir.fadd(ir.f(1.0), ir.exp(ir.fneg(z))), "y")

    def activation(self, x: str) -> str:
        ir, act = self.ir, self.p.activation
        if act == "relu":
            return ir.fmax(x, ir.f(0.0), "relu")
        if act == "silu":
            return self.sigmoid_times(x, x)
        if act == "gelu":      # tanh approximation: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3)
            poly = ir.fadd(ir.fmul(ir.fmul(x, x, "x2"), ir.f(0.044715), "x2c"), ir.f(1.0), "poly")
            return self.sigmoid_times(x, ir.fmul(ir.fmul(x, poly, "xpoly"), ir.f(2.0 * GELU_C), "two_u"))
        return x

    def store(self, m, n, x: str) -> None:
        ir, p = self.ir, self.p
        if p.bias:
            x = ir.fadd(x, ir.load("bias", n)[0], "c_bias")
        ir.store("C", ir.add(ir.mul(m, p.N, "c_row"), n, "c_off"), [self.activation(x)])


class SkinnyKernel:
    """The main kernel's builder (module docstring)."""

    def __init__(self, p: GemmProblem, s: SkinnySchedule):
        self.p, self.s = p, s
        self.ir = SkinnyIr()
        self.epilogue = _Epilogue(self.ir, p)
        self.shift = 0                   # shifted rows, set by ``build``: along K the warp's rows' shift (n K mod
                                         # vec), along N the thread's rows' ((tk N) mod vec)
        self.last_vector = 0             # along K where a row's last vector starts (shift + K - 1, rounded down),
                                         # along N where B's last aligned vector starts
        self.shift_bits = {}             # shifted rows along N: {step: the shift's bit of value step}

    def param_types(self) -> list[tuple[str, int, str]]:
        p, s = self.p, self.s
        blocks = s.grid(p.N)[0]
        # shifted rows: the last row's last vector reads up to its end (the allocation holds whole
        # 16-byte vectors: a vector never crosses a page, and the bytes past B's last element are masked
        # or never written)
        b_extent = cdiv(p.K * p.N, s.vec) * s.vec if s.row_shift else p.K * p.N
        types = {"A": (p.M * p.K, p.storage), "B": (b_extent, p.storage), "C": (p.M * p.N, p.out_dtype),
                 "bias": (p.N, p.bias_dtype), "W": (blocks * s.region(p.M), "f32"), "T": (blocks, "i32")}
        return [(name, *types[name]) for name in main_params(p, s)]

    # ---------------------------------------------------------------- A staging
    def staged_index(self, m, kk):
        """Where A[m, chunk_lo + kk] lies in the shared buffer."""
        s, ir = self.s, self.ir
        if s.lanes_along == "n":
            return ir.add(ir.mul(kk, s.m_pad, "st_row"), m, "st_at")
        return ir.add(ir.mul(m, s.a_chunk + s.halo, "st_row"), kk, "st_at")

    def stage(self, sm: str, count: int, tid, chunk_lo, chunk_hi) -> None:
        """A's columns [chunk_lo - halo, chunk_hi) into shared memory as FP32 (zero past chunk_hi, and with
        shifted rows outside [0, K)), ``stage_loads`` elements a thread at a time (their loads first, then
        the stores), then a barrier.  With ``a_vec`` > 1 (A stored [M, K], K and the chunk bounds
        multiples of it) a load is a vector of ``a_vec`` columns of a row, wholly inside the chunk or
        wholly past its end."""
        ir, p, s = self.ir, self.p, self.s
        width = s.a_chunk + s.halo
        av = s.a_vec
        total = p.M * width // av                       # loads of the chunk (vectors of av elements)
        col_lo = ir.sub(chunk_lo, s.halo, "col_lo")
        col_hi = ir.min(chunk_hi, p.K, "col_hi") if s.halo else chunk_hi
        per_round = s.stage_loads // av
        rounds = cdiv(cdiv(total, s.threads), per_round)
        ir.comment(f"stage A[:, chunk] ({p.M} x {width}) in shared memory, {rounds} round(s) of "
                   f"{per_round} load(s) of {av} element(s) a thread")

        def one_round(first):
            loaded = []
            for j in range(per_round):
                e = ir.add(ir.add(tid, first, "e0"), j * s.threads, "e")
                static_end = (j + 1) * s.threads + (first if isinstance(first, int) else total)
                in_range = True if static_end <= total else ir.cmp("slt", e, total, "e_ok")
                if in_range is False:
                    continue
                if p.trans_a:                # stored [K, M]: m fastest
                    kk, m = ir.div(e, p.M, "kk"), ir.rem(e, p.M, "m")
                    at = ir.add(ir.mul(ir.add(col_lo, kk, "ka"), p.M, "ka_row"), m, "a_at")
                else:                        # [M, K]: k fastest, av columns a load
                    m, kk = ir.div(e, width // av, "m"), ir.mul(ir.rem(e, width // av, "kv"), av, "kk")
                    at = ir.add(ir.mul(m, p.K, "a_row"), ir.add(col_lo, kk, "ka"), "a_at")
                ok = ir.and_(in_range, ir.cmp("slt", ir.add(col_lo, kk, "ka"), col_hi, "k_ok"))
                if s.halo:
                    ok = ir.and_(ok, ir.cmp("sge", ir.add(col_lo, kk, "ka"), 0, "k_pos"))
                xs = ir.load("A", ir.select(ok, at, 0, hint="a_safe"), vec=av)
                loaded.append((m, kk, [ir.fsel(ok, x, ir.f(0.0), "a_val") for x in xs], in_range))
            for m, kk, xs, in_range in loaded:      # a vector's elements side by side: shared vector stores
                ir.guarded(in_range, lambda m=m, kk=kk, xs=xs: ir.smem_write_vector(sm, count, self.staged_index(m, kk),
                                                                                    xs))
        if rounds == 1:
            one_round(0)
        else:
            with ir.range_loop(0, rounds * per_round * s.threads, per_round * s.threads, [], "sr") \
                    as (first, _, _):
                one_round(first)
        ir.emit("gpu.barrier")

    # ---------------------------------------------------------------- the FMAs of one step
    def a_values(self, sm: str, count: int, kk) -> list[str]:
        """Lanes along N: A[:, chunk_lo + kk] (M values, read as vectors of the padded row)."""
        s = self.s
        width = min(4, s.m_pad)
        row = self.ir.mul(kk, s.m_pad, "a_row_s")
        vals = []
        for q in range(0, s.m_pad, width):
            vals += self.ir.smem_read(sm, count, self.ir.add(row, q, "a_q"), width)
        return vals[:self.p.M]

    def fmas_n(self, acc: list[str], a: list[str], b: list[str]) -> list[str]:
        out = list(acc)
        vec = self.s.vec
        for m, am in enumerate(a):
            for v, bv in enumerate(b):
                out[m * vec + v] = self.ir.fma(am, bv, out[m * vec + v])
        return out

    def fmas_k(self, acc: list[str], sm: str, count: int, kk, bs: list[list[str]]) -> list[str]:
        """Lanes along K: for each row m of A, its ``vec`` values at kk times each of the warp's rows of B."""
        p, s, ir = self.p, self.s, self.ir
        out = list(acc)
        for m in range(p.M):
            if s.row_shift:              # element v of the vector is k = kk + v - shift: staged halo columns on
                at = ir.add(ir.mul(m, s.a_chunk + s.halo, "a_row_s"), ir.sub(ir.add(kk, s.halo, "a_kh"), self.shift,
                                                                             "a_ks"), "a_at_s")
                a = [ir.smem_read(sm, count, ir.add(at, v, "a_at_v"), 1)[0] for v in range(s.vec)]
            else:
                a = ir.smem_read(sm, count, ir.add(ir.mul(m, s.a_chunk, "a_row_s"), kk, "a_at_s"), s.vec)
            for j, b in enumerate(bs):
                for v in range(s.vec):
                    out[m * s.rows + j] = ir.fma(a[v], b[v], out[m * s.rows + j])
        return out

    # ---------------------------------------------------------------- the K loop of one chunk
    def trip(self, cur: list[str], sm: str, count: int, where, t, chunk_lo, chunk_hi, tail: bool) -> list[str]:
        """One trip from ``t``: every thread's ``unroll`` (x ``rows``) loads of B first, then the FMAs."""
        return self.trip_fmas(cur, sm, count, self.trip_loads(where, t, chunk_hi, tail), chunk_lo)

    def trip_loads(self, where, t, chunk_hi, tail: bool) -> tuple[list, list, list]:
        """The loads of the trip from ``t``: (its steps, whether each lies below ``chunk_hi``, B's vectors).
        A ``tail`` trip (the rest of a chunk, shorter than a trip) predicates each step on lying below
        ``chunk_hi``: its loads read row / column 0 instead (shifted rows along N: row k mod vec, whose
        shift is the thread's), and its FMAs leave the sums as they were."""
        ir, p, s = self.ir, self.p, self.s
        index, columns = where              # along N: (tk, the thread's first column); along K: (lane, the rows)
        if s.lanes_along == "n":
            steps = [ir.add(ir.add(t, index, "r0"), i * s.threads_k, "r") for i in range(s.unroll)]
        else:
            steps = [ir.add(ir.add(t, ir.mul(index, s.vec, "lane_k"), "k0"), u * WARP * s.vec, "k")
                     for u in range(s.unroll)]
        valid = [ir.cmp("slt", k, chunk_hi, "step_ok") if tail else True for k in steps]
        shifted_n = s.lanes_along == "n" and s.row_shift     # a row past the chunk reads row k mod vec: the same shift
        safe = [ir.select(ok, k, ir.rem(k, s.vec, "k_res") if shifted_n and tail else 0, hint="k_safe")
                for k, ok in zip(steps, valid)]
        if shifted_n:
            bs = [self.shifted_columns(k, columns) for k in safe]
        elif s.lanes_along == "n":
            bs = [ir.load("B", ir.add(ir.mul(k, p.N, "b_row"), columns, "b_at"), s.vec) for k in safe]
        elif s.row_shift:                # ``columns``: each row's aligned start n K - shift; a vector past the
            safe = [ir.min(k, self.last_vector, "k_in") for k in safe]     # row's last reads that one instead
            bs = [[ir.load("B", ir.add(start, k, "b_at"), s.vec) for start in columns] for k in safe]
        else:
            bs = [[ir.load("B", ir.add(ir.mul(n, p.K, "b_row"), k, "b_at"), s.vec) for n in columns] for k in safe]
        return steps, valid, bs

    def trip_fmas(self, cur: list[str], sm: str, count: int, loaded: tuple[list, list, list], chunk_lo) -> list[str]:
        """The FMAs of a trip whose loads ``trip_loads`` issued (A read from the staged chunk).  A step
        past the chunk masks B's values to zero and reads A as staged: a trip never reaches past the
        chunk's ``a_chunk`` staged columns (a multiple of the trip), zero past its end, so its FMAs add
        exact zeros (0 x 0) whatever A and B hold elsewhere."""
        ir, p, s = self.ir, self.p, self.s
        zero = ir.f(0.0)
        for k, ok, b in zip(*loaded):
            kk = ir.sub(k, chunk_lo, "kk")
            if s.lanes_along == "n":
                cur = self.fmas_n(cur, self.a_values(sm, count, kk), [ir.fsel(ok, x, zero, "b_tail") for x in b])
            elif s.row_shift:            # element v is k + v - shift of the row: outside [0, K) masked.  A step past
                # the chunk may read A's columns k + v - shift just before chunk_hi: a chunk ends off a whole
                # trip only at the loop's extent (>= K + shift), so those columns lie at or past K: staged zero
                inside = [ir.and_(ok, ir.and_(ir.cmp("sge", ir.add(k, v, "kv"), self.shift, "in_lo"),
                                              ir.cmp("slt", ir.add(k, v, "kv"), ir.add(self.shift, p.K, "k_end_s"),
                                                     "in_hi"), "in_row"), "b_ok") for v in range(s.vec)]
                cur = self.fmas_k(cur, sm, count, kk, [[ir.fsel(inside[v], x, zero, "b_row_m") for v, x in enumerate(row)]
                                                       for row in b])
            else:
                cur = self.fmas_k(cur, sm, count, kk, [[ir.fsel(ok, x, zero, "b_tail") for x in row] for row in b])
        return cur

    def shifted_columns(self, k, column) -> list[str]:
        """Lanes along N, ``row_shift``: the thread's ``vec`` columns of row ``k`` from the two aligned
        vectors at ``k N + column - shift`` (within [0, B's last vector]; the second at most
        B's last vector: what lies past N is never written), taken out by a shifter on the shift's bits."""
        ir, p, s = self.ir, self.p, self.s
        start = ir.min(ir.max(ir.sub(ir.add(ir.mul(k, p.N, "b_row"), column, "b_col"), self.shift, "b_al"), 0,
                              "b_start0"), self.last_vector, "b_start")
        values = ir.load("B", start, s.vec) + ir.load("B", ir.min(ir.add(start, s.vec, "b_next"), self.last_vector,
                                                                      "b_next_in"), s.vec)
        step = s.vec // 2
        while step:                 # after the stage of ``step``: values[e] = the pair's e + the shift's bits >= step,
            bit = self.shift_bits[step]     # for the e the later stages (at most step - 1 further) still read
            values = [ir.fsel(bit, values[e + step], values[e], "b_shift") for e in range(s.vec + step - 1)]
            step //= 2
        return values

    def shift_rows(self, tk, chunk_lo) -> None:
        """Lanes along N, ``row_shift``: the shift of every row this thread reads in the chunk from
        ``chunk_lo``, ((chunk_lo + tk) N) mod vec: its rows are chunk_lo + tk + (threads along K) j, a
        multiple of vec apart (a slice or chunk may start anywhere, so the shift is the chunk's)."""
        ir, p, s = self.ir, self.p, self.s
        ir.comment(f"shifted rows along N: every row of this thread in the chunk (chunk_lo + tk + {s.threads_k} j) "
                   f"has the shift ((chunk_lo + tk) N) mod {s.vec}")
        self.shift = ir.rem(ir.mul(ir.add(chunk_lo, tk, "tk_k"), p.N, "tk_row"), s.vec, "shift")
        self.shift_bits = {b: ir.cmp("ne", ir.rem(ir.div(self.shift, b, "sh_q"), 2, "sh_b"), 0, "sh_bit")
                           for b in (1, 2, 4) if b < s.vec}

    def chunk(self, acc: list[str], sm: str, count: int, tid, where, chunk_lo, chunk_hi) -> list[str]:
        """A's chunk staged, then its whole trips and its tail trip; returns the sums.  With ``b_first``
        the first trip's loads of B come before the staging (B does not depend on A: the two loads'
        latencies overlap, one wait instead of two) and its FMAs after it."""
        ir, s = self.ir, self.s
        if s.lanes_along == "n" and s.row_shift:
            self.shift_rows(where[0], chunk_lo)
        length = ir.sub(chunk_hi, chunk_lo, "chunk_len")
        rest_lo = chunk_lo
        if s.b_first:
            whole_first = isinstance(length, int) and length >= s.span
            ir.comment("the first trip's loads of B, issued before A's staging" +
                       ("" if whole_first else " (each step predicated: the chunk may be shorter than a trip)"))
            first = self.trip_loads(where, chunk_lo, chunk_hi, tail=not whole_first)
            self.stage(sm, count, tid, chunk_lo, chunk_hi)
            acc = self.trip_fmas(acc, sm, count, first, chunk_lo)
            rest_lo = ir.add(chunk_lo, s.span, "rest_lo")
            length = ir.max(ir.sub(length, s.span, "rest0"), 0, "rest")
        else:
            self.stage(sm, count, tid, chunk_lo, chunk_hi)
        main_end = ir.add(rest_lo, ir.mul(ir.div(length, s.span, "trips"), s.span, "whole"), "main_end")
        ir.comment(f"whole trips of {s.span}: " + (f"{s.unroll} row(s) of B a thread, {s.threads_k} threads along K"
                                                   if s.lanes_along == "n" else
                                                   f"{s.unroll} vector(s) of each of the warp's {s.rows} row(s) a lane"))
        if main_end != rest_lo:
            with ir.range_loop(rest_lo, main_end, s.span, acc, "t") as (t, cur, state):
                state["out"] = self.trip(cur, sm, count, where, t, chunk_lo, chunk_hi, tail=False)
            acc = state["results"]
        if not (isinstance(length, int) and length % s.span == 0):
            ir.comment("tail trip: the rest of the chunk, each step predicated; skipped where the chunk "
                       "ends on a whole trip")
            acc = ir.when(ir.cmp("ne", ir.rem(length, s.span, "rest_k"), 0, "has_tail"), acc,
                          lambda cur: self.trip(cur, sm, count, where, main_end, chunk_lo, chunk_hi, tail=True),
                          "tail")
        return acc

    # ---------------------------------------------------------------- writing
    def write(self, bx, by, m, n, x: str) -> None:
        """One output: C with the epilogue (one slice), else the FP32 partial of slice ``by`` at
        ``[by, m, n - first column]`` of column block ``bx``'s region."""
        p, s, ir = self.p, self.s, self.ir
        if s.split:
            col = ir.sub(n, ir.mul(bx, s.columns, "w_c0"), "w_col")
            row = ir.add(ir.mul(by, p.M, "w_slab"), m, "w_row")
            at = ir.add(ir.add(ir.mul(bx, s.region(p.M), "w_region"), ir.mul(row, s.columns, "w_row_off"), "w_at0"),
                        col, "w_at")
            ir.store("W", at, [x])
        else:
            self.epilogue.store(m, n, x)

    def last_adds_slices(self, tid, bx) -> None:
        """K split: fence the partials, take a ticket; the CTA with the last one adds the column block's
        slices in order and writes C (module docstring)."""
        ir, p, s = self.ir, self.p, self.s
        outputs, groups = p.M * s.columns, s.reduce_groups
        per = cdiv(s.splits, groups)
        words = s.reduction_smem_bytes(p.M) // 4
        sm = ir.smem_f32(0, words)
        ir.comment(f"K split: the last of the column block's {s.splits} CTAs adds its slices in order")
        ir.emit(FENCE)
        ir.emit("gpu.barrier")
        one, zero = ir.const(1, "i32"), ir.const(0, "i32")

        def ticket():
            mine = ir.let("ticket", f"memref.atomic_rmw addi {one}, %T[{bx}] : (i32, memref<{s.grid(p.N)[0]}xi32>) -> i32")
            last = ir.pure("last", f"arith.cmpi eq, {mine}, {ir.const(s.splits - 1, 'i32')} : i32")
            ir.smem_write(sm, words, 0, ir.fsel(last, ir.f(1.0), ir.f(0.0), "verdict"))
        ir.guarded(ir.cmp("eq", tid, 0, "first_thread"), ticket)
        ir.emit("gpu.barrier")
        verdict = ir.smem_read(sm, words, 0, 1)[0]

        def reduce():
            ir.emit(FENCE)
            base = ir.mul(bx, s.region(p.M), "w_region")
            # (output, group) pairs q = g x outputs + o, a thread's in turn; its loads of the partials in
            # runs of REDUCE_UNROLL over all of them (loads first, then the adds: one trip a run), each
            # output's partials added in slice order
            pairs, loads = [], []
            for j in range(cdiv(outputs * groups, s.threads)):
                q = ir.add(tid, j * s.threads, "q")
                in_range = True if (j + 1) * s.threads <= outputs * groups else ir.cmp("slt", q, outputs * groups, "q_ok")
                o, g = (ir.rem(q, outputs, "o"), ir.div(q, outputs, "g")) if groups > 1 else (q, 0)
                pairs.append((q, o, in_range, ir.select(in_range, o, 0, hint="o_safe"),
                              ir.select(in_range, g, 0, hint="g_safe") if groups > 1 else 0))
                loads += [(len(pairs) - 1, i) for i in range(per)]
            totals = [None] * len(pairs)
            for run in range(0, len(loads), REDUCE_UNROLL):
                parts = []
                for j, i in loads[run:run + REDUCE_UNROLL]:
                    g, so = pairs[j][4], pairs[j][3]
                    sl = ir.add(ir.mul(g, per, "s_lo"), i, "sl")
                    valid = True if groups * per == s.splits else ir.cmp("slt", sl, s.splits, "sl_ok")
                    at = ir.add(ir.add(base, ir.mul(ir.select(valid, sl, 0, hint="sl_safe"), outputs, "w_slab"),
                                       "w_at0"), so, "w_at")
                    parts.append((j, ir.fsel(valid, ir.load_relaxed("W", at), ir.f(0.0), "part")))
                for j, x in parts:
                    totals[j] = x if totals[j] is None else ir.fadd(totals[j], x, "sum")
            sums = [(q, o, in_range, totals[j]) for j, (q, o, in_range, _, _) in enumerate(pairs)]
            if groups == 1:
                for _, o, in_range, total in sums:
                    ir.guarded(in_range, lambda o=o, total=total: self.write_c(bx, o, total))
            else:
                for q, _, in_range, total in sums:
                    ir.guarded(in_range, lambda q=q, total=total: ir.smem_write(
                        sm, words, ir.add(q, FLAG_WORDS, "g_at"), total))
                ir.emit("gpu.barrier")
                for j in range(cdiv(outputs, s.threads)):
                    o = ir.add(tid, j * s.threads, "o")
                    in_range = True if (j + 1) * s.threads <= outputs else ir.cmp("slt", o, outputs, "o_ok")

                    def meet(o=o):
                        final = None
                        for k in range(groups):
                            x = ir.smem_read(sm, words, ir.add(o, FLAG_WORDS + k * outputs, "g_at"), 1)[0]
                            final = x if final is None else ir.fadd(final, x, "meet")
                        self.write_c(bx, o, final)
                    ir.guarded(in_range, meet)
            ir.guarded(ir.cmp("eq", tid, 0, "first_thread"),
                       lambda: ir.emit(f"memref.store {zero}, %T[{bx}] : memref<{s.grid(p.N)[0]}xi32>"))
        ir.guarded(ir.fcmp("oeq", verdict, ir.f(1.0), "is_last"), reduce)

    def write_c(self, bx, o, x: str) -> None:
        """Output ``o`` (= m x columns + c) of column block ``bx`` into C with the epilogue."""
        ir, p, s = self.ir, self.p, self.s
        m, c = ir.div(o, s.columns, "m"), ir.rem(o, s.columns, "c")
        n = ir.add(ir.mul(bx, s.columns, "c0"), c, "n")
        ok = True if p.N % s.columns == 0 else ir.cmp("slt", n, p.N, "n_ok")
        ir.guarded(ok, lambda: self.epilogue.store(m, n, x))



    def meet_n(self, sums: list[str], sm_bytes: int, tid, tk, tn, bx, by) -> None:
        """Lanes along N: the stacked threads' sums meet in shared memory, added in ``tk`` order."""
        ir, p, s = self.ir, self.p, self.s
        outputs = p.M * s.vec * s.threads_n
        count = sm_bytes // 4
        sm = ir.smem_f32(0, count)
        ir.comment(f"the {s.threads_k} stacked threads' sums of each column, added in order")
        mine = ir.add(ir.mul(tk, outputs, "red_slab"), tn, "red_mine")
        for m in range(p.M):
            for v in range(s.vec):
                ir.smem_write(sm, count, ir.add(mine, (m * s.vec + v) * s.threads_n, "red_at"), sums[m * s.vec + v])
        ir.emit("gpu.barrier")
        for j in range(cdiv(outputs, s.threads)):
            o = ir.add(tid, j * s.threads, "o")
            in_range = True if (j + 1) * s.threads <= outputs else ir.cmp("slt", o, outputs, "o_ok")
            tn_o = ir.rem(o, s.threads_n, "o_tn")
            v = ir.rem(ir.div(o, s.threads_n, "o_q"), s.vec, "o_v")
            m = ir.div(o, s.threads_n * s.vec, "o_m")
            n = ir.add(ir.mul(ir.add(ir.mul(bx, s.threads_n, "o_c0"), tn_o, "o_cv"), s.vec, "o_col"), v, "o_n")
            ok = ir.and_(in_range, True if p.N % s.columns == 0 else ir.cmp("slt", n, p.N, "n_ok"))

            def body(o=o, m=m, n=n):
                total = None
                for k in range(s.threads_k):
                    x = ir.smem_read(sm, count, ir.add(o, k * outputs, "red_at"), 1)[0]
                    total = x if total is None else ir.fadd(total, x, "meet")
                self.write(bx, by, m, n, total)
            ir.guarded(ok, body)

    def build(self) -> str:
        p, s, ir = self.p, self.s, self.ir
        check_supported(p, s)
        ir.emit(f"// Nova skinny GEMM: {p.describe()}; {s.label()}; k_slice {s.k_slice}, a_chunk {s.a_chunk}")
        staged = (s.a_chunk + s.halo) * (s.m_pad if s.lanes_along == "n" else p.M)
        with ir.rows_kernel(KERNEL_NAME, self.param_types(), s.threads, s.max_regs):
            tid = ir.let("tid", "gpu.thread_id x")
            bx = ir.let("bx", "gpu.block_id x")
            by = ir.let("by", "gpu.block_id y") if s.split else 0
            sm = ir.smem_f32(0, staged)
            if s.lanes_along == "n":
                tn = ir.rem(tid, s.threads_n, "tn") if s.threads_k > 1 else tid
                tk = ir.div(tid, s.threads_n, "tk") if s.threads_k > 1 else 0
                col = ir.mul(ir.add(ir.mul(bx, s.threads_n, "c0"), tn, "cv"), s.vec, "col")
                col_ok = True if p.N % s.columns == 0 else ir.cmp("slt", col, p.N, "col_ok")
                where = (tk, ir.select(col_ok, col, 0, hint="col_safe"))
                sums = s.vec
                if s.row_shift:          # the shift of the thread's rows: set per chunk (``chunk``)
                    self.last_vector = (p.K * p.N - 1) // s.vec * s.vec
            elif s.row_shift:
                lane = ir.rem(tid, WARP, "lane")
                warp = ir.div(tid, WARP, "warp")
                ir.comment(f"shifted rows: warp w owns rows c0 + (w mod {s.vec}) + {s.vec} (g {s.rows} + j), "
                           f"g = w div {s.vec}: one shift (n K mod {s.vec}) for all of them")
                first = ir.add(ir.add(ir.mul(bx, s.columns, "c0"), ir.rem(warp, s.vec, "w_res"), "c0r"),
                               ir.mul(ir.div(warp, s.vec, "w_grp"), s.vec * s.rows, "g_off"), "n_first")
                ns = [ir.add(first, j * s.vec, "n") for j in range(s.rows)]
                self.shift = ir.rem(ir.mul(first, p.K, "first_row"), s.vec, "shift")
                self.last_vector = ir.mul(ir.div(ir.add(self.shift, p.K - 1, "k_last"), s.vec, "v_last"), s.vec,
                                          "last_vector")
                starts = [ir.sub(ir.mul(n, p.K, "b_row"), self.shift, "b_start") for n in ns]
                if p.N % s.columns:      # a row past N reads B's first vector (aligned) and is never written
                    starts = [ir.select(ir.cmp("slt", n, p.N, "n_in"), b, 0, hint="b_safe") for n, b in zip(ns, starts)]
                where = (lane, starts)
                sums = s.rows
            else:
                lane = ir.rem(tid, WARP, "lane")
                warp = ir.div(tid, WARP, "warp")
                n0 = ir.mul(ir.add(ir.mul(bx, s.threads_n, "w0"), warp, "wv"), s.rows, "n0")
                ns = [ir.add(n0, j, "n") for j in range(s.rows)]
                safe = [n if p.N % s.columns == 0 else ir.min(n, p.N - 1, "n_safe") for n in ns]
                where = (lane, safe)
                sums = s.rows
            extent = s.k_extent(p.K)
            k_lo = ir.mul(by, s.k_slice, "k_lo")
            k_hi = ir.min(ir.add(k_lo, s.k_slice, "k_end"), extent, "k_hi") if s.split else extent
            acc = [ir.f(0.0)] * (p.M * sums)
            chunks = cdiv(s.k_slice, s.a_chunk)
            if chunks == 1:
                acc = self.chunk(acc, sm, staged, tid, where, k_lo, k_hi)
            else:
                with ir.range_loop(0, chunks, 1, acc, "ch") as (c, cur, state):
                    lo = ir.add(k_lo, ir.mul(c, s.a_chunk, "ch_off"), "ch_lo")
                    hi = ir.max(ir.min(ir.add(lo, s.a_chunk, "ch_end"), k_hi, "ch_hi0"), lo, "ch_hi")
                    state["out"] = self.chunk(cur, sm, staged, tid, where, lo, hi)
                    ir.emit("gpu.barrier")       # the next chunk overwrites the staged A
                acc = state["results"]
            if s.lanes_along == "n":
                if s.threads_k > 1:
                    if chunks == 1:
                        ir.emit("gpu.barrier")   # the sums overwrite the staged A
                    self.meet_n(acc, s.smem_bytes, tid, tk, tn, bx, by)
                else:
                    def own():
                        for m in range(p.M):
                            for v in range(s.vec):
                                n = ir.add(col, v, "n")
                                ir.guarded(True if p.N % s.vec == 0 else ir.cmp("slt", n, p.N, "n_ok"),
                                           lambda m=m, v=v, n=n: self.write(bx, by, m, n, acc[m * s.vec + v]))
                    ir.guarded(col_ok, own)
            else:
                self.warp_sums_and_write(acc, lane, ns, bx, by)
            if s.split:
                self.last_adds_slices(tid, bx)
        return ir.text()

    def warp_sums_and_write(self, acc: list[str], lane, ns: list, bx, by) -> None:
        """Lanes along K: a butterfly of xor shuffles adds the lanes' sums; lane 0 writes the warp's columns."""
        ir, p, s = self.ir, self.p, self.s
        ir.comment(f"the lanes' sums: {p.M * s.rows} values x 5 xor-shuffle steps")
        for off in (16, 8, 4, 2, 1):
            acc = [ir.fadd(x, ir.shfl_xor(x, off), "wsum") for x in acc]

        def lead():
            for j, n in enumerate(ns):
                def column(j=j, n=n):
                    for m in range(p.M):
                        self.write(bx, by, m, n, acc[m * s.rows + j])
                ir.guarded(True if p.N % s.columns == 0 else ir.cmp("slt", n, p.N, "n_ok"), column)
        ir.guarded(ir.cmp("eq", lane, 0, "lane0"), lead)


def build_skinny_module(problem: GemmProblem, schedule: SkinnySchedule) -> str:
    """The main kernel's MLIR text (module docstring)."""
    return SkinnyKernel(problem, schedule).build()
