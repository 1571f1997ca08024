"""Run a generated kernel's MLIR on the CPU: every thread of a CTA in lockstep (tests without a GPU).

The kernels written with the ``Ir`` scaffold (one op a line, regions closed by ``}``) use a small set of
ops: index and FP32 arithmetic, ``math.fma``, global and shared ``memref``/``vector`` loads and stores,
``gpu.shuffle xor`` and ``up``, a warp ballot (inline ``vote.sync.ballot``), ``llvm.intr.ctpop``, ``gpu.barrier``, ``scf.for`` (iter_args, bounds that differ per thread) and
``scf.if`` (with results), ``memref.atomic_rmw addi``, fences and loads through a parameter's address (inline PTX ``ld``).  ``run_kernel`` parses the module's ``gpu.func`` and
executes it one CTA at a time (in grid order or a seeded random one), each SSA
value a numpy array over the CTA's threads, control flow under an active-thread mask:

* a loop runs while any thread's induction value is below its bound, the others masked off;
* every memory access of an active thread is checked against its buffer's extent (``OutOfBounds``), and
  a global vector access for starting on a multiple of its width (``Misaligned``: the GPU's "misaligned
  address");
* a barrier must be reached by every thread of the CTA, a shuffle by every lane of a warp;
* shared memory is checked for races between barriers (``Race``): a word one thread writes and another
  thread reads or writes in the same barrier interval.

Lockstep execution of a race-free program gives what the GPU gives; the race check makes "race-free"
a tested property rather than an assumption.  FP32 arithmetic is numpy's float32 (IEEE); ``math.fma``
rounds the float64 product-sum once to float32 (the product is exact in float64, so only the sum's
double rounding can differ from a fused FMA: at most one ulp, rarely); bf16/f16 storage holds float32
values rounded to nearest even on ``arith.truncf``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np


class OutOfBounds(AssertionError):
    pass


class Race(AssertionError):
    pass


class Misaligned(AssertionError):
    pass


@dataclass
class Op:
    results: list[str]
    name: str
    rest: str
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


_OP = re.compile(r"^(?:(%[\w#:]+(?:, %[\w]+)*) = )?([a-z_]+\.[a-z_.]+)\s*(.*)$")


def _parse_block(lines: list[str], i: int) -> tuple[list[Op], int]:
    ops = []
    while i < len(lines):
        ln = lines[i].strip()
        i += 1
        if not ln or ln.startswith("//"):
            continue
        if ln == "}" or ln.startswith("} {"):          # a region's end (with the op's attributes)
            return ops, i
        if ln == "} else {":
            return ops, -i
        m = _OP.match(ln)
        if m is None:
            raise ValueError(f"cannot parse line: {ln}")
        res, name, rest = m.groups()
        results = []
        if res:
            if ":" in res:                         # %r:2 = scf.for
                base, count = res.split(":")
                results = [f"{base}#{k}" for k in range(int(count))]
            else:
                results = [r.strip() for r in res.split(",")]
        op = Op(results, name, rest)
        if ln.endswith("{"):
            op.body, i = _parse_block(lines, i)
            if i < 0:
                op.orelse, i = _parse_block(lines, -i)
        ops.append(op)
    return ops, i


def parse(text: str, kernel: str | None = None) -> tuple[list[tuple[str, str]], list[Op]]:
    """(arguments as (name, memref type), body ops) of the module's (named) ``gpu.func``."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = re.search(r"gpu\.func @(\w+)\((.*?)\) kernel", ln)
        if m and (kernel is None or m.group(1) == kernel):
            args = [(a.split(":")[0].strip(), a.split(":", 1)[1].strip()) for a in m.group(2).split("%") if a.strip()]
            args = [("%" + n, t.rstrip(", ")) for n, t in args]
            body, _ = _parse_block(lines, i + 1)
            return args, body
    raise ValueError(f"no gpu.func {kernel or ''} in the module")


def _memref(ty: str) -> tuple[int, str]:
    m = re.match(r"memref<(\d+)x(\w+)", ty)
    return int(m.group(1)), m.group(2)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 (round to nearest even), held as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def round_to(x, ty: str):
    if ty in ("i32", "i64"):
        return np.asarray(x, dtype=np.float32)            # small integers: exact in a float32 buffer
    if ty == "bf16":
        return round_bf16(x)
    if ty == "f16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    return np.asarray(x, dtype=np.float32)


ADDRESS_BITS = 40        # a parameter's address: its index + 1 above these bits, its byte offset below


class _Cta:
    """One CTA's lockstep execution."""

    def __init__(self, memories: dict, smem_bytes: int, threads: int, block: tuple[int, int, int]):
        self.mem = memories                       # "%A" -> (np.float32 array, element type)
        self.base = {name: (k + 1) << ADDRESS_BITS for k, name in enumerate(memories)}
        self.threads = threads
        self.block = block
        self.tid = np.arange(threads, dtype=np.int64)
        self.smem = np.full(max(1, smem_bytes // 4), np.nan, dtype=np.float32)
        words = len(self.smem)
        self.epoch = 0
        self.w_epoch = np.full(words, -1)
        self.writer = np.full(words, -1)
        self.r_epoch = np.full(words, -1)
        self.reader = np.full(words, -1)
        self.env: dict = {}

    # -------------------------------------------------------------- values
    def val(self, name: str):
        return self.env[name]

    def bcast(self, x):
        x = np.asarray(x)
        return np.broadcast_to(x, (self.threads,) + x.shape[1:] if x.ndim else (self.threads,)) \
            if x.ndim == 0 or x.shape[0] != self.threads else x

    # -------------------------------------------------------------- memory
    def _global(self, name, idx, width, mask, what):
        buf, ty = self.mem[name]
        idx = np.asarray(self.bcast(idx), dtype=np.int64)
        bad = mask & ((idx < 0) | (idx + width > len(buf)))
        if bad.any():
            t = int(np.argmax(bad))
            raise OutOfBounds(f"{what} {name}[{int(idx[t])}:{int(idx[t]) + width}] of {len(buf)} by thread {t} "
                              f"of CTA {self.block}")
        off = mask & (idx % width != 0)
        if width > 1 and off.any():         # a vector access must start on a multiple of its width (the GPU
            t = int(np.argmax(off))         # faults: "misaligned address"; every buffer starts 16-byte aligned)
            raise Misaligned(f"{what} {name}[{int(idx[t])}:{int(idx[t]) + width}] (a {width}-element vector) by "
                             f"thread {t} of CTA {self.block}")
        return buf, ty, np.where(mask, idx, 0)

    def _smem_check(self, idx, width, mask, write: bool):
        idx = np.asarray(self.bcast(idx), dtype=np.int64)
        bad = mask & ((idx < 0) | (idx + width > len(self.smem)))
        if bad.any():
            t = int(np.argmax(bad))
            raise OutOfBounds(f"shared[{int(idx[t])}:{int(idx[t]) + width}] of {len(self.smem)} words by thread {t} "
                              f"of CTA {self.block}")
        threads = np.nonzero(mask)[0]
        words = (idx[threads][:, None] + np.arange(width)[None, :]).ravel()
        who = np.repeat(threads, width)
        order = np.argsort(words, kind="stable")
        words, who = words[order], who[order]
        first = np.r_[True, words[1:] != words[:-1]]
        starts = np.nonzero(first)[0]
        lo, hi = np.minimum.reduceat(who, starts), np.maximum.reduceat(who, starts)
        uniq = words[starts]
        many = lo != hi                                  # several threads touch the word in this op
        wrote = (self.w_epoch[uniq] == self.epoch) & ((self.writer[uniq] != lo) | many)
        if wrote.any():
            a = int(uniq[np.argmax(wrote)])
            raise Race(f"shared word {a}: {'written' if write else 'read'} by thread(s) {lo[np.argmax(wrote)]}.. "
                       f"after thread {self.writer[a]} wrote it in the same barrier interval (CTA {self.block})")
        if write:
            read = (self.r_epoch[uniq] == self.epoch) & ((self.reader[uniq] != lo) | many)
            if read.any() or many.any():
                a = int(uniq[np.argmax(read | many)])
                raise Race(f"shared word {a}: written by thread(s) {lo[np.argmax(read | many)]}.. while another "
                           f"thread reads or writes it in the same barrier interval (CTA {self.block})")
            self.w_epoch[uniq], self.writer[uniq] = self.epoch, lo
        else:
            again = (self.r_epoch[uniq] == self.epoch) & (self.reader[uniq] != lo)
            self.reader[uniq] = np.where(many | again, -2, lo)
            self.r_epoch[uniq] = self.epoch
        return np.where(mask, idx, 0)

    def load(self, ref, idx, width, mask, vector: bool):
        buf, _, idx = self._global(ref, idx, width, mask, "load")
        if vector:
            return buf[idx[:, None] + np.arange(width)[None, :]]
        return buf[idx]

    def store(self, ref, idx, value, width, mask):
        value = np.asarray(self.bcast(value), dtype=np.float32)
        buf, ty, idx = self._global(ref, idx, width, mask, "store")
        value = round_to(value, ty)
        for t in np.nonzero(mask)[0]:
            if width == 1:
                buf[idx[t]] = value[t]
            else:
                buf[idx[t]:idx[t] + width] = value[t]

    # -------------------------------------------------------------- execution
    def run(self, ops: list[Op], mask: np.ndarray) -> None:
        for op in ops:
            getattr(self, "op_" + op.name.replace(".", "_"))(op, mask)

    def set(self, op, value):
        self.env[op.results[0]] = value

    def args(self, text: str) -> list[str]:
        return re.findall(r"%[\w#]+", text)

    def op_arith_constant(self, op, mask):
        lit, ty = op.rest.rsplit(" : ", 1)
        if ty == "index" or ty.startswith("i") and ty != "i1":
            self.set(op, np.int64(int(lit)))
        elif ty == "i1":
            self.set(op, np.bool_(lit in ("1", "true")))
        else:
            # a hexadecimal float literal is the value's bit pattern (MLIR's spelling of inf and NaN)
            self.set(op, np.uint32(int(lit, 16)).view(np.float32) if lit.startswith("0x") else np.float32(float(lit)))

    def op_gpu_thread_id(self, op, mask):
        self.set(op, self.tid)

    def op_gpu_block_id(self, op, mask):
        self.set(op, np.int64(self.block["xyz".index(op.rest.strip())]))

    def _binary(self, op, fn):
        a, b = self.args(op.rest)[:2]
        self.set(op, fn(self.val(a), self.val(b)))

    def op_arith_addi(self, op, mask):
        self._binary(op, lambda a, b: a + b)

    def op_arith_subi(self, op, mask):
        self._binary(op, lambda a, b: a - b)

    def op_arith_muli(self, op, mask):
        self._binary(op, lambda a, b: a * b)

    def op_arith_divui(self, op, mask):
        self._binary(op, lambda a, b: np.floor_divide(a, np.where(b == 0, 1, b)))

    def op_arith_remui(self, op, mask):
        self._binary(op, lambda a, b: np.mod(a, np.where(b == 0, 1, b)))

    def op_arith_minsi(self, op, mask):
        self._binary(op, np.minimum)

    def op_arith_maxsi(self, op, mask):
        self._binary(op, np.maximum)

    def op_arith_andi(self, op, mask):
        self._binary(op, np.logical_and if op.rest.endswith("i1") else np.bitwise_and)

    def op_arith_ori(self, op, mask):
        self._binary(op, np.logical_or if op.rest.endswith("i1") else np.bitwise_or)

    def op_arith_shrui(self, op, mask):
        self._binary(op, lambda a, b: np.right_shift(np.asarray(a, np.int64) & 0xFFFFFFFF, b))

    def op_arith_extui(self, op, mask):
        self.set(op, np.asarray(self.val(self.args(op.rest)[0]), dtype=np.int64))

    def op_llvm_intr_ctpop(self, op, mask):
        x = np.asarray(self.bcast(self.val(self.args(op.rest)[0])), dtype=np.int64) & 0xFFFFFFFF
        self.set(op, np.array([bin(int(v)).count("1") for v in x], dtype=np.int64))

    def op_arith_cmpi(self, op, mask):
        pred, rest = op.rest.split(",", 1)
        a, b = self.args(rest)[:2]
        fn = {"slt": np.less, "sle": np.less_equal, "sgt": np.greater, "sge": np.greater_equal, "eq": np.equal,
              "ne": np.not_equal, "ult": np.less}[pred.strip()]
        self.set(op, fn(self.val(a), self.val(b)))

    def op_arith_select(self, op, mask):
        c, a, b = self.args(op.rest)[:3]
        cv, av, bv = self.val(c), self.val(a), self.val(b)
        if np.ndim(av) == 2 or np.ndim(bv) == 2:
            cv = np.asarray(cv)[..., None] if np.ndim(cv) else cv
        self.set(op, np.where(cv, av, bv))

    def op_arith_addf(self, op, mask):
        self._binary(op, lambda a, b: np.float32(a) + np.float32(b))

    def op_arith_subf(self, op, mask):
        self._binary(op, lambda a, b: np.float32(a) - np.float32(b))

    def op_arith_mulf(self, op, mask):
        self._binary(op, lambda a, b: np.float32(a) * np.float32(b))

    def op_arith_divf(self, op, mask):
        with np.errstate(divide="ignore", invalid="ignore"):
            self._binary(op, lambda a, b: np.float32(a) / np.float32(b))

    def op_arith_maximumf(self, op, mask):
        self._binary(op, np.maximum)

    def op_arith_minimumf(self, op, mask):
        self._binary(op, np.minimum)

    def op_arith_maxnumf(self, op, mask):
        self._binary(op, np.fmax)

    def op_arith_negf(self, op, mask):
        self.set(op, -self.val(self.args(op.rest)[0]))

    def op_arith_extf(self, op, mask):
        self.set(op, np.asarray(self.val(self.args(op.rest)[0]), dtype=np.float32))

    def op_arith_truncf(self, op, mask):
        x = self.val(self.args(op.rest)[0])
        target = op.rest.rsplit(" to ", 1)[1]
        self.set(op, round_to(x, re.sub(r"vector<\d+x(\w+)>", r"\1", target)))

    def op_math_fma(self, op, mask):
        a, b, c = (np.asarray(self.val(x), dtype=np.float64) for x in self.args(op.rest)[:3])
        with np.errstate(invalid="ignore", over="ignore"):
            self.set(op, (a * b + c).astype(np.float32))

    def op_llvm_intr_fma(self, op, mask):
        self.op_math_fma(op, mask)

    def op_vector_fma(self, op, mask):
        self.op_math_fma(op, mask)

    def op_vector_broadcast(self, op, mask):
        width = int(re.search(r"to vector<(\d+)x", op.rest).group(1))
        x = np.asarray(self.bcast(self.val(self.args(op.rest)[0])))
        self.set(op, np.repeat(x[:, None], width, axis=1))

    def op_memref_extract_aligned_pointer_as_index(self, op, mask):
        ref = self.args(op.rest)[0]
        self.set(op, np.int64(self.base[ref]))

    def op_arith_index_cast(self, op, mask):
        self.set(op, self.val(self.args(op.rest)[0]))

    def op_llvm_inline_asm(self, op, mask):
        instr = re.search(r'"([^"]+)"', op.rest).group(1)
        if not op.results:                     # a fence (membar.gl): lockstep CTAs run one after the other
            assert instr.startswith("membar") or instr.startswith("fence"), instr
            return
        if "vote.sync.ballot.b32" in instr:   # each lane: the bits of its warp's lanes whose argument is not 0
            bits = np.asarray(self.bcast(self.val(self.args(op.rest.split('"')[-1])[0])), dtype=np.int64) != 0
            out = np.zeros(self.threads, dtype=np.int64)
            for w in range(0, self.threads, 32):
                if not mask[w:w + 32].all():
                    raise Race(f"a ballot reached by part of warp {w // 32} (CTA {self.block})")
                out[w:w + 32] = int(sum(1 << j for j in range(32) if bits[w + j]))
            self.set(op, out)
            return
        instr = instr.split()[0]
        if instr.startswith("ld."):            # a load through an address (``base`` of a parameter + bytes)
            addr = np.asarray(self.bcast(self.val(self.args(op.rest.split('"')[-1])[0])), dtype=np.int64)
            owner = {v: k for k, v in self.base.items()}
            ref = owner[int(addr[np.argmax(mask)] >> ADDRESS_BITS << ADDRESS_BITS)] if mask.any() else None
            offset = (addr & ((1 << ADDRESS_BITS) - 1)) // 4
            assert not mask.any() or (addr[mask] >> ADDRESS_BITS == self.base[ref] >> ADDRESS_BITS).all()
            self.set(op, self.load(ref, offset, 1, mask, False) if ref else np.zeros(self.threads, np.float32))
            return
        x = np.asarray(self.val(self.args(op.rest)[0]), dtype=np.float32)
        with np.errstate(all="ignore"):
            fn = {"ex2.approx.ftz.f32": np.exp2, "lg2.approx.ftz.f32": np.log2, "tanh.approx.f32": np.tanh,
                  "rsqrt.approx.ftz.f32": lambda v: 1 / np.sqrt(v), "sqrt.rn.f32": np.sqrt,
                  "abs.f32": np.abs}[instr]
            self.set(op, fn(x).astype(np.float32))

    def op_gpu_dynamic_shared_memory(self, op, mask):
        self.set(op, np.int64(0))

    def op_memref_view(self, op, mask):
        _, off = self.args(op.rest)[:2]
        offset = int(self.val(off))
        assert offset % 4 == 0, "shared views start on a 4-byte boundary"
        self.env[op.results[0]] = ("smem", offset // 4)

    def _ref(self, name):
        """(buffer key, word offset): a global parameter, or a view of shared memory."""
        if name in self.mem:
            return name, 0
        kind, off = self.env[name]
        return "smem", off

    def op_memref_load(self, op, mask):
        ref, idx = re.match(r"(%\w+)\[(%\w+)\]", op.rest).groups()
        key, off = self._ref(ref)
        if key == "smem":
            self.set(op, self.load_smem(self.val(idx) + off, 1, mask, False))
        else:
            self.set(op, self.load(key, self.val(idx), 1, mask, False))

    def load_smem(self, idx, width, mask, vector):
        idx = self._smem_check(idx, width, mask, write=False)
        return self.smem[idx[:, None] + np.arange(width)[None, :]] if vector else self.smem[idx]

    def op_memref_store(self, op, mask):
        value, ref, idx = re.match(r"(%[\w#]+), (%\w+)\[(%\w+)\]", op.rest).groups()
        key, off = self._ref(ref)
        self.store_any(key, self.val(idx) + off, self.val(value), 1, mask)

    def store_any(self, key, idx, value, width, mask):
        if key == "smem":
            idx = self._smem_check(idx, width, mask, write=True)
            value = np.asarray(self.bcast(value), dtype=np.float32)
            for t in np.nonzero(mask)[0]:
                self.smem[idx[t]:idx[t] + width] = value[t]
        else:
            self.store(key, idx, value, width, mask)

    def op_vector_load(self, op, mask):
        ref, idx = re.match(r"(%\w+)\[(%\w+)\]", op.rest).groups()
        width = int(re.search(r"vector<(\d+)x", op.rest).group(1))
        key, off = self._ref(ref)
        if key == "smem":
            self.set(op, self.load_smem(self.val(idx) + off, width, mask, True))
        else:
            self.set(op, self.load(key, self.val(idx), width, mask, True))

    def op_vector_store(self, op, mask):
        value, ref, idx = re.match(r"(%[\w#]+), (%\w+)\[(%\w+)\]", op.rest).groups()
        width = int(re.search(r"vector<(\d+)x", op.rest).group(1))
        key, off = self._ref(ref)
        self.store_any(key, self.val(idx) + off, self.val(value), width, mask)

    def op_vector_extract(self, op, mask):
        v, pos = re.match(r"(%[\w#]+)\[(\d+)\]", op.rest).groups()
        self.set(op, np.asarray(self.val(v))[:, int(pos)])

    def op_vector_from_elements(self, op, mask):
        xs = [self.bcast(self.val(a)) for a in self.args(op.rest)]
        self.set(op, np.stack(xs, axis=1).astype(np.float32))

    def op_arith_cmpf(self, op, mask):
        pred, rest = op.rest.split(",", 1)
        a, b = self.args(rest)[:2]
        fn = {"oeq": np.equal, "olt": np.less, "ole": np.less_equal, "ogt": np.greater, "oge": np.greater_equal,
              "une": np.not_equal}[pred.strip()]
        self.set(op, fn(self.val(a), self.val(b)))

    def op_memref_atomic_rmw(self, op, mask):
        kind, value, ref, idx = re.match(r"(\w+) (%[\w#]+), (%\w+)\[(%\w+)\]", op.rest).groups()
        assert kind == "addi" and ref in self.mem, op.rest
        buf, _, at = self._global(ref, self.val(idx), 1, mask, "atomic")
        add, old = self.bcast(self.val(value)), np.zeros(self.threads, dtype=np.float32)
        for t in np.nonzero(mask)[0]:          # one thread after the other, in thread order
            old[t] = buf[at[t]]
            buf[at[t]] = old[t] + add[t]
        self.set(op, old)

    def op_gpu_barrier(self, op, mask):
        if not mask.all():
            raise Race(f"a barrier reached by {int(mask.sum())} of {self.threads} threads (CTA {self.block})")
        self.epoch += 1

    def op_gpu_shuffle(self, op, mask):
        mode, rest = op.rest.split(" ", 1)
        x, off, width = self.args(rest)[:3]
        assert mode in ("xor", "up") and int(self.val(width)) == 32
        for w in range(0, self.threads, 32):
            if mask[w:w + 32].any() and not mask[w:w + 32].all():
                raise Race(f"a shuffle reached by part of warp {w // 32} (CTA {self.block})")
        lane, k = self.tid % 32, int(self.val(off))
        if mode == "xor":
            src, valid = self.tid ^ k, np.ones(self.threads, dtype=bool)
        else:                                  # up: lane - k, the lane's own value below lane k
            valid = lane >= k
            src = np.where(valid, self.tid - k, self.tid)
        self.env[op.results[0]] = self.bcast(self.val(x))[src]
        self.env[op.results[1]] = valid

    @staticmethod
    def split_yield(region: list) -> tuple[list, Op | None]:
        """A region's ops before its ``scf.yield``, and the yield (None where it has none)."""
        if region and region[-1].name == "scf.yield":
            return region[:-1], region[-1]
        return region, None

    def yielded(self, yield_op) -> list:
        """The values an ``scf.yield`` hands out, per thread."""
        return [self.bcast(self.val(a)) for a in self.args(yield_op.rest.rsplit(" : ", 1)[0])]

    def op_scf_if(self, op, mask):
        """Both regions run on their threads; with results, each region's ``scf.yield`` gives its
        threads' values."""
        cond = self.bcast(self.val(self.args(op.rest)[0])).astype(bool)
        outs = [None] * len(op.results)
        for region, where in ((op.body, mask & cond), (op.orelse, mask & ~cond)):
            body, yield_op = self.split_yield(region)
            if where.any():
                self.run(body, where)
                if yield_op is not None:
                    outs = [n if o is None else np.where(where, n, o) for n, o in zip(self.yielded(yield_op), outs)]
        for name, v in zip(op.results, outs):
            self.env[name] = v

    def op_scf_for(self, op, mask):
        m = re.match(r"(%\w+) = (%\w+) to (%\w+) step (%\w+)(?: iter_args\((.*?)\))?", op.rest)
        it, lo, hi, step, iters = m.groups()
        pairs = [p.split(" = ") for p in iters.split(", ")] if iters else []
        carried = [self.bcast(self.val(b)).copy() for _, b in pairs]
        t = self.bcast(self.val(lo)).astype(np.int64).copy()
        hi_v, step_v = self.bcast(self.val(hi)), int(self.val(step))
        body, yield_op = self.split_yield(op.body)
        while True:
            active = mask & (t < hi_v)
            if not active.any():
                break
            self.env[it] = t
            for (name, _), v in zip(pairs, carried):
                self.env[name] = v
            self.run(body, active)
            if yield_op is not None:
                carried = [np.where(active, n, c) for n, c in zip(self.yielded(yield_op), carried)]
            t = t + step_v
        for name, v in zip(op.results, carried):
            self.env[name] = v

    def op_gpu_return(self, op, mask):
        pass


def run_kernel(text: str, kernel: str, grid: tuple[int, int, int], threads: int, smem_bytes: int,
               buffers: dict[str, np.ndarray], shuffle_seed: int | None = None) -> None:
    """Run ``kernel`` of ``text`` over ``grid`` on ``buffers`` (by parameter name, float32 numpy arrays of
    values representable in the parameter's element type; written in place).  CTAs run one after the
    other, in grid order or (``shuffle_seed``) a seeded random order: a kernel whose CTAs meet through
    global memory (a ticket counter) must not depend on which runs last."""
    args, body = parse(text, kernel)
    memories = {}
    for name, ty in args:
        extent, elem = _memref(ty)
        buf = buffers[name.lstrip("%")]
        assert buf.dtype == np.float32 and buf.ndim == 1 and len(buf) >= extent, (name, buf.shape, extent)
        memories[name] = (buf[:extent], elem)
    order = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    if shuffle_seed is not None:
        np.random.default_rng(shuffle_seed).shuffle(order)
    for block in order:
        _Cta(memories, smem_bytes, threads, block).run(body, np.ones(threads, dtype=bool))
