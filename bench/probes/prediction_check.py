"""How many of a training-GEMM suite run's kernels the calibrated model predicts within +-15%: for each
row of ``nova.bench.train_gemms``'s JSON, the configurator's calibrated time of Nova's pick against the
measured ``nova_us`` (56/60 on bench/results/h200-2026-12-01/e/call7).

    python3 bench/probes/prediction_check.py bench/results/h200-2026-12-01/e/call7/train_gemms.json
"""
from __future__ import annotations

import json
import sys

from nova.bench.train_gemms import case_problem
from nova.configurator import configure
from nova.kernels.gemm.space import label


def main() -> int:
    rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r.get("status") == "ok"]
    within = 0
    for r in rows:
        r.setdefault("activation", "none")
        cfg = configure(case_problem(r, r["dtype"]), "h200")
        ratio = r["nova_us"] / cfg.calibrated_time_us
        within += abs(ratio - 1) <= 0.15
        print(f"{r['dtype']} {r['role']:7s} {r['M']}x{r['N']}x{r['K']}: measured {r['nova_us']:8.1f} us, "
              f"calibrated {cfg.calibrated_time_us:8.1f}, ratio {ratio:.2f}  {label(cfg.schedule)}")
    print(f"within +-15%: {within}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
