"""Nova's GEMM schedule as a Triton matmul configuration: no autotuning, the configurator's pick.

    configs = autotune_configs(M, N, K, "bf16", "h200")       # [triton.Config(...)]: Nova's one config
    @triton.autotune(configs=my_configs, key=["M", "N", "K"],
                     prune_configs_by={"early_config_prune": early_config_prune("bf16", "h200")})
    prune(my_configs, M, N, K, "bf16", "h200", keep=1)        # the user's configs nearest Nova's

    nova-config export triton matmul 4096x4096x4096 --dtype bf16 --target h200 [--json]

The mapping (``triton_config``), from ``nova.configurator.configure(GemmProblem(M, N, K, dtype),
target).schedule`` to the knobs of Triton's matmul (the tutorial kernel's ``BLOCK_M``, ``BLOCK_N``,
``BLOCK_K``, ``GROUP_M`` meta-parameters and ``triton.Config``'s ``num_warps``/``num_stages``):

* ``BLOCK_M, BLOCK_N, BLOCK_K = block_m, block_n, block_k``: the block tile in the problem's
  coordinates (a Nova schedule that swaps A and B states its tile in M, N too), each rounded down to
  a power of two where it is not one (``tl.arange`` takes powers of two only: Nova's 128x192 wgmma
  tile becomes 128x128, said in ``notes``; rounding down keeps Triton's tile inside the registers and
  shared memory Nova's tile was sized for);
* ``GROUP_M = group_m``: both rasterize tiles in groups of that many tile rows, so the CTAs that
  run together share their A rows and B columns in L2 (the same definition);
* ``num_warps``: the warps that compute one tile.  mma.sync: ``warps_m * warps_n``; wgmma:
  4 per consumer warpgroup (``4 * consumer_warpgroups``; Triton issues wgmma per warpgroup of 4
  warps).  Nova's producer warps (TMA issue, warp-specialized) have no Triton counterpart: Triton's
  loads are issued by the computing warps.  Ping-pong consumers (each warpgroup its own tile)
  have no Triton knob either: the warpgroups split each tile (cooperative).  Triton needs a power
  of two: a count that is not (3 warpgroups = 12 warps) is rounded down, said in ``notes``;
* ``num_stages = stages`` (the depth of the shared-memory ring: Triton's software pipeline keeps
  that many tiles of A and B in flight), lowered to ``ceil(K / BLOCK_K) + 1`` where the K loop is
  shorter than the ring (a tile prefetches at most its own K steps; Nova's persistent CTA carries its
  ring from tile to tile, Triton's tutorial kernel runs one program per tile, whose unused stages
  only take the shared memory that lets more programs share an SM: 4096x4096x128 bf16, 8 stages
  for two K steps), and lowered further only if Triton's ring, ``num_stages * (BLOCK_M * BLOCK_K +
  BLOCK_K * BLOCK_N) * element bytes`` (no padding, no epilogue staging), would exceed the target's
  shared memory per block (``GPUModel.smem_per_block``); each said in ``notes``;
* ``input_precision``: ``tf32`` for Nova's tf32 mode (``tl.dot(..., input_precision="tf32")``;
  Triton feeds raw FP32 to the tensor cores, which truncate; Nova rounds to nearest by default),
  ``None`` for bf16/fp16.

Decisions with no Triton knob are listed in ``notes``: split-K and its reduction, stream-K, a
thread-block cluster, persistence, swapped operands.  A Triton kernel that takes ``SPLIT_K``
reads ``split_k``.

``prune`` ranks a user's configs by their distance to Nova's, ``sum over BLOCK_M, BLOCK_N, BLOCK_K
of |log2(user / Nova)| + 0.5 * |log2(num_warps ratio)| + 0.25 * |num_stages difference|`` (tile
shape first, then warps, then depth; ties keep the user's order), and keeps the ``keep`` nearest.
Triton is imported only to wrap the dicts in ``triton.Config`` (it is not a dependency of Nova).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

META_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
# the same knobs under the names of Triton's tutorial kernel, read by ``prune``
ALIASES = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M"}
WARPS_PER_WARPGROUP = 4
ELEMENT_BYTES = {"tf32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class TritonMatmulConfig:
    """One Triton matmul configuration and where it came from."""
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int
    input_precision: str | None          # tl.dot's input_precision ("tf32"), None for 16-bit inputs
    split_k: int = 1
    problem: str = ""                    # the Nova problem it was derived for
    target: str = ""
    nova_schedule: dict = field(default_factory=dict)   # the schedule fields the mapping read
    notes: tuple[str, ...] = ()          # Nova decisions with no Triton knob, and adjustments

    @property
    def kwargs(self) -> dict:
        """The meta-parameters, as ``triton.Config(kwargs, ...)`` takes them."""
        return {name: getattr(self, name) for name in META_NAMES}

    def as_dict(self) -> dict:
        """``{"kwargs": {...}, "num_warps": .., "num_stages": ..}``: ``triton.Config(**as_dict())``."""
        return {"kwargs": self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def _power_of_two_below(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def triton_config(M: int, N: int, K: int, dtype: str = "tf32", target="h200", *, trans_a: bool = False,
                  trans_b: bool = False) -> TritonMatmulConfig:
    """Nova's schedule of ``C[M,N] = A[M,K] @ B[K,N]`` on ``target`` as Triton's knobs (module docstring)."""
    from nova.configurator import GemmProblem, configure
    from nova.hwmodel import get_target
    gpu = get_target(target) if isinstance(target, str) else target
    problem = GemmProblem(M, N, K, dtype=dtype, trans_a=trans_a, trans_b=trans_b)
    s = configure(problem, gpu, kernel="tiles").schedule      # Triton's matmul is a tiled kernel
    notes = []
    if s.mma.family == "wgmma":
        warps = WARPS_PER_WARPGROUP * s.consumer_warpgroups
        notes.append(f"{s.producer_warps} producer warps issue Nova's TMA loads (warp-specialized); Triton's "
                     f"computing warps issue its loads")
        if s.pingpong:
            notes.append(f"ping-pong consumers ({s.consumer_warpgroups} warpgroups, each its own tile) become "
                         f"cooperative: the warpgroups split each tile")
    else:
        warps = s.warps_m * s.warps_n
    num_warps = _power_of_two_below(warps)
    if num_warps != warps:
        notes.append(f"num_warps {warps} rounded down to {num_warps} (Triton needs a power of two)")
    blocks = tuple(_power_of_two_below(b) for b in (s.block_m, s.block_n, s.block_k))
    for name, nova_block, block in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), (s.block_m, s.block_n, s.block_k), blocks):
        if block != nova_block:
            notes.append(f"{name} {nova_block} rounded down to {block} (tl.arange needs a power of two)")
    block_m, block_n, block_k = blocks
    k_steps = -(-K // block_k)
    stages = min(s.stages, k_steps + 1)
    if stages != s.stages:
        notes.append(f"num_stages {s.stages} lowered to {stages}: a tile's K loop is {k_steps} step(s) of {block_k} "
                     f"(K = {K}); one program per tile prefetches at most that many")
    ring = lambda n: n * (block_m * block_k + block_k * block_n) * ELEMENT_BYTES[dtype]   # noqa: E731
    fitted = stages
    while stages > 1 and ring(stages) > gpu.smem_per_block:
        stages -= 1
    if stages != fitted:
        notes.append(f"num_stages {fitted} lowered to {stages}: {fitted} stages of Triton's ring "
                     f"({ring(fitted)} B) exceed {gpu.name}'s {int(gpu.smem_per_block)} B of shared memory per block")
    if s.split_k > 1:
        notes.append(f"split-K {s.split_k} ({s.split_reduction} reduction): pass SPLIT_K={s.split_k} to a Triton "
                     f"kernel that splits K; the tutorial kernel does not")
    if s.stream_k_tiles:
        notes.append(f"stream-K over the last {s.stream_k_tiles} tiles: no Triton knob (data-parallel tiles)")
    if s.cluster_m * s.cluster_n > 1:
        notes.append(f"thread-block cluster {s.cluster_m}x{s.cluster_n} (TMA multicast): no Triton knob")
    if s.persistent:
        notes.append("persistent CTAs: Triton's tutorial kernel launches one program per tile")
    if getattr(s, "swap_ab", False):
        notes.append("Nova computes C^T = B^T A^T (operands swapped so that wgmma reads them K-major); Triton "
                     "picks its own operand order")
    schedule = {"block": [s.block_m, s.block_n, s.block_k], "instruction": str(s.mma), "warps": [s.warps_m, s.warps_n],
                "consumer_warpgroups": s.consumer_warpgroups, "producer_warps": s.producer_warps,
                "consumers": s.consumers, "stages": s.stages, "group_m": s.group_m, "split_k": s.split_k,
                "stream_k_tiles": s.stream_k_tiles, "cluster": [s.cluster_m, s.cluster_n],
                "persistent": s.persistent, "swap_ab": bool(getattr(s, "swap_ab", False))}
    return TritonMatmulConfig(block_m, block_n, block_k, s.group_m, num_warps, stages,
                              "tf32" if dtype == "tf32" else None, s.split_k, problem.describe(), gpu.name,
                              schedule, tuple(notes))


def config_dicts(M: int, N: int, K: int, dtype: str = "tf32", target="h200", **layout) -> list[dict]:
    """Nova's configuration as ``triton.Config`` arguments (no Triton needed): ``[{"kwargs",
    "num_warps", "num_stages"}]``, one entry: Nova's pick."""
    return [triton_config(M, N, K, dtype, target, **layout).as_dict()]


def autotune_configs(M: int, N: int, K: int, dtype: str = "tf32", target="h200", **layout) -> list:
    """``[triton.Config(...)]`` of Nova's configuration for this problem (``triton.autotune``'s
    ``configs=``); the plain dicts of ``config_dicts`` where Triton is not importable."""
    dicts = config_dicts(M, N, K, dtype, target, **layout)
    try:
        import triton
    except ImportError:
        return dicts
    return [triton.Config(d["kwargs"], num_warps=d["num_warps"], num_stages=d["num_stages"]) for d in dicts]


# ====================================================================== a user's configs, nearest first
def _knobs(config) -> tuple[dict, int, int]:
    """(meta-parameters, num_warps, num_stages) of a ``triton.Config`` or an ``as_dict`` dict."""
    if isinstance(config, dict):
        return dict(config.get("kwargs", {})), int(config.get("num_warps", 4)), int(config.get("num_stages", 3))
    return dict(config.kwargs), int(config.num_warps), int(config.num_stages)


def _meta(kwargs: dict, name: str):
    value = kwargs.get(name, kwargs.get(ALIASES[name]))
    if value is None:
        raise ValueError(f"a config has no {name} (nor {ALIASES[name]}) among its meta-parameters {sorted(kwargs)}")
    return int(value)


def distance(config, nova: TritonMatmulConfig) -> float:
    """How far ``config`` is from Nova's (module docstring: log2 tile ratios, then warps, then stages)."""
    kwargs, warps, stages = _knobs(config)
    tile = sum(abs(math.log2(_meta(kwargs, n) / getattr(nova, n))) for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return tile + 0.5 * abs(math.log2(warps / nova.num_warps)) + 0.25 * abs(stages - nova.num_stages)


def prune(configs, M: int, N: int, K: int, dtype: str = "tf32", target="h200", *, keep: int = 1, **layout) -> list:
    """The ``keep`` of ``configs`` (``triton.Config``s or dicts) nearest Nova's configuration for
    this problem, nearest first (ties in the given order)."""
    configs = list(configs)
    if not configs:
        return []
    nova = triton_config(M, N, K, dtype, target, **layout)
    ranked = sorted(range(len(configs)), key=lambda i: (distance(configs[i], nova), i))
    return [configs[i] for i in ranked[:max(1, keep)]]


def early_config_prune(dtype: str = "tf32", target="h200", *, keep: int = 1, names=("M", "N", "K"), **layout):
    """A ``triton.autotune(prune_configs_by={"early_config_prune": ...})`` hook: at each new shape,
    keeps the ``keep`` configs nearest Nova's for the launch's M, N, K (read from the kernel's
    arguments ``names``), so autotuning times only those."""
    def hook(configs, named_args, **kwargs):
        values = {**named_args, **kwargs}
        M, N, K = (int(values[n]) for n in names)
        return prune(configs, M, N, K, dtype, target, keep=keep, **layout)
    return hook
