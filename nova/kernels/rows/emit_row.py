"""The row kernel: ``(RowsProblem, RowsSchedule) -> MLIR text`` for every per-row kind.

Thread ``tid`` of CTA ``bx`` works on row ``bx * rows_per_cta + tid / threads_per_row``, lane
``tid % threads_per_row`` of it; in chunk ``c`` it touches the ``vec`` elements from column
``c * threads_per_row * vec + lane * vec`` (consecutive lanes, consecutive 16-byte vectors: coalesced).
A kernel is a sequence of *sweeps* over the thread's chunks (``sweep``): reductions (``reduce``, the
online max-sum ``lse``) and the final sweep that writes the row's results (``write``).  With
``in_registers`` the chunks are unrolled and each operand is loaded once (the later sweeps reuse the
loaded values; the schedule's ``early`` operands, which only the writing sweep reads, load in the first
sweep with the row); otherwise every sweep is an ``scf.for`` over the chunks that loads what it reads.
Row partials are combined by xor shuffles within the row's lanes and, for a CTA per row, through
shared memory (one slot per warp and value, one barrier per reduction).  Rows past the end read row 0
(addresses clamped) and write nothing; lanes past the row's end read its first vector and contribute
the reduction's identity.

With ``schedule.partials`` (a norm backward summing its weight/bias gradients in its pass) the grid is
``partials`` CTAs and CTA ``bx`` walks row groups ``bx``, ``bx + partials``, ... in an ``scf.for`` whose
carried values are the thread's column sums (dy * xhat, dy) of its ``chunks x vec`` columns; after the
loop the sums of the CTA's rows meet in shared memory (slots in order) and the CTA writes one partial
row per gradient into the workspace (``partials[gradient, bx, :]``), which ``partials_final`` adds.

With ``splits`` > 1 (a row reduction over few long rows) CTA ``bx`` reduces part ``bx % splits`` of row
``bx / splits``: its ``chunks`` vector steps start at step ``(bx % splits) x chunks``, and the part's
reduction goes to the workspace slot ``row_parts[row x splits + part]``, which ``row_final`` adds.
"""
from __future__ import annotations

from nova.kernels.rows.abi import KERNEL_NAMES, params, partial_outputs, row_operands
from nova.kernels.rows.emit import LOWEST, RowsCodegenError, RowsIr, evaluate, extent


def param_types(p, s, role: str) -> list[tuple[str, int, str]]:
    """``(name, extent, element type)`` of each parameter of kernel ``role``."""
    from nova.kernels.rows.abi import workspace_layout
    from nova.kernels.rows.kinds import column_problem
    ws, _ = workspace_layout(p, s)
    colp = column_problem(p)
    out = []
    for name, what in params(p, s, role):
        if what.startswith("ws:"):
            out.append((name, ws[what[3:]][1], "f32"))
            continue
        o = p.operand(name) or colp.operand(name)
        out.append((name, extent(colp if p.operand(name) is None else p, o), o.dtype))
    return out


class RowKernel:
    def __init__(self, p, s):
        self.p, self.s, self.t = p, s, s.row
        self.ir = RowsIr()
        self.smem_cursor = 0
        self.loaded: dict[tuple, list[str]] = {}
        self.partials = s.partials                 # weight/bias gradients summed in this pass (or None)
        self.sums: list[str] = []                  # their running column sums, [gradient][chunk][j]
        self.chunk_index = 0

    def build(self) -> str:
        p, t, ir = self.p, self.t, self.ir
        ir.emit(f"// Nova rows kernel: {p.describe()}; {t.threads_per_row} threads per row, {t.rows_per_cta} rows "
                f"per CTA, vec {t.vec}, {t.chunks} chunks, {'in registers' if t.in_registers else 'looped'}"
                + (f"; weight/bias gradients summed over {self.partials.groups_per_cta} row groups a CTA"
                   if self.partials else "") + (f"; each row over {t.splits} CTAs" if t.splits > 1 else ""))
        with ir.rows_kernel(KERNEL_NAMES["row"], param_types(p, self.s, "row"), t.threads, t.max_regs):
            self.setup()
            if self.partials is None:
                self.setup_row(self.row_group)
                getattr(self, "_" + p.kind)()
            else:
                self.summed_pass()
        if self.smem_cursor > t.smem_bytes:
            raise RowsCodegenError(f"{p.describe()}: reductions need {self.smem_cursor} B of shared memory, "
                                   f"the schedule gives {t.smem_bytes}")
        return ir.text()

    # ---------------------------------------------------------------- geometry
    def setup(self) -> None:
        t, ir = self.t, self.ir
        self.tid = ir.let("tid", "gpu.thread_id x")
        self.bx = ir.let("bx", "gpu.block_id x")
        self.lane = ir.rem(self.tid, t.threads_per_row, "lane") if t.threads_per_row < t.threads else self.tid
        self.slot = ir.div(self.tid, t.threads_per_row, "slot") if t.threads_per_row < t.threads else 0
        self.step = t.threads_per_row * t.vec
        self.lane_col = ir.mul(self.lane, t.vec, "lane_col")
        self.row_group, self.part = self.bx, None
        if t.splits > 1:                            # CTA bx: part bx % splits of row bx / splits
            self.row_group = ir.div(self.bx, t.splits, "row_group")
            self.part = ir.rem(self.bx, t.splits, "part")
            self.lane_col = ir.add(ir.mul(self.part, t.chunks * self.step, "part_col"), self.lane_col, "lane_col")

    def setup_row(self, group) -> None:
        """The thread's row in row group ``group`` (CTA ``bx`` without partials; a loop's group with them)."""
        p, t, ir = self.p, self.t, self.ir
        self.row = ir.add(ir.mul(group, t.rows_per_cta, "row0"), self.slot, "row")
        covered = t.rows_per_cta * (t.row_groups if self.partials is None else t.grid * self.partials.groups_per_cta)
        self.row_ok = ir.cmp("slt", self.row, p.rows, "row_ok") if covered != p.rows else True
        self.srow = ir.select(self.row_ok, self.row, 0, hint="srow")
        self.base = {o.name: ir.mul(self.srow, o.stride, f"{o.name}_row") for o in row_operands(p) if o.layout == "row"}
        self.leader = ir.and_(ir.cmp("eq", self.lane, 0, "lead"), self.row_ok)
        self.first_sweep = True                     # the row's first sweep also loads the schedule's early operands

    def chunk(self, c):
        """(first column, in-row flag) of chunk ``c`` (an int, or the loop's index)."""
        col = self.ir.add(self.ir.mul(c, self.step, "cstep"), self.lane_col, "col")
        if self.t.splits > 1:                       # every chunk of every part inside the row
            full = self.t.splits * self.t.chunks * self.step == self.p.n
        else:
            full = (c + 1) * self.step <= self.p.n if isinstance(c, int) else self.p.n % self.step == 0
        return col, True if full else self.ir.cmp("slt", col, self.p.n, "in_row")

    def envs(self, names, c, col, ok) -> list[dict]:
        ir, vec = self.ir, self.t.vec
        safe = ir.select(ok, col, 0, hint="safe_col")
        per_name = {}
        for name in names:
            key = (name, c)
            if c is not None and key in self.loaded:
                per_name[name] = self.loaded[key]
                continue
            o = self.p.operand(name)
            off = ir.add(self.base[name], safe, f"{name}_off") if o.layout == "row" else safe
            vals = ir.load(name, off, vec)
            if c is not None:
                self.loaded[key] = vals
            per_name[name] = vals
        return [{name: per_name[name][j] for name in names} for j in range(vec)]

    def sweep(self, names, carry, body):
        """``body(envs, in_row, column, carry) -> carry`` over every chunk of the thread's row.  Kept in
        registers, the row's first sweep also loads ``early`` operands (read only by the writing sweep)."""
        if self.t.in_registers:
            if self.first_sweep:
                names = list(names) + [n for n in self.t.early if n not in names]
                self.first_sweep = False
            for c in range(self.t.chunks):
                self.chunk_index = c
                col, ok = self.chunk(c)
                carry = body(self.envs(names, c, col, ok), ok, col, carry)
            return carry
        with self.ir.loop(self.t.chunks, carry) as (k, inner, state):
            col, ok = self.chunk(k)
            state["out"] = body(self.envs(names, None, col, ok), ok, col, inner)
        return state.get("results", [])

    # ---------------------------------------------------------------- reductions
    def reduce(self, names, fn, ops):
        """Row reductions (``add``, ``max``, ``min``) of ``fn(env) -> [values]`` over the row, in every lane."""
        ir = self.ir
        neutral = {"add": 0.0, "max": LOWEST, "min": -LOWEST}
        combine = {"add": ir.fadd, "max": ir.fmax, "min": ir.fmin}

        def body(envs, ok, col, carry):
            carry = list(carry)
            for env in envs:
                for i, v in enumerate(fn(env)):
                    carry[i] = combine[ops[i]](carry[i], ir.fsel(ok, v, ir.f(neutral[ops[i]])), "acc")
            return carry
        part = self.sweep(names, [ir.f(neutral[op]) for op in ops], body)
        return self.allreduce(part, lambda a, b: [combine[op](x, y, "red") for op, x, y in zip(ops, a, b)])

    def lse(self, name: str):
        """(max, sum of exp(x - max)) over the row: online, one sweep, chunk by chunk."""
        ir = self.ir

        def body(envs, ok, col, carry):
            m, s = carry
            xs = [e[name] for e in envs]
            mc = ir.f(LOWEST)
            for x in xs:
                mc = ir.fmax(mc, ir.fsel(ok, x, ir.f(LOWEST)), "mc")
            mn = ir.fmax(m, mc, "mnew")
            s = ir.fmul(s, ir.exp(ir.fsub(m, mn)), "sres")
            for x in xs:
                s = ir.fadd(s, ir.fsel(ok, ir.exp(ir.fsub(x, mn)), ir.f(0.0)), "sacc")
            return [mn, s]
        m, s = self.sweep([name], [ir.f(LOWEST), ir.f(0.0)], body)
        return self.allreduce([m, s], self.combine_lse)

    def combine_lse(self, a, b):
        ir = self.ir
        m = ir.fmax(a[0], b[0], "cm")
        return [m, ir.fadd(ir.fmul(a[1], ir.exp(ir.fsub(a[0], m))), ir.fmul(b[1], ir.exp(ir.fsub(b[0], m))), "cs")]

    def allreduce(self, vals, combine):
        ir, tpr = self.ir, self.t.threads_per_row
        off = 1
        while off < min(tpr, 32):
            vals = combine(vals, [ir.shfl_xor(v, off) for v in vals])
            off *= 2
        if tpr <= 32:
            return vals
        warps, nv = tpr // 32, len(vals)
        sm = ir.smem_f32(self.smem_cursor, warps * nv)
        self.smem_cursor += 4 * warps * nv
        lane32, warp = ir.rem(self.tid, 32, "lane32"), ir.div(self.tid, 32, "warp")
        smty = f"memref<{warps * nv}xf32, #smem>"

        def publish():
            for i, v in enumerate(vals):
                ir.emit(f"memref.store {v}, {sm}[{ir.v(ir.add(ir.mul(warp, nv), i))}] : {smty}")
        ir.guarded(ir.cmp("eq", lane32, 0, "wlead"), publish)
        ir.emit("gpu.barrier")
        acc = None
        for w in range(warps):
            got = [ir.let("wv", f"memref.load {sm}[{ir.v(w * nv + i)}] : {smty}") for i in range(nv)]
            acc = got if acc is None else combine(acc, got)
        return acc

    # ---------------------------------------------------------------- writing
    def write(self, names, fn) -> None:
        """The final sweep: ``fn(env, column index) -> {output: value}`` stored per element; with partials
        the values ``fn`` gives for the summed gradients (dweight, dbias) are added to the column sums."""
        ir = self.ir
        outs = {o.name for o in self.p.outputs if o.layout == "row"}
        summed = [o.name for o in partial_outputs(self.p)] if self.partials is not None else []

        def body(envs, ok, col, carry):
            values: dict[str, list] = {}
            keep = ir.and_(ok, self.row_ok)
            for j, env in enumerate(envs):
                got = fn(env, ir.add(col, j, "cj"))
                for name, v in got.items():
                    if name in outs:
                        values.setdefault(name, []).append(v)
                for q, name in enumerate(summed):
                    at = (q * self.t.chunks + self.chunk_index) * self.t.vec + j
                    self.sums[at] = ir.fadd(self.sums[at], ir.fsel(keep, got[name], ir.f(0.0)), "colsum")

            def store():
                for name, vs in values.items():
                    o = self.p.operand(name)
                    ir.store(name, ir.add(ir.mul(self.row, o.stride, f"{name}_orow"), col, f"{name}_dst"), vs)
            ir.guarded(ir.and_(ok, self.row_ok), store)
            return carry
        self.sweep(names, [], body)

    def write_row(self, values: dict) -> None:
        """Per-row results (statistics, losses) written by the row's first lane."""
        ir = self.ir
        present = {n: v for n, v in values.items() if n in ir.types}
        if present:
            ir.guarded(self.leader, lambda: [ir.store(n, self.row, [v]) for n, v in present.items()])

    # ---------------------------------------------------------------- weight/bias gradients in the pass
    def summed_pass(self) -> None:
        """The kind's body once per row group ``bx + k * partials``, the column sums carried; then one
        partial row per gradient (the CTA's row slots added in order through shared memory)."""
        ir, t, pt = self.ir, self.t, self.partials
        count = pt.outputs * t.chunks * t.vec
        with ir.loop(pt.groups_per_cta, [ir.f(0.0)] * count, "grp") as (k, carried, state):
            self.sums = list(carried)
            self.setup_row(ir.add(self.bx, ir.mul(k, pt.partials, "grp_off"), "group"))
            getattr(self, "_" + self.p.kind)()
            if t.threads_per_row > 32:
                ir.emit("gpu.barrier")          # the next group's reductions reuse the shared slots
            state["out"] = self.sums
        sums = state["results"]
        if t.rows_per_cta == 1:
            self.store_partials(sums)
        else:
            self.combine_slots(sums)

    def store_partials(self, sums) -> None:
        """A CTA of one row: each thread writes its columns' sums (vectors) into the partial rows."""
        ir, t, pt, n = self.ir, self.t, self.partials, self.p.n
        for c in range(t.chunks):
            col, ok = self.chunk(c)
            for q in range(pt.outputs):
                vals = sums[(q * t.chunks + c) * t.vec:(q * t.chunks + c + 1) * t.vec]
                base = ir.add(ir.mul(self.bx, n, "prow"), q * pt.partials * n, "pslab")
                ir.guarded(ok, lambda vals=vals, base=base, col=col: ir.store("partials", ir.add(base, col, "poff"), vals))

    def combine_slots(self, sums) -> None:
        """Several rows a CTA: the slots' sums through shared memory, each column's added in slot order."""
        ir, t, pt, n = self.ir, self.t, self.partials, self.p.n
        width = t.chunks * self.step                   # the padded row a slot covers
        size = t.rows_per_cta * pt.outputs * width
        sm = ir.smem_f32(0, size)
        smty = f"memref<{size}xf32, #smem>"
        self.smem_cursor = max(self.smem_cursor, 4 * size)
        for q in range(pt.outputs):
            for c in range(t.chunks):
                col, _ = self.chunk(c)
                for j in range(t.vec):
                    at = ir.add(ir.mul(ir.add(ir.mul(self.slot, pt.outputs, "sq"), q, "sq"), width, "sw"),
                                ir.add(col, j, "cj"), "sat")
                    ir.emit(f"memref.store {sums[(q * t.chunks + c) * t.vec + j]}, {sm}[{ir.v(at)}] : {smty}")
        ir.emit("gpu.barrier")
        with ir.loop(-(-n // t.threads), [], "pc") as (k, _, state):
            col = ir.add(ir.mul(k, t.threads, "pc0"), self.tid, "pcol")
            ok = True if n % t.threads == 0 else ir.cmp("slt", col, n, "pc_ok")

            def write():
                for q in range(pt.outputs):
                    total = None
                    for slot in range(t.rows_per_cta):
                        at = ir.add(col, (slot * pt.outputs + q) * width, "pat")
                        v = ir.let("ps", f"memref.load {sm}[{ir.v(at)}] : {smty}")
                        total = v if total is None else ir.fadd(total, v, "pss")
                    dst = ir.add(ir.add(ir.mul(self.bx, n, "prow"), q * pt.partials * n, "pslab"), col, "poff")
                    ir.store("partials", dst, [total])
            ir.guarded(ok, write)

    def per_row(self, name: str) -> str:
        return self.ir.load(name, self.srow)[0]

    # ---------------------------------------------------------------- kinds
    def _affine(self, y, env):
        ir = self.ir
        if self.p.has("weight"):
            y = ir.fmul(y, env["weight"], "yw")
        if self.p.has("bias"):
            y = ir.fadd(y, env["bias"], "yb")
        return y

    def _affine_names(self, *names):
        return list(names) + [n for n in ("weight", "bias") if self.p.has(n) and self.p.operand(n) in self.p.inputs]

    def _layer_norm(self) -> None:
        ir, n = self.ir, self.p.n
        (s,) = self.reduce(["x"], lambda e: [e["x"]], ["add"])
        mean = ir.fmul(s, ir.f(1.0 / n), "mean")
        (s2,) = self.reduce(["x"], lambda e: [ir.fmul(ir.fsub(e["x"], mean), ir.fsub(e["x"], mean))], ["add"])
        rstd = ir.rsqrt(ir.fadd(ir.fmul(s2, ir.f(1.0 / n)), ir.f(self.p.attr("eps"))), "rstd")
        self.write_row({"mean": mean, "rstd": rstd})
        self.write(self._affine_names("x"), lambda e, c: {"y": self._affine(ir.fmul(ir.fsub(e["x"], mean), rstd), e)})

    def _rms_norm(self) -> None:
        ir, n = self.ir, self.p.n
        (s,) = self.reduce(["x"], lambda e: [ir.fmul(e["x"], e["x"])], ["add"])
        rstd = ir.rsqrt(ir.fadd(ir.fmul(s, ir.f(1.0 / n)), ir.f(self.p.attr("eps"))), "rstd")
        self.write_row({"rstd": rstd})
        self.write(self._affine_names("x"), lambda e, c: {"y": self._affine(ir.fmul(e["x"], rstd), e)})

    def _norm_backward(self, mean) -> None:
        ir, n = self.ir, self.p.n
        rstd = self.per_row("rstd")
        parts = [name for name in ("dy_1", "dy_2") if self.p.has(name)]
        names = ["dy"] + parts + ["x"] + (["weight"] if self.p.has("weight") else [])

        def grad(e):                             # dy, its parts added in order
            total = e["dy"]
            for name in parts:
                total = ir.fadd(total, e[name], "dy_sum")
            return total

        def g(e):
            return ir.fmul(grad(e), e["weight"], "g") if self.p.has("weight") else grad(e)

        def xhat(e):
            return ir.fmul(e["x"] if mean is None else ir.fsub(e["x"], mean), rstd, "xhat")
        if mean is None:
            (b,) = self.reduce(names, lambda e: [ir.fmul(g(e), xhat(e))], ["add"])
            a = None
        else:
            a, b = self.reduce(names, lambda e: [g(e), ir.fmul(g(e), xhat(e))], ["add", "add"])
        mb = ir.fmul(b, ir.f(1.0 / n), "mb")

        def dx(e, c):
            xh = xhat(e)
            v = ir.fsub(g(e), ir.fmul(xh, mb))
            if a is not None:
                v = ir.fsub(v, ir.fmul(a, ir.f(1.0 / n)))
            out = {"dx": ir.fmul(v, rstd, "dx")}
            if self.p.has("residual"):
                out["dx"] = ir.fadd(out["dx"], e["residual"], "dx_res")
            cast = self.p.operand("dx_cast")
            if cast is not None:                 # written rounded; the sum adds what the cast wrote
                out["dx_cast"] = out["dx"]
            if self.partials is not None:
                summed = out["dx"] if cast is None else ir.round_to(out["dx"], cast.dtype)
                out.update(dweight=ir.fmul(grad(e), xh, "dwx"), dbias=grad(e), dxsum=summed)
            return out
        self.write(names + (["residual"] if self.p.has("residual") else []), dx)

    def _layer_norm_backward(self) -> None:
        self._norm_backward(self.per_row("mean"))

    def _rms_norm_backward(self) -> None:
        self._norm_backward(None)

    def _softmax(self) -> None:
        ir = self.ir
        m, s = self.lse("x")
        inv = ir.fdiv(ir.f(1.0), s, "inv")
        self.write(["x"], lambda e, c: {"y": ir.fmul(ir.exp(ir.fsub(e["x"], m)), inv)})

    def _log_softmax(self) -> None:
        ir = self.ir
        m, s = self.lse("x")
        total = ir.fadd(m, ir.log(s), "lse")
        self.write(["x"], lambda e, c: {"y": ir.fsub(e["x"], total)})

    def _softmax_backward(self) -> None:
        ir = self.ir
        (a,) = self.reduce(["dy", "y"], lambda e: [ir.fmul(e["dy"], e["y"])], ["add"])
        self.write(["dy", "y"], lambda e, c: {"dx": ir.fmul(e["y"], ir.fsub(e["dy"], a))})

    def _log_softmax_backward(self) -> None:
        ir = self.ir
        (a,) = self.reduce(["dy"], lambda e: [e["dy"]], ["add"])
        self.write(["dy", "y"], lambda e, c: {"dx": ir.fsub(e["dy"], ir.fmul(ir.exp(e["y"]), a))})

    def _target(self):
        """(kept: i1, the target as stored) of this row."""
        ir = self.ir
        t = ir.load_raw("target", self.srow)
        ty = self.p.operand("target").dtype
        keep = ir.pure("keep", f"arith.cmpi ne, {t}, {ir.const(self.p.attr('ignore_index', -100), ty)} : {ty}")
        return keep, t, ty

    def _cross_entropy(self) -> None:
        ir = self.ir
        m, s = self.lse("logits")
        lse = ir.fadd(m, ir.log(s), "lse")

        def leader():
            keep, t, ty = self._target()
            safe = ir.pure("tsafe", f"arith.select {keep}, {t}, {ir.const(0, ty)} : {ty}")
            col = ir.pure("tcol", f"arith.index_cast {safe} : {ty} to index")
            xt = ir.load("logits", ir.add(self.base["logits"], col, "t_off"))[0]
            loss = ir.fsel(keep, ir.fsub(lse, xt), ir.f(0.0), "row_loss")
            ir.store("rowloss", self.row, [loss])
            if "lse" in ir.types:
                ir.store("lse", self.row, [lse])
        ir.guarded(self.leader, leader)

    def _gradient_row(self):
        """(kept, the target as stored, its type, the row's scale: dloss / count, or 0 for an ignored row,
        the target's column) of this row: what a cross-entropy gradient kernel needs besides the logits."""
        ir = self.ir
        keep, t, ty = self._target()
        scale = ir.load("scale", 0)[0]
        row_scale = ir.fsel(keep, scale, ir.f(0.0), "row_scale")
        tcol = ir.pure("tcol", f"arith.index_cast {t} : {ty} to index")
        return keep, t, ty, row_scale, tcol

    def _dlogit(self, x, hit, lse, row_scale, hint="m"):
        """``(softmax - onehot) * scale`` of one logit: ``(exp(x - lse) - hit) * row_scale``."""
        ir = self.ir
        p = ir.exp(ir.fsub(x, lse))
        return ir.fmul(ir.fsub(p, ir.fsel(hit, ir.f(1.0), ir.f(0.0))), row_scale, hint)

    def _cross_entropy_backward(self) -> None:
        ir = self.ir
        lse = self.per_row("lse")
        _, _, _, row_scale, tcol = self._gradient_row()

        def dlogits(e, c):
            return {"dlogits": self._dlogit(e["logits"], ir.cmp("eq", c, tcol, "hit"), lse, row_scale)}
        self.write(["logits"], dlogits)

    def _cross_entropy_forward_backward(self) -> None:
        """The row's loss and dlogits in one pass over its logits: the online log-sum-exp sweep, then the
        write sweep of ``(softmax - onehot) * scale``.  The lane that holds the target's logit writes the
        row's loss ``lse - logit`` from the value it holds, so no thread reads an element another writes
        (dlogits may take the logits' buffer); an ignored row's loss (0) is its first lane's."""
        ir = self.ir
        m, s = self.lse("logits")
        lse = ir.fadd(m, ir.log(s), "lse")
        keep, t, ty, row_scale, tcol = self._gradient_row()
        out = self.p.operand("dlogits")

        def body(envs, ok, col, carry):
            held, found = carry
            values = []
            for j, env in enumerate(envs):
                hit = ir.cmp("eq", ir.add(col, j, "cj"), tcol, "hit")
                x = env["logits"]
                values.append(self._dlogit(x, hit, lse, row_scale, "dlogit"))
                held = ir.fsel(hit, x, held, "held")
                found = ir.fsel(hit, ir.f(1.0), found, "found")
            dst = ir.add(ir.mul(self.row, out.stride, "dlogits_orow"), col, "dlogits_dst")
            ir.guarded(ir.and_(ok, self.row_ok), lambda: ir.store("dlogits", dst, values))
            return [held, found]
        held, found = self.sweep(["logits"], [ir.f(0.0), ir.f(0.0)], body)
        holder = ir.and_(ir.and_(keep, self.row_ok), ir.fcmp("ogt", found, ir.f(0.5), "holder"))
        ir.guarded(holder, lambda: ir.store("rowloss", self.row, [ir.fsub(lse, held, "row_loss")]))
        ignored = ir.pure("ignored", f"arith.cmpi eq, {t}, {ir.const(self.p.attr('ignore_index', -100), ty)} : {ty}")
        ir.guarded(ir.and_(self.leader, ignored), lambda: ir.store("rowloss", self.row, [ir.f(0.0)]))
        if "lse" in ir.types:
            ir.guarded(self.leader, lambda: ir.store("lse", self.row, [lse]))

    def _row_reduce(self) -> None:
        ir, p = self.ir, self.p
        pro = p.prologue
        op = {"sum": "add", "mean": "add", "max": "max", "min": "min"}[p.attr("op")]
        fixed = {o.name: (ir.load(o.name, self.srow if o.layout == "per_row" else 0)[0])
                 for o in p.inputs if o.layout in ("per_row", "scalar")}
        names = [o.name for o in p.inputs if o.layout in ("row", "col") and o.name in pro.used_inputs()]
        stored = [(i, name) for i, name in pro.store if name in ir.types]
        (index, out), = pro.reduce
        neutral = {"add": 0.0, "max": LOWEST, "min": -LOWEST}[op]
        combine = {"add": ir.fadd, "max": ir.fmax, "min": ir.fmin}[op]

        def body(envs, ok, col, carry):
            (acc,) = carry
            values: dict[str, list] = {}
            for env in envs:
                vals = evaluate(ir, pro, {**env, **fixed})
                acc = combine(acc, ir.fsel(ok, vals[index], ir.f(neutral)), "acc")
                for i, name in stored:
                    values.setdefault(name, []).append(vals[i])

            def store():
                for name, vs in values.items():
                    o = p.operand(name)
                    ir.store(name, ir.add(ir.mul(self.row, o.stride, f"{name}_orow"), col, f"{name}_dst"), vs)
            if values:
                ir.guarded(ir.and_(ok, self.row_ok), store)
            return [acc]
        part = self.sweep(names, [ir.f(neutral)], body)
        (total,) = self.allreduce(part, lambda a, b: [combine(a[0], b[0], "red")])
        if self.part is not None:                   # one part of the row: row_final adds the parts (and means)
            slot = ir.add(ir.mul(self.row, self.t.splits, "slot0"), self.part, "slot")
            ir.guarded(self.leader, lambda: ir.store("row_parts", slot, [total]))
            return
        if p.attr("op") == "mean":
            total = ir.fmul(total, ir.f(1.0 / p.n), "mean")
        self.write_row({out: total})


def build_row(p, s) -> str:
    return RowKernel(p, s).build()
