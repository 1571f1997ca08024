"""Fingerprint of the code generator over a suite: sha256 of every kernel's MLIR and PTX.

A change that must not alter generated code (a refactoring) runs this before and after and
compares the two files::

    python3 -m nova.codegen.fingerprint --out before.json            # bench/suites/perf.txt, all cases
    python3 -m nova.codegen.fingerprint --compare before.json after.json

Cases: every shape of the suite x tf32/bf16/fp16 x (the H200 with the configurator's own pick,
wgmma; the H200 with the mma.sync family forced, as ``nova tune --family mma.sync`` does; the A100
and the RTX 3060, mma.sync).  Per case it records the schedule, a hash of the prediction and the
derivation (what ``nova-config explain`` prints), the sha256 of the main kernel's MLIR
(``nova.codegen.build_module``) and, with PTX on (the default), of its PTX, its launch geometry,
the operand-prep kernels' PTX and what the runtime reads to launch a Hopper kernel (tensor-map
shapes, boxes and element type; C's with the TMA-store epilogue).  No cubin: ptxas output is not part of the fingerprint.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SUITE = "bench/suites/perf.txt"
DTYPES = ("tf32", "bf16", "fp16")
# (target, family): None is the configurator's own pick (wgmma on the H200)
TARGETS = (("h200", None), ("h200", "mma.sync"), ("a100", None), ("rtx3060", None))


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int
    dtype: str
    target: str
    family: str | None = None

    @property
    def name(self) -> str:
        return f"{self.M}x{self.N}x{self.K} {self.dtype} {self.target} {self.family or 'pick'}"


def read_shapes(path: str | Path) -> list[tuple[int, int, int]]:
    """``MxNxK`` per line, ``#`` comments (the suite format of ``bench/suites``)."""
    shapes = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            m, n, k = (int(v) for v in text.lower().split("x"))
            shapes.append((m, n, k))
    return shapes


def cases(shapes, dtypes=DTYPES, targets=TARGETS) -> list[Case]:
    return [Case(m, n, k, dtype, target, family)
            for (m, n, k) in shapes for dtype in dtypes for target, family in targets]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _prep_kernels(artifact) -> dict:
    """The operand-prep artifacts (as dicts) a Hopper artifact carries, by operand."""
    return artifact.meta.get("prep_kernels", {})


def _runtime_view(problem, schedule, artifact) -> dict | None:
    """What ``nova.runtime.tma.HopperGemm`` reads to encode the tensor maps (None for mma.sync and the
    skinny kernel)."""
    plan = schedule.hopper if schedule.kernel == "tiles" else None
    if plan is None:
        return None
    view = {"tensor_map_type": plan.operands.tensor_map_type, "storage": problem.storage,
            "operands": {op: {"rows": role.rows, "cols": role.cols, "box": [plan.box(op).cols, plan.box(op).rows],
                              "prep": None if role.prep is None else role.prep.to_dict()}
                         for op, role in (("a", plan.operands.a), ("b", plan.operands.b))}}
    if plan.tma_store:                   # the TMA-store epilogue's map of C (absent otherwise: older views stand)
        view["c"] = {"rows": problem.M, "cols": problem.N, "box": [plan.box_c.cols, plan.box_c.rows],
                     "type": problem.out_dtype}
    return view


def fingerprint_case(case: Case, ptx: bool = True) -> dict:
    """The fingerprint record of one case (see the module docstring)."""
    from nova.kernels.gemm.compile import build_module
    from nova.configurator import GemmProblem, configure

    problem = GemmProblem(case.M, case.N, case.K, case.dtype)
    cfg = configure(problem, case.target, family=case.family)
    s = cfg.schedule
    record = {"family": s.mma.family if s.kernel == "tiles" else s.kernel, "schedule": s.to_dict(),
              "prediction_sha256": sha256(_canonical(cfg.prediction.to_dict())),
              "derivation_sha256": sha256(_canonical([st.to_dict() for st in cfg.derivation])),
              "mlir_sha256": sha256(build_module(problem, s))}
    if ptx:
        from nova.kernels.gemm.compile import compile_gemm
        art = compile_gemm(problem, s, cubin=False)
        record["ptx_sha256"] = sha256(art.ptx)
        record["launch"] = {"grid": list(art.grid), "block": list(art.block), "smem_bytes": art.smem_bytes,
                            "zero_output": art.zero_output, "params": list(art.params)}
        record["prep"] = {op: {"ptx_sha256": sha256(d["ptx"]), "grid": d["grid"], "block": d["block"],
                               "smem_bytes": d["smem_bytes"]} for op, d in sorted(_prep_kernels(art).items())}
        record["runtime"] = _runtime_view(problem, s, art)
    return record


def _job(args) -> tuple[str, dict]:
    case, ptx = args
    return case.name, fingerprint_case(case, ptx)


def fingerprint(case_list: list[Case], ptx: bool = True, jobs: int = 1) -> dict:
    """``{case name: record}`` in case order; ``jobs`` > 1 spreads the cases over processes."""
    work = [(c, ptx) for c in case_list]
    if jobs <= 1:
        return dict(map(_job, work))
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return dict(pool.imap(_job, work, chunksize=1))


def compare(before: dict, after: dict) -> list[str]:
    """One line per case whose record differs, naming the fields that changed."""
    out = []
    b, a = before["cases"], after["cases"]
    for name in sorted(set(b) | set(a)):
        if name not in b or name not in a:
            out.append(f"{name}: only in {'after' if name in a else 'before'}")
            continue
        fields = sorted(k for k in set(b[name]) | set(a[name]) if b[name].get(k) != a[name].get(k))
        if fields:
            out.append(f"{name}: {', '.join(fields)}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.codegen.fingerprint", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the fingerprint JSON here")
    ap.add_argument("--suite", default=DEFAULT_SUITE, help=f"shape suite (default {DEFAULT_SUITE})")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    ap.add_argument("--no-ptx", action="store_true", help="hash the MLIR only (no lowering)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="list the cases that differ")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        diff = compare(before, after)
        print("\n".join(diff) if diff else f"identical: {len(after['cases'])} cases")
        return 0
    if not args.out:
        ap.error("--out or --compare is required")
    case_list = cases(read_shapes(args.suite), tuple(args.dtypes.split(",")))
    t0 = time.perf_counter()
    records = fingerprint(case_list, ptx=not args.no_ptx, jobs=args.jobs)
    elapsed = time.perf_counter() - t0
    doc = {"suite": args.suite, "dtypes": args.dtypes.split(","),
           "targets": [f"{t} {f or 'pick'}" for t, f in TARGETS], "ptx": not args.no_ptx, "cases": records}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{len(records)} cases in {elapsed:.1f} s ({args.jobs} processes) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
