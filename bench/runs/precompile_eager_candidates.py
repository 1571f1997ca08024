"""Compile every kernel an eager call of a held-out GEMM draw may choose, whatever the mma.sync
calibration says: the device pick, and the mma.sync tiles, their own pick and (where it splits K)
the one-launch pick (``nova.kernels.gemm.eager.choose_eager``).  For a device run that refits the
calibration and then times eager calls offline.

    NOVA_CACHE_DIR=... python3 bench/runs/precompile_eager_candidates.py SEED COUNT TARGET

A record of run 113: it ran against a ``configure_mma_sync`` that took ``one_launch`` (the mma.sync tiles
with K whole), an option withdrawn after that run measured it (bench/NOTES.md, run 113), so this
script no longer runs.
"""
import sys

from nova.bench.heldout import gemm_problems
from nova.configurator import configure
from nova.configurator.derivation import NullDerivation
from nova.hwmodel import get_target
from nova.kernels.gemm.ampere import configure_mma_sync
from nova.kernels.gemm.family import get_or_compile
from nova.runtime.cache import KernelCache

seed, count, target = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
gpu, cache = get_target(target), KernelCache()
compiled = failed = 0
for h in gemm_problems(seed, count):
    p = h.problem()
    schedules = [configure(p, gpu).schedule]
    for one_launch in (False, True):
        try:
            schedules.append(configure_mma_sync(p, gpu, NullDerivation(), one_launch=one_launch)[0])
        except Exception as e:         # the mma.sync path does not take it: nothing to compile
            print(f"{h.describe()}: no mma.sync kernel ({type(e).__name__}: {e})")
    for s in dict.fromkeys(schedules):
        try:
            _, _, status = get_or_compile(p, s, gpu, cache, offline=False)
            compiled += status == "compiled"
        except Exception as e:
            failed += 1
            print(f"{h.describe()}: FAILED {type(e).__name__}: {e}")
print(f"seed {seed}: {compiled} compiled, {failed} failed into {cache.root}")
