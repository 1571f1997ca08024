"""Does relaunching a CUDA graph that is still running block the host, and does the device idle
between two replays of one graph?  A graph of many short kernels (about a training step's count
and length) replayed back to back, against two captures of the same work replayed alternately:

    python3 bench/probes/graph_relaunch.py [--kernels 600] [--replays 20]

Prints the host time of each ``replay()`` call and the device time per replay (CUDA events around
the whole loop), for one graph and for two.
"""
import argparse
import statistics
import time

import torch


def work(x, y, kernels: int):
    for _ in range(kernels // 2):
        torch.mul(x, 1.0001, out=y)
        torch.add(y, 0.5, out=x)


def capture(x, y, kernels: int) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        work(x, y, kernels)                       # warm-up
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            work(x, y, kernels)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return g


def run(graphs, replays: int) -> tuple[list[float], float]:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = []
    start.record()
    for i in range(replays):
        t = time.perf_counter()
        graphs[i % len(graphs)].replay()
        host.append((time.perf_counter() - t) * 1e3)
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / replays


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=600)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--elements", type=int, default=1 << 22)
    args = ap.parse_args()
    x = torch.randn(args.elements, device="cuda")
    y = torch.empty_like(x)
    one = capture(x, y, args.kernels)
    two = [one, capture(x, y, args.kernels)]
    single = run([one], 1)[1]
    for name, graphs in (("one graph", [one]), ("two graphs", two), ("one graph", [one]), ("two graphs", two)):
        host, device = run(graphs, args.replays)
        print(f"{name:10s}: replay() host ms first {host[0]:.3f}, median of the rest {statistics.median(host[1:]):.3f}, "
              f"max {max(host):.3f}; device ms per replay {device:.3f} (a replay alone {single:.3f})", flush=True)


if __name__ == "__main__":
    main()
