"""Which picks would flip if the consumers step chose cooperative vs ping-pong by the calibrated model
(nova/hwmodel/calibration) instead of the raw one (checked on the host and rejected; see
bench/NOTES.md).  Every training-suite GEMM and every perf-suite shape in three layouts, BF16 and TF32:
prints the problems whose calibrated choice differs from the current pick.

    PYTHONPATH=. python3 bench/probes/consumers_calibrated.py
"""
import json, os
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.configure import configure
from nova.hwmodel.calibration import clock_and_time, constants_for, load
cal = load("h200", "wgmma")["constants"]
def cal_us(c):
    return float(clock_and_time(c.prediction.terms_us, c.schedule.launch_split, constants_for(cal, c.schedule))[1])
suite = json.load(open("bench/suites/train_gemms.json"))
probs=[]
for dt in ("bf16","tf32"):
    for g in suite:
        probs.append(GemmProblem(g["M"],g["N"],g["K"],dt,trans_a=g["trans_a"],trans_b=g["trans_b"],bias=g["bias"]))
for l in open("bench/suites/perf.txt"):
    l=l.split("#")[0].strip()
    if not l: continue
    M,N,K=map(int,l.split()[0].split("x"))
    for dt in ("bf16","tf32"):
        for ta,tb in [(False,False),(False,True),(True,False)]:
            probs.append(GemmProblem(M,N,K,dt,trans_a=ta,trans_b=tb))
seen=set()
for p in probs:
    if p.describe() in seen: continue
    seen.add(p.describe())
    out={}
    for v in ("0","1"):
        os.environ["NOVA_PINGPONG"]=v
        try: c=configure(p,"h200")
        except Exception as e: out[v]=None; continue
        out[v]=(cal_us(c), c.prediction.time_us)
    os.environ.pop("NOVA_PINGPONG")
    d=configure(p,"h200"); cur="pp" if d.schedule.pingpong else "coop"
    if out["0"] is None or out["1"] is None: continue
    calpick = "pp" if out["1"][0] < out["0"][0] else "coop"
    if calpick!=cur: print(p.describe(), "current", cur, "calibrated coop %.1f pp %.1f"%(out["0"][0],out["1"][0]))
