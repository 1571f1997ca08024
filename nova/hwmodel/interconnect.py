"""The GPU interconnect as an alpha-beta model: the time of a collective and the gradient bucket size.

A ring collective over ``p`` ranks moves its ``n`` bytes in steps between neighbours (NCCL's ring
algorithm; Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations
in MPICH", IJHPCA 2005, for the byte counts):

    all_reduce        2 (p - 1) steps, each rank sends 2 (p - 1) / p * n bytes
    reduce_scatter    (p - 1) steps,   each rank sends (p - 1) / p * n bytes
    all_gather        (p - 1) steps,   each rank sends (p - 1) / p * n bytes (n: the gathered size)

    time = alpha + beta_bytes / link_bw,   alpha = link_base_latency + steps * link_step_latency

(the latency terms are NCCL's own tuning model, src/graph/tuning.cc; the bandwidth is the
per-direction link bandwidth of the target's preset, gpus.toml).

Gradient buckets: one all-reduce per bucket pays ``alpha`` once, so a bucket is made just large
enough that its latency is at most ``latency_share`` (10 %) of its transfer time:

    alpha <= share * 2 (p - 1) / p * n / link_bw   =>   n >= alpha * p * link_bw / (2 (p - 1) share)

Larger buckets only delay the first reduction (less overlap with the backward); smaller ones pay
more latency.  With one rank nothing is communicated (no bucket size).
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.hwmodel.formula import formulas
from nova.hwmodel.model import GPUModel, TargetError

LATENCY_SHARE = 0.1          # a bucket's latency is at most this share of its transfer time

F = formulas("""
    all_reduce_steps = 2 * (p - 1)
    all_reduce_bytes = 2 * (p - 1) / p * n
    gather_steps = p - 1
    gather_bytes = (p - 1) / p * n
    latency_us = base_us + steps * step_us
    time_us = latency_us + sent * 1000000 / link_bw
    bucket_bytes = latency_us * 1e-6 * p * link_bw / (2 * (p - 1) * share)
""")

LINK_FIGURES = ("link_bw", "link_base_latency_us", "link_step_latency_us")


def check_link(target: GPUModel) -> None:
    missing = [f for f in LINK_FIGURES if not target.has(f)]
    if missing:
        raise TargetError(f"target {target.name} has no interconnect figures ({', '.join(missing)} in "
                          f"nova/hwmodel/gpus.toml); communication cannot be predicted for it")


def _steps_and_bytes(op: str, nbytes: float, world_size: int) -> tuple[int, float]:
    if op == "all_reduce":
        return F.all_reduce_steps(p=world_size), F.all_reduce_bytes(p=world_size, n=nbytes)
    if op in ("all_gather", "reduce_scatter"):
        return F.gather_steps(p=world_size), F.gather_bytes(p=world_size, n=nbytes)
    raise ValueError(f"unknown collective {op!r}")


def latency_us(op: str, world_size: int, target: GPUModel) -> float:
    """alpha: the fixed time of one collective over ``world_size`` ranks."""
    check_link(target)
    steps, _ = _steps_and_bytes(op, 0, world_size)
    return F.latency_us(base_us=target.link_base_latency_us, steps=steps, step_us=target.link_step_latency_us)


def collective_time_us(op: str, nbytes: float, world_size: int, target: GPUModel) -> float:
    """The predicted time of one ring collective of ``nbytes`` (the larger side's bytes) over
    ``world_size`` ranks; 0 for one rank."""
    if world_size <= 1:
        return 0.0
    _, sent = _steps_and_bytes(op, nbytes, world_size)
    return F.time_us(latency_us=latency_us(op, world_size, target), sent=sent, link_bw=target.link_bw)


@dataclass(frozen=True)
class BucketSize:
    """The gradient bucket size and how it was derived."""
    bytes: int
    world_size: int
    latency_us: float
    link_bw: float
    latency_share: float

    def describe(self) -> str:
        return (f"bucket >= alpha * p * link_bw / (2 (p - 1) share) = {self.latency_us:.1f} us * {self.world_size} * "
                f"{self.link_bw / 1e9:.0f} GB/s / (2 * {self.world_size - 1} * {self.latency_share}) = "
                f"{self.bytes / 2**20:.1f} MiB")


def gradient_bucket_size(target: GPUModel, world_size: int, latency_share: float = LATENCY_SHARE) -> BucketSize | None:
    """The closed-form bucket size of the gradient all-reduce (module docstring); None for one rank."""
    if world_size <= 1:
        return None
    alpha = latency_us("all_reduce", world_size, target)
    n = F.bucket_bytes(latency_us=alpha, p=world_size, link_bw=target.link_bw, share=latency_share)
    return BucketSize(int(-(-n // 1)), world_size, alpha, target.link_bw, latency_share)
