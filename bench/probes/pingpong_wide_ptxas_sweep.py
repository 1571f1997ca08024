"""ptxas over every 128x192 ping-pong kernel the register rule admits on the suites' shapes (every layout, dtype, f32
output), half the shapes per process: `python bench/probes/pingpong_wide_ptxas_sweep.py 0|1` (host, ~8 min each).
Prints the count and every kernel that spills (bytes stored, loaded) or has a wgmma hazard."""
import glob
import itertools
import json
import sys

from nova.kernels.gemm import hopper as H
from nova.kernels.gemm.problem import GemmProblem
from nova.hwmodel import get_target
from nova.kernels.gemm.compile import compile_gemm
from nova.codegen.ptxas import wgmma_hazards
gpu = get_target("h200")
shapes = set()
for line in open("bench/suites/perf.txt"):
    line = line.split("#")[0].strip()
    if line: shapes.add((1,) + tuple(map(int, line.split("x"))))
for f in glob.glob("bench/suites/*.json"):
    for e in json.load(open(f)): shapes.add((e.get("B", 1), e["M"], e["N"], e["K"]))
shapes |= {(1, 1000, 1001, 520), (1, 4095, 4104, 1000), (1, 777, 1536, 300), (5, 300, 384, 200)}
seen, n, bad = set(), 0, []
part = int(sys.argv[1])
for (B, M, N, K), dt, ta, tb, out in itertools.product(sorted(s for i, s in enumerate(sorted(shapes)) if i % 2 == part), ("bf16", "fp16", "tf32"), (False, True), (False, True), (None, "f32")):
    if out and dt == "tf32": continue
    if M * N * K * B > 2e12: continue
    p = GemmProblem(M, N, K, dt, ta, tb, out_dtype=out, batch=B)
    ops = H.operand_plan(p)
    if (2, 192) not in H.pingpong_tiles(p, gpu, ops, 256): continue
    s = H.wgmma_schedule(p, gpu, ops, 2, 192, 1, H.ring_depth(gpu, 128, 192, H.staging_bytes(2, "tma_store")), 8,
                         epilogue="tma_store", pingpong=2)
    key = (s.to_dict().__repr__())
    if key in seen: continue
    seen.add(key); n += 1
    r = compile_gemm(p, s).resources
    if r["spill_store_bytes"] or r["spill_load_bytes"] or r["stack_bytes"] or wgmma_hazards(r):
        bad.append((p.describe(), r["spill_store_bytes"], r["spill_load_bytes"], wgmma_hazards(r)))
print(n, "distinct 128x192 ping-pong kernels assembled;", len(bad), "with spills or hazards")
for b in bad: print(b)
