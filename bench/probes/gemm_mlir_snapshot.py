"""The generated MLIR of a fixed set of GEMM problems, to compare two revisions of the code generator
byte for byte (host, no GPU): 12 shapes (square, deep-K, ragged, skinny, the GPT training shapes) x
TF32/BF16 x layouts x bias/GELU, configured for h200, a100 and rtx3060; the main kernel, and the
split-K/stream-K reduction kernel where the schedule has one.

    python3 bench/probes/gemm_mlir_snapshot.py write before.json       # at one revision
    python3 bench/probes/gemm_mlir_snapshot.py write after.json        # at the other
    python3 bench/probes/gemm_mlir_snapshot.py compare before.json after.json
"""
from __future__ import annotations

import itertools
import json
import sys

SHAPES = [(16384, 2048, 512), (16384, 512, 2048), (16384, 512, 512), (512, 2048, 16384), (1000, 1001, 999),
          (8192, 32768, 512), (16384, 1536, 512), (129, 257, 4096), (64, 64, 8192), (8, 4096, 4096), (3, 777, 256),
          (2048, 2048, 65536)]
TARGETS = ("h200", "a100", "rtx3060")


def snapshot() -> dict[str, str]:
    from nova.hwmodel.presets import PRESETS
    from nova.kernels.gemm.compile import build_module
    from nova.kernels.gemm.emit_hopper import build_split_reduce_module
    from nova.kernels.gemm.problem import GemmProblem
    from nova.runtime.matmul import configure_schedule
    out = {}
    for target in TARGETS:
        for (M, N, K), dtype, ta, tb, bias, act in itertools.product(SHAPES, ("tf32", "bf16"), (False, True),
                                                                   (False, True), (False, True), ("none", "gelu")):
            if (ta or tb) and (bias or act != "none"):
                continue
            p = GemmProblem(M, N, K, dtype, ta, tb, bias, act)
            try:
                s = configure_schedule(p, PRESETS[target])
                text = build_module(p, s)
                if getattr(s, "split_workspace", False) or getattr(s, "stream_k", False):
                    text += build_split_reduce_module(p, s)
            except Exception as e:          # recorded: a problem that stops building is a difference too
                text = f"ERROR {type(e).__name__}: {e}"
            out[f"{target} {p.describe()}"] = text
    return out


def main(argv) -> int:
    if argv[:1] == ["write"] and len(argv) == 2:
        texts = snapshot()
        with open(argv[1], "w") as f:
            json.dump(texts, f)
        print(f"{len(texts)} problems, {sum(t.startswith('ERROR') for t in texts.values())} errors -> {argv[1]}")
        return 0
    if argv[:1] == ["compare"] and len(argv) == 3:
        a, b = (json.load(open(p)) for p in argv[1:])
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        print(f"{len(a)} and {len(b)} problems; {len(differ)} differ" + "".join(f"\n  {k}" for k in differ))
        return 1 if differ else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
