"""Where the chunked-loss step's first run allocates outside its arena: every allocation of at least
256 KiB during build and the first step (warm-up and capture), with the Python frames that made it.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=<cache with tests/test_memory_policy.py's kernels> python3 bench/probes/chunked_loss_memory.py

``tests/test_memory_policy.py``'s GPU test measures the first step's peak 8.8 MiB above the plan's arena and
its outside-arena list (the eager warm-up's transient); this prints who allocated what, in order, with the
allocator's running total, so the transient's owner shows by name.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def main() -> None:
    import torch
    from test_memory_policy import _chunked_gpu_plan
    from nova.compiler.executor import build
    graph, inputs, planned = _chunked_gpu_plan()
    state = [t.cuda() for t in inputs]
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    program = build(planned, "cuda")
    program.run(state)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    s = program.stats
    print(f"arena {s['arena_bytes'] >> 10} KiB, outside {s['outside_arena_bytes'] >> 10} KiB "
          f"(driver {s['outside_arena_driver_bytes'] >> 10}), measured peak {s['measured_peak_bytes'] >> 10} KiB")
    for m in program.memory_phases:
        print(f"  {m['phase']}: allocated {m['allocated_bytes'] >> 10} KiB, peak {m['max_allocated_bytes'] >> 10} KiB")
    live, peak = 0, 0
    for trace in snapshot["device_traces"]:
        for event in trace:
            action, size = event["action"], event.get("size", 0)
            if action == "alloc":
                live += size
            elif action == "free_completed":
                live -= size
            else:
                continue
            peak = max(peak, live)
            if size >= 256 << 10:
                frames = [f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in event.get("frames", [])
                          if "nova" in f["filename"] or "test_" in f["filename"] or "torch/nn" in f["filename"]
                          or "torch/_" in f["filename"]][:6]
                print(f"{action:15s} {size >> 10:8d} KiB  live {live >> 10:8d} KiB  stream {event.get('stream', 0)}  "
                      + " <- ".join(frames))
    print(f"traced live peak {peak >> 10} KiB (relative to the start of the trace)")


if __name__ == "__main__":
    main()
