"""Launch chosen candidates of a tune manifest a few times each, for Nsight Compute around it: where a
candidate's time goes (e.g. the deep-K dW kernels against cuBLAS's).

    ncu --clock-control none -k regex:nova_ ... python3 bench/probes/oracle_ncu.py MANIFEST "LABEL@MxNxK" ...

Each candidate: one check launch (fresh data) then ``NCU_LAUNCHES`` (default 2) timed ones on the
first input set; prints the order so ncu's kernel list can be matched.
"""
from __future__ import annotations

import json
import os
import sys

import torch

from nova.bench.tune import _Data, _launch, load_schedule
from nova.hwmodel import get_target
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.schedule import Schedule
from nova.runtime.cache import KernelCache


def main() -> int:
    manifest = json.load(open(sys.argv[1]))
    target = get_target(manifest["target"])
    cache = KernelCache(os.environ.get("NOVA_CACHE_DIR", manifest["cache_dir"]))
    wanted = [w.split("@") for w in sys.argv[2:]]
    for label, shape in wanted:
        for entry in manifest["problems"]:
            p = GemmProblem(**entry["problem"])
            if f"{p.M}x{p.N}x{p.K}" != shape:
                continue
            cand = next(c for c in entry["candidates"] if c["label"] == label)
            resolved = load_schedule(p, Schedule.from_dict(cand["schedule"]), target, cache)
            data = _Data(torch, p)
            stream = torch.cuda.current_stream().cuda_stream
            for _ in range(int(os.environ.get("NCU_LAUNCHES", "2"))):
                _launch(resolved, *data.sets[0], data.outs[0], stream)
            torch.cuda.synchronize()
            print(f"launched {label} @ {shape}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
