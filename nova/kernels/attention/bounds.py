"""Exact bounds check of a generated attention kernel's memory accesses, on the host (no GPU).

``check_bounds(mlir_text, grid, threads, smem_bytes, tma_dims)`` reads the MLIR text the builders write
(``build_hopper_bwd`` and the like), evaluates the index arithmetic of every memory access over every
(block, thread, loop iteration) that reaches it (the enclosing ``scf.if`` conditions and ``scf.for``
bounds evaluated too) with numpy, and returns the violations:

* global ``memref.load`` / ``memref.store`` / ``vector.load`` / ``vector.store`` / ``cp.async`` sources
  against the 1-D memref's extent (a vector access: its last element too);
* shared-memory views (``memref.view %dsm[off]``) against the dynamic shared memory launched
  (``smem_bytes``, from the dynamic base ``dsm_addr``; a TMA box 1024-byte aligned, its 128-byte swizzle
  atoms), accesses through them (ld/st, ``ldmatrix``, ``cp.async``) against their shape, and mbarrier
  indices against their group;
* TMA loads: each coordinate against the tensor map's dims (``dims[name]`` innermost first, e.g.
  (D, T, H, B)): the innermost and the row coordinates may run past the end (TMA zero-fills rows
  beyond T), a head or batch coordinate must not (nor any coordinate be negative);
* wgmma shared-memory descriptors: the start address (bits 0-13, x 16) of every ``wgmma`` operand
  inside the dynamic shared memory.

Only what the index arithmetic needs is interpreted: ``arith`` integer ops, ``gpu.thread_id`` /
``block_id`` (x, y, z) / ``grid_dim``, ``scf.for`` / ``scf.if`` (else regions negated), ``memref.extract_aligned_pointer_as_index``
of the dynamic shared memory (``dsm_addr``), the identity inline-asm move of a descriptor.  Values that
are not integers (floats, loaded data) are never addresses in these kernels; an address that depends on
one raises ``BoundsError``.  A loop-carried index (``scf.for ... iter_args(%x = init)``) is known only
in the two forms the kernels carry, a counter yielded modulo a constant (``scf.yield (..) % C`` with
0 <= init < C, the persistent forward's ring position) or wrapped at one (``select(x == C, 0, x)``, the
mma.sync kernels' ring slot): it is checked over all of [0, C).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np


POISON = np.int64(1 << 60)     # an unsigned operation's result on a negative (i.e. huge) operand


class BoundsError(Exception):
    pass


_DEF = re.compile(r"^\s*(%[\w$.-]+)\s*=\s*([\w.]+)\s*(.*)$")
_CMP = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
        "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal, "ugt": np.greater, "uge": np.greater_equal}
_BIN = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply, "arith.maxsi": np.maximum,
        "arith.minsi": np.minimum, "arith.maxui": np.maximum, "arith.minui": np.minimum,
        "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor}


@dataclass
class Access:
    kind: str                  # "global", "smem", "view", "tma", "wgmma"
    line: int
    text: str
    target: str
    indices: list
    extent: tuple = ()         # memref shape (global / smem), view bytes (view), dims (tma)
    width: int = 1             # vector elements along the last dim
    conds: list = field(default_factory=list)    # (ssa name, wanted truth)
    loops: list = field(default_factory=list)    # (iv, lb, ub, step, loop-carried names)


@dataclass
class Kernel:
    defs: dict
    accesses: list
    args: dict                 # name -> memref shape (global memref arguments)
    carried: dict = field(default_factory=dict)   # loop-carried index -> C: it ranges over [0, C)


def _operands(s: str) -> list[str]:
    return re.findall(r"%[\w$.-]+(?:#\d+)?", s)


def _shape(ty: str) -> tuple[tuple[int, ...], str]:
    m = re.search(r"memref<([\dx?]+?)x?([a-z]+\d*)(?:,|>)", ty)
    if not m:
        raise BoundsError(f"memref type not understood: {ty}")
    dims = tuple(int(x) for x in m.group(1).split("x") if x and x != "?")
    return dims, m.group(2)


_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "f64": 8}


def parse(text: str, tma_dims: dict[str, tuple[int, ...]] | None = None) -> Kernel:
    """The definitions, memory accesses and their enclosing regions of the (one) kernel in ``text``."""
    defs, accesses, args = {}, [], {}
    stack = []                 # per open region: ("for", iv, lb, ub, step, carried) / ("if", cond, truth) / ("other",)
    yields = {}                # loop-carried name -> (its init, the SSA value its loop yields)
    tm_of = {}                 # tensor-map SSA value -> operand name
    views = {}                 # smem view SSA value -> shape
    for ln, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        if line.startswith("gpu.func"):
            for name, ty in re.findall(r"(%\w+): (memref<[^>]*>)", line):
                args[name] = _shape(ty)[0]
        conds = [(f[1], f[2]) for f in stack if f[0] == "if"]
        loops = [(f[1], f[2], f[3], f[4], f[5]) for f in stack if f[0] == "for"]
        if line == "}" or line.startswith("} {") or (line.startswith("}") and not line.endswith("{")):
            if stack:
                stack.pop()
            continue
        if line.startswith("} else {"):
            kind = stack[-1]
            stack[-1] = (kind[0], kind[1], not kind[2]) if kind[0] == "if" else kind
            continue
        if line.startswith("} do {") or line.startswith("^"):
            continue                                  # scf.while's after-region replaces its before-region
        if '"nvvm.wgmma.mma_async"(' in line:
            ops = _operands(line.split('"nvvm.wgmma.mma_async"(')[1].split(")")[0])
            accesses.append(Access("wgmma", ln, line, "A", [ops[1]], (), 1, conds, loops))
            accesses.append(Access("wgmma", ln, line, "B", [ops[2]], (), 1, conds, loops))
            continue
        m = re.match(r"^(?:%[\w]+(?::\d+)?\s*=\s*)?scf\.for\s+(%\w+)\s*=\s*(%\w+)\s+to\s+(%\w+)\s+step\s+(%\w+)", line)
        if m:
            it = re.search(r"iter_args\((.*?)\)\s*->\s*\((.*?)\)", line)
            carried, order = (), ()
            if it:
                pairs = re.findall(r"(%[\w$.-]+)\s*=\s*(%[\w$.-]+)", it.group(1))
                order = tuple(n for n, _ in pairs)
                types = [t.strip() for t in it.group(2).split(",")]
                carried = tuple(n for (n, init), ty in zip(pairs, types) if ty == "index")
                yields.update({n: (init, None) for (n, init) in pairs if n in carried})
            stack.append(("for",) + m.groups() + (carried, order))
            continue
        if line.startswith("scf.yield") and stack and stack[-1][0] == "for" and stack[-1][5]:
            vals = _operands(line[len("scf.yield"):].split(":")[0])
            for n, v in zip(stack[-1][6], vals):
                if n in stack[-1][5]:
                    yields[n] = (yields[n][0], v)
            continue
        m = re.match(r"^(?:%[\w]+(?::\d+)?\s*=\s*)?scf\.if\s+(%[\w$.-]+)", line)
        if m and line.endswith("{"):
            stack.append(("if", m.group(1), True))
            continue
        if line.endswith("{"):
            stack.append(("other",))       # the module, the function, scf.while: nothing to evaluate here
            continue
        for grp, i, n in re.findall(r"nvgpu\.mbarrier\.(?:init|arrive(?:\.expect_tx)?|try_wait\.parity|get)\s+"
                                    r"(%[\w$.-]+)\[(%[\w$.-]+)\].*?num_barriers = (\d+)", line):
            accesses.append(Access("smem", ln, line, grp, [i], (int(n),), 1, conds, loops))
        d = _DEF.match(line)
        if d:
            name, op, rest = d.groups()
            defs[name] = (op, rest, ln)
            if op == "builtin.unrealized_conversion_cast" and "tensormap" in rest:
                tm_of[name] = _operands(rest)[0].lstrip("%").removeprefix("tmap_")
            if op == "memref.view":
                to = rest.split(" to ")[-1]
                shape, ty = _shape(to)
                views[name] = shape
                off = _operands(rest)[1]
                nbytes = int(np.prod(shape)) * _BYTES[ty]
                align = 1024 if len(shape) == 4 else _BYTES[ty]    # a TMA box (128-byte swizzle atoms) / an array
                accesses.append(Access("view", ln, line, name, [off], (nbytes, align), 1, conds, loops))
            if op in ("memref.load", "vector.load"):
                mem, idx = re.match(r"(%[\w$.-]+)\[([^\]]*)\]", rest).groups()
                _add_mem(accesses, ln, line, mem, _operands(idx), args, views, rest, conds, loops)
            if op == "nvgpu.device_async_copy":      # cp.async: n (src elements) read from global, 8 written
                m = re.match(r"(%[\w$.-]+)\[([^\]]*)\],\s*(%[\w$.-]+)\[([^\]]*)\],\s*(\d+)(?:,\s*(%[\w$.-]+))?", rest)
                src, sidx, dst, didx, width, n = m.groups()
                width = int(width)
                src_conds = conds + ([(n, True)] if n else [])
                _add_mem(accesses, ln, line, src, _operands(sidx), args, views, "", src_conds, loops, width)
                _add_mem(accesses, ln, line, dst, _operands(didx), args, views, "", conds, loops, width)
            if op == "nvgpu.ldmatrix":                # each lane reads one 16-byte row
                m = re.match(r"(%[\w$.-]+)\[([^\]]*)\]", rest)
                ty = _BYTES[_shape(rest.split("} : ")[-1])[1]]
                _add_mem(accesses, ln, line, m.group(1), _operands(m.group(2)), args, views, "", conds, loops, 16 // ty)
            if op == "llvm.inline_asm" and "wgmma.mma_async" in rest:
                ops = _operands(rest.split('"')[-1])
                accesses.append(Access("wgmma", ln, line, "B (register A)", [ops[4]], (), 1, conds, loops))
            continue
        if line.startswith("memref.store") or line.startswith("vector.store"):
            mem, idx = re.search(r",\s*(%[\w$.-]+)\[([^\]]*)\]", line).groups()
            _add_mem(accesses, ln, line, mem, _operands(idx), args, views, line, conds, loops)
        elif line.startswith("nvgpu.tma.async.load"):
            m = re.match(r"nvgpu\.tma\.async\.load\s+(%[\w$.-]+)\[([^\]]*)\]", line)
            name = tm_of.get(m.group(1), m.group(1))
            dims = (tma_dims or {}).get(name)
            if dims is None:
                raise BoundsError(f"line {ln}: no tensor-map dims for operand {name!r}")
            accesses.append(Access("tma", ln, line, name, _operands(m.group(2)), tuple(dims), 1, conds, loops))
    carried = {}
    for n, (init, val) in yields.items():
        cv, i0 = _wrap_bound(defs, val), defs.get(init)
        if cv and i0 and i0[0] == "arith.constant" and 0 <= int(i0[1].split(":")[0]) < cv:
            carried[n] = cv
    return Kernel(defs, accesses, args, carried)


def _wrap_bound(defs, val) -> int | None:
    """C where the yielded ``val`` stays in [0, C): ``x % C`` (the persistent forward's ring position) or
    ``select(x == C, 0, x)`` (the mma.sync kernels' ring slot, x its predecessor + 1) with a constant C."""
    d = defs.get(val) if val else None
    if not d:
        return None
    const = lambda name: int(defs[name][1].split(":")[0]) if defs.get(name, ("",))[0] == "arith.constant" else None
    if d[0] in ("arith.remui", "arith.remsi"):
        return const(_operands(d[1])[1])
    if d[0] == "arith.select":
        cond, zero, x = _operands(d[1])[:3]
        c = defs.get(cond)
        if c and c[0] == "arith.cmpi" and c[1].startswith("eq") and const(zero) == 0:
            a, b = _operands(c[1])[:2]
            if a == x:
                return const(b)
    return None


def _add_mem(accesses, ln, line, mem, idx, args, views, rest, conds, loops, width=1):
    vm = re.search(r"vector<(\d+)x", rest.split(":")[-1])
    if vm and ("vector.load" in line or "vector.store" in line):
        width = int(vm.group(1))
    if mem in args:
        accesses.append(Access("global", ln, line, mem, idx, args[mem], width, conds, loops))
    elif mem in views:
        accesses.append(Access("smem", ln, line, mem, idx, views[mem], width, conds, loops))
    else:
        raise BoundsError(f"line {ln}: access to {mem}, neither an argument nor a shared-memory view")


class _Eval:
    def __init__(self, k: Kernel, env: dict):
        self.k, self.env, self.memo = k, env, {}

    def __call__(self, name: str):
        if name in self.env:
            return self.env[name]
        if name in self.memo:
            return self.memo[name]
        if name not in self.k.defs:
            raise BoundsError(f"{name}: no definition (a region result or argument is not an index)")
        op, rest, ln = self.k.defs[name]
        ops = _operands(rest)
        if op == "arith.constant":
            tok = rest.split(":")[0].strip()
            v = {"true": 1, "false": 0}.get(tok)
            if v is None:
                if not re.fullmatch(r"-?\d+", tok):
                    raise BoundsError(f"line {ln}: {name} is a non-integer constant used as an address")
                v = int(tok)
            val = np.int64(v)
        elif op in _BIN:
            val = _BIN[op](self(ops[0]), self(ops[1]))
        elif op in ("arith.divui", "arith.remui", "arith.divsi", "arith.remsi"):
            a, b = self(ops[0]), self(ops[1])
            with np.errstate(divide="ignore", invalid="ignore"):   # / 0 only where a loop runs no iteration
                if op.startswith("arith.div"):
                    val = a // b if op.endswith("ui") else np.trunc(np.asarray(a) / b).astype(np.int64)
                else:
                    val = a % b if op.endswith("ui") else np.fmod(a, b)
            if op.endswith("ui"):       # a negative operand is a huge unsigned value: poison (out of any bounds)
                val = np.where(np.asarray(a) < 0, POISON, val)
        elif op == "arith.cmpi":
            pred = rest.split(",")[0].strip()
            val = _CMP[pred](self(ops[0]), self(ops[1])).astype(np.int64)
        elif op == "arith.select":
            c, a, b = (self(o) for o in ops[:3])
            val = np.where(np.asarray(c) != 0, a, b)
        elif op in ("arith.index_cast", "arith.extui", "arith.extsi"):
            val = self(ops[0])
        elif op == "arith.trunci":
            bits = int(re.search(r"to i(\d+)", rest).group(1))
            val = np.bitwise_and(self(ops[0]), (1 << bits) - 1) if bits < 64 else self(ops[0])
        elif op == "llvm.inline_asm" and "mov.b64 $0, $1" in rest:
            val = self(ops[0])
        elif op == "memref.extract_aligned_pointer_as_index":
            val = self.env["dsm_addr"]
        elif op == "gpu.thread_id":
            val = self.env["tid"]
        elif op == "gpu.block_id":
            val = self.env["b" + rest.strip()[0]]
        elif op == "gpu.grid_dim" and rest.strip().startswith("x"):
            val = self.env["grid_x"]
        else:
            raise BoundsError(f"line {ln}: {name} = {op} is not integer index arithmetic")
        self.memo[name] = val
        return val


def _grid_env(kernel: Kernel, acc: Access, grid, threads, dsm_addr):
    """The broadcast environment of an access: axes tid, bx, by, bz, then one per enclosing loop and one
    per known loop-carried index of it (over its whole range)."""
    carried = [n for lp in acc.loops for n in lp[4] if n in kernel.carried]
    nax = 4 + len(acc.loops) + len(carried)
    shape = lambda n, ax: np.arange(n, dtype=np.int64).reshape([-1 if i == ax else 1 for i in range(nax)])
    z = grid[2] if len(grid) > 2 else 1
    env = {"tid": shape(threads, 0), "bx": shape(grid[0], 1), "by": shape(grid[1], 2), "bz": shape(z, 3),
           "dsm_addr": np.int64(dsm_addr), "grid_x": np.int64(grid[0])}
    sizes = [threads, grid[0], grid[1], z]
    ax = 4
    reached = np.bool_(True)          # the outer loops' iterations that run (an inner loop's bounds there only)
    for iv, lb, ub, step, names in acc.loops:
        ev = _Eval(kernel, env)
        lo, hi, st = (np.asarray(ev(x)) for x in (lb, ub, step))
        if np.any(st != 1):
            raise BoundsError(f"line {acc.line}: loop {iv} with step != 1")
        lo_r, hi_r = (np.broadcast_to(x, np.broadcast(x, reached).shape)[np.broadcast_to(reached, np.broadcast(
            x, reached).shape)] for x in (lo, hi))
        n = int(max(0, int(hi_r.max(initial=0)) - int(lo_r.min(initial=0))))
        env[iv] = shape(n, ax) + lo
        reached = reached & (env[iv] < hi) & (env[iv] >= lo)
        sizes.append(n)
        ax += 1
        for name in names:
            if name in kernel.carried:
                env[name] = shape(kernel.carried[name], ax)
                sizes.append(kernel.carried[name])
                ax += 1
    valid = np.ones(sizes, dtype=bool)
    for iv, lb, ub, _, _ in acc.loops:
        ev = _Eval(kernel, env)
        valid = valid & (env[iv] < ev(ub)) & (env[iv] >= ev(lb))
    return env, valid


def check_bounds(text: str, grid, threads: int, smem_bytes: int, tma_dims: dict | None = None,
                 dsm_addrs=(0, 16, 1008)) -> list[str]:
    """Every violation (text) of the kernel in ``text`` launched on ``grid`` x ``threads`` with
    ``smem_bytes`` of dynamic shared memory; [] when every access is in bounds.  ``dsm_addrs``: the
    dynamic shared memory's base addresses tried (its 1024-byte alignment slack differs)."""
    k = parse(text, tma_dims)
    out = []
    for dsm in dsm_addrs:
        for acc in k.accesses:
            valid, idx = _evaluated(k, acc, grid, threads, dsm)
            if not valid.any():
                continue
            bad = np.zeros(valid.shape, dtype=bool)
            what = []
            if acc.kind in ("global", "smem"):
                if len(idx) != len(acc.extent):
                    raise BoundsError(f"line {acc.line}: {len(idx)} indices into {acc.extent}")
                for d, (x, n) in enumerate(zip(idx, acc.extent)):
                    hi = x + (acc.width - 1 if d == len(idx) - 1 else 0)
                    b = (x < 0) | (hi >= n)
                    bad |= b
                    if (b & valid).any():
                        what.append(f"dim {d}: [{int(x[valid].min())}, {int(hi[valid].max())}] of {n}")
            elif acc.kind == "view":
                lo = idx[0] + dsm
                b = (idx[0] < 0) | (idx[0] + acc.extent[0] > smem_bytes)
                bad |= b
                if (b & valid).any():
                    what.append(f"bytes [{int(idx[0][valid].min())}, {int((idx[0] + acc.extent[0])[valid].max())}) "
                                f"of {smem_bytes} dynamic (base {dsm})")
                mis = (lo % acc.extent[1]) != 0
                bad |= mis
                if (mis & valid).any():
                    what.append(f"address {int(lo[mis & valid].flat[0])} not {acc.extent[1]}-byte aligned")
            elif acc.kind == "tma":
                for d, (x, n) in enumerate(zip(idx, acc.extent)):
                    b = (x < 0) | ((x >= n) if d != 1 else np.zeros_like(x, dtype=bool))
                    bad |= b
                    if (b & valid).any():
                        what.append(f"coordinate {d}: [{int(x[valid].min())}, {int(x[valid].max())}] of {n}")
            elif acc.kind == "wgmma":
                start = (np.bitwise_and(idx[0], (1 << 14) - 1)) << 4
                b = (start < dsm) | (start >= dsm + smem_bytes)
                bad |= b
                if (b & valid).any():
                    what.append(f"start address [{int(start[valid].min())}, {int(start[valid].max())}] outside "
                                f"[{dsm}, {dsm + smem_bytes})")
            hit = bad & valid
            if hit.any():
                where = tuple(int(a[0]) for a in np.nonzero(hit))
                out.append(f"line {acc.line} ({acc.kind} {acc.target}, dsm_addr {dsm}): {'; '.join(what)}; "
                           f"first at (tid, bx, by, bz, iterations...) = {where}: {acc.text[:160]}")
    return out


def _evaluated(k: Kernel, acc: Access, grid, threads: int, dsm_addr: int):
    """(where the access runs, its indices) over the access's whole environment (``_grid_env``): the
    enclosing loops' bounds and ``scf.if`` conditions applied."""
    env, valid = _grid_env(k, acc, grid, threads, dsm_addr)
    ev = _Eval(k, env)
    for name, truth in acc.conds:
        c = np.asarray(ev(name)) != 0
        valid = valid & (c if truth else ~c)
    return valid, [np.broadcast_to(np.asarray(ev(i)), valid.shape) for i in acc.indices]


def written(text: str, grid, threads: int, target: str, tma_dims: dict | None = None) -> np.ndarray:
    """Which elements of global argument ``target`` (a 1-D memref) the kernel's stores write, over every
    block, thread and iteration: a boolean array of its extent (a split kernel must write every element
    of its slabs before its combine reads them).  ``tma_dims``: as ``check_bounds`` (a Hopper kernel)."""
    k = parse(text, tma_dims)
    out = np.zeros(k.args[f"%{target}"][0], dtype=bool)
    for acc in k.accesses:
        if acc.kind != "global" or acc.target != f"%{target}" or not acc.text.lstrip().startswith(
                ("memref.store", "vector.store")):
            continue
        valid, (idx,) = _evaluated(k, acc, grid, threads, 0)
        for lane in range(acc.width):
            out[idx[valid] + lane] = True
    return out


def tma_loads(text: str, grid, threads: int, tma_dims: dict, target: str) -> list[tuple[int, tuple[int, ...]]]:
    """Every TMA load of operand ``target`` the kernel issues (its first box: the first such access in the
    text), as (block x, coordinates) in each block's issue order (loop iterations in order), a block
    once per load: which tiles each block reads, evaluated from the MLIR as ``check_bounds`` does
    (the persistent forward's work-tile mapping is tested through its Q loads)."""
    k = parse(text, tma_dims)
    acc = next(a for a in k.accesses if a.kind == "tma" and a.target == target)
    valid, idx = _evaluated(k, acc, grid, threads, 0)
    seen, out = set(), []
    for where in zip(*np.nonzero(valid)):      # C order: tid, bx, by, bz, then the loops (iterations in order)
        bx, loop = int(where[1]), tuple(int(w) for w in where[2:2 + 2 + len(acc.loops)])
        coords = tuple(int(x[where]) for x in idx)
        if (bx, loop) not in seen:             # a loop-carried axis (the ring position) repeats a load
            seen.add((bx, loop))
            out.append((bx, coords))
    return sorted(out, key=lambda r: r[0])


def access_summary(text: str, tma_dims: dict | None = None) -> dict:
    """How many accesses of each kind the parser found (tests: the check saw them all)."""
    k = parse(text, tma_dims)
    out = {}
    for a in k.accesses:
        out[a.kind] = out.get(a.kind, 0) + 1
    return out


def tensor_map_dims(problem) -> dict[str, tuple[int, int, int, int]]:
    """The (D, T, H, B) dims of each operand's tensor map, as ``launch.hopper_bwd_maps`` / ``hopper_maps``
    encode them (``nova.runtime.tma.attention_tensor_map``)."""
    return {n: (problem.head_dim, problem.operand_shape(n)[2], problem.operand_shape(n)[1], problem.batch)
            for n in ("q", "k", "v", "dout")}


def check_attention_kernel(problem, schedule, role: str) -> list[str]:
    """``check_bounds`` of attention kernel ``role`` as generated (``module.build_module``) and launched:
    the schedule's grid, threads and dynamic shared memory, the tensor maps' dims."""
    from nova.kernels.attention.module import build_module
    kt = schedule.kernel(role)
    text = build_module(problem.for_role(role), schedule, role)
    return check_bounds(text, kt.grid, kt.threads, kt.smem_bytes, tensor_map_dims(problem))
