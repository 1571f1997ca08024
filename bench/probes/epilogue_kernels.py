"""GEMM kernels with the epilogue's matrices (a residual R, the pre-activation P) built and assembled
for each target (host, no GPU): the schedule the configurator picks, the kernel's parameters, ptxas's
registers and spill bytes (the split-K reduction kernel's too).

    python3 bench/probes/epilogue_kernels.py [h200,a100,rtx3060]
"""
from __future__ import annotations

import itertools
import sys

SHAPES = [(16384, 2048, 512), (16384, 512, 512), (1000, 1001, 999), (129, 258, 4096), (8, 512, 8192)]
EPILOGUES = [dict(bias=True, activation="gelu", preactivation=True), dict(bias=True, residual=True),
             dict(activation="silu", residual=True, preactivation=True)]


def main(targets: list[str]) -> None:
    from nova.hwmodel.presets import PRESETS
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.problem import GemmProblem
    from nova.runtime.matmul import configure_schedule
    for target, (M, N, K), dtype, epi in itertools.product(targets, SHAPES, ("tf32", "bf16"), EPILOGUES):
        p = GemmProblem(M, N, K, dtype, **epi)
        s = configure_schedule(p, PRESETS[target])
        line = f"{target:8s} {p.describe():58s} split_k {s.split_k:2d} vector_c {s.vector_c}"
        try:
            art = compile_gemm(p, s)
        except Exception as e:
            print(f"{line} FAILED {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
            continue
        r = art.resources
        reduce = art.meta.get("reduce_kernel")
        extra = (f"; reduction {reduce['resources']['registers']} regs, spills "
                 f"{reduce['resources']['spill_store_bytes']} B") if reduce else ""
        print(f"{line} params {','.join(art.params)}: {r['registers']} regs, spills {r['spill_store_bytes']} B{extra}",
              flush=True)


if __name__ == "__main__":
    main((sys.argv[1] if len(sys.argv) > 1 else "h200,a100,rtx3060").split(","))
