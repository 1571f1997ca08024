"""Replay an oracle run against today's configurator and cost model, without a GPU.

For every problem of an oracle results file (``nova.bench.oracle``) this asks today's
``configure()`` for its pick in the row's instruction family (files without one are mma.sync runs)
and looks the pick up among the candidates that were timed.  It
reports the pick-vs-best ratio where the pick was measured, and how well the cost model ranks the
measured candidates (Spearman rank correlation of predicted vs measured time).  A model change is
judged here first, then confirmed by a new device run: candidates that were not measured stay
unknown, never guessed.

    python3 -m nova.bench.oracle_replay --oracle bench/results/h200-oracle-v0.2/oracle.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from nova.configurator import GemmProblem
from nova.kernels.gemm.space import analytic_pick, label, predict_schedule, schedule_space
from nova.hwmodel import get_target


def spearman(xs, ys) -> float:
    import numpy as np
    rx, ry = np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys))
    return float(np.corrcoef(rx, ry)[0, 1]) if len(xs) > 2 else math.nan


def replay(oracle: dict) -> list[dict]:
    gpu = get_target(oracle["target"])
    out = []
    for r in oracle["rows"]:
        p = GemmProblem(r["M"], r["N"], r["K"], r["dtype"])
        timed = {c["label"]: c["us"] for c in r["timed"] if c.get("ok")}
        pick = analytic_pick(p, gpu, r.get("family", "mma.sync"))
        space = {label(s): s for s in schedule_space(p, gpu, pick)}
        labels = [lab for lab in timed if lab in space]
        predicted = [predict_schedule(p, space[lab], gpu).time_us for lab in labels]
        best = min(timed.values())
        pick_us = timed.get(label(pick))
        out.append({"problem": r["describe"], "pick": label(pick), "pick_measured": pick_us is not None,
                    "ratio": best / pick_us if pick_us else math.nan, "was_ratio": r["ratio"],
                    "spearman": spearman(predicted, [timed[lab] for lab in labels])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", required=True)
    args = ap.parse_args(argv)
    import numpy as np
    import pandas as pd
    df = pd.DataFrame(replay(json.load(open(args.oracle))))
    pd.set_option("display.width", 200)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    known = df[df.pick_measured]
    for dt in ("tf32", "bf16"):
        k = known[known.problem.str.contains(dt)]
        w = df[df.problem.str.contains(dt)]
        print(f"{dt}: pick measured for {len(k)}/{len(w)} problems; geomean best/pick over those "
              f"{np.exp(np.log(k.ratio).mean()):.3f} (at measurement time: {np.exp(np.log(k.was_ratio).mean()):.3f}); "
              f"median Spearman {w.spearman.median():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
