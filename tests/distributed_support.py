"""Running a test body on several CPU processes over gloo, with a deadline (a hang fails, it does
not block the run).

    run_ranks(body, world_size=2, timeout_s=60)     # body(rank, world_size) in each process

Each process initialises the default process group on a free port of 127.0.0.1 and destroys it
at the end; an exception in any rank fails the test with that rank's message.
"""
from __future__ import annotations

import os
import socket
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, body) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        body(rank, world_size)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(body, world_size: int = 2, timeout_s: float = 60.0) -> None:
    """``body(rank, world_size)`` on ``world_size`` forked processes joined by gloo; raises the
    first rank's failure, or TimeoutError after ``timeout_s`` (the processes are killed)."""
    import torch.multiprocessing as mp
    context = mp.start_processes(_worker, args=(world_size, free_port(), body), nprocs=world_size, join=False,
                                 start_method="fork")
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for p in context.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"the {world_size} ranks did not finish within {timeout_s:.0f} s (a collective hung?)")
