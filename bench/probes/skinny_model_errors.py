"""The skinny GEMM's model against every recorded skinny kernel of the held-out draws, with and without
each chunk's first FMA phase (``skinny.trip_phase``; without it the latency term is the trips at the
loaded latency alone).  Each row is priced as measured (its schedule label: ``space.measured_config``,
``skinny.priced_label``) against its replayed device time (``nova_graph_us``).

    python3 bench/probes/skinny_model_errors.py [results.json ...]     # default: the 2026-12-06/07 draws

Prints, per lane layout and rows of A, how many kernels the model puts within 15% of their time, and
the rms of the log error, both ways.  Host only (no GPU)."""
import glob
import json
import math
import sys
from collections import defaultdict
from unittest import mock

DRAWS = "bench/results/h*-2026-12-0[67]/*/gemm-*/heldout_gemm.json"


def priced(files) -> dict:
    """{row: (lanes, M, predicted us, measured us)} of the recorded skinny kernels today's model prices."""
    from nova.bench.heldout import drawn, gemm_config
    out = {}
    for f in files:
        target = "h200" if "h200" in f else "h100"
        for r in json.load(open(f))["rows"]:
            if r.get("status") != "ok" or r.get("kernel") != "skinny":
                continue
            cfg = gemm_config(drawn("gemm", r), target, schedule=r["schedule"])
            if cfg.skinny:
                out[f"{f} {r['describe']}"] = (cfg.schedule.lanes_along, r["M"], cfg.prediction.time_us,
                                               r["nova_graph_us"])
    return out


def main(files) -> None:
    from nova.kernels.gemm import skinny
    with_phase = priced(files)
    with mock.patch.object(skinny, "trip_phase", lambda *a, **k: 0.0):
        without = priced(files)
    stats = defaultdict(lambda: [0, 0, 0, 0.0, 0.0])
    for key, (lanes, m, new, measured) in with_phase.items():
        old = without[key][2]
        group = f"{lanes} {'M<=3' if m <= 3 else 'M4-7' if m < 8 else 'M8+'}"
        for g in (group, "all"):
            s = stats[g]
            s[0] += 1
            s[1] += abs(old / measured - 1) <= 0.15
            s[2] += abs(new / measured - 1) <= 0.15
            s[3] += math.log(old / measured) ** 2
            s[4] += math.log(new / measured) ** 2
    print(f"{'kernels':10s} {'n':>4s}  within 15% without / with the phase   rms log error without / with")
    for g, (n, w0, w1, e0, e1) in sorted(stats.items()):
        print(f"{g:10s} {n:4d}  {w0:4d} / {w1:4d}{'':27s}{math.sqrt(e0 / n):.3f} / {math.sqrt(e1 / n):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob(DRAWS)))
