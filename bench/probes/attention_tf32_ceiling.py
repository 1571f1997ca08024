"""The most any TF32 attention could gain over the best PyTorch FP32 backend on a held-out draw's
problems with T >= 512 (the generalization target asks 4x on every one): the draw's measured library time over a
floor no kernel goes under, forward + backward:

    floor = max(compulsory DRAM bytes / DRAM bandwidth, tensor-core FLOPs / TF32 peak)

bytes (``compulsory_bytes``): each tensor once -- forward Q and the keys' K, V read, O and LSE written;
backward Q, O, dO, LSE and the keys' K, V read, dQ and all of dK, dV written (causal with fewer queries
than keys: only keys 0..Tq-1 are visited, the rest of dK, dV written as zeros); FLOPs: 14 x B x H x D x (query, key) pairs visited (two GEMMs forward, five
backward; causal: query i visits keys 0..i, PyTorch's top-left alignment); peak: the target model's
wgmma TF32 rate at its clock.  A row whose ceiling (library / floor) is under 4 cannot meet the target
with any kernel; the measured ratio (device time) beside it says how far Nova is from its ceiling.

    python3 bench/probes/attention_tf32_ceiling.py [heldout_attention.json ...]   # default: run 120's draw

Host only (no GPU): it reads the results and prices the problems."""
import glob
import json
import sys

DEFAULT = "bench/results/h100-2026-12-07/run120-h100/attention-*/heldout_attention.json"


def pairs(tq: int, tk: int, causal: bool) -> int:
    """(query, key) pairs visited: all of them, or causal sum over i < tq of min(i + 1, tk)."""
    if not causal:
        return tq * tk
    full = min(tq, tk)                       # rows i < tk see i + 1 keys; later rows see all tk
    return full * (full + 1) // 2 + max(0, tq - tk) * tk


def compulsory_bytes(p, causal: bool) -> int:
    """Forward + backward DRAM bytes no kernel avoids (see the docstring)."""
    visited = min(p.seq_q, p.seq_k) / p.seq_k if causal else 1.0
    q, kv, row = p.q_bytes, p.kv_bytes, p.row_bytes
    return int((2 * q + visited * kv + row) + (4 * q + visited * kv + kv + row))


def main(files) -> None:
    from nova.bench.heldout import drawn
    from nova.hwmodel import get_target
    print(f"{'problem':52s} {'Nova us':>8s} {'library us':>10s} {'ratio':>6s} {'floor us':>8s} {'bound':>5s} "
          f"{'ceiling':>7s}")
    for f in files:
        gpu = get_target("h200" if "h200" in f else "h100")
        peak = gpu.tc_flops_per_clk_sm("wgmma", "tf32") * gpu.sm_count * gpu.clock_hz
        for r in json.load(open(f))["rows"]:
            if r["dtype"] != "tf32" or max(r["Tq"], r["Tk"]) < 512 or r.get("status") != "ok":
                continue
            p = drawn("attention", r).problem()
            t_mem = compulsory_bytes(p, r["causal"]) / gpu.dram_bw * 1e6
            t_tc = 14 * r["B"] * r["H"] * r["D"] * pairs(r["Tq"], r["Tk"], r["causal"]) / peak * 1e6
            floor = max(t_mem, t_tc)
            lib = r["best_device_us"]
            print(f"{r['describe'][:52]:52s} {r['nova_graph_us']:8.1f} {lib:10.1f} {r['ratio_device']:6.2f} "
                  f"{floor:8.1f} {'dram' if t_mem >= t_tc else 'tc':>5s} {lib / floor:7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob(DEFAULT)))
