"""Every built-in kernel family, registered: import this module where all of them must be known
(the cache's stale-entry detection, ``nova cache prune``).  A new family adds its module here."""
from __future__ import annotations

from nova.kernels import family
from nova.kernels.attention import compile as attention_family  # noqa: F401  (registers "attention")
from nova.kernels.embedding import compile as embedding_family  # noqa: F401  (registers "embedding")
from nova.kernels.gemm import family as gemm_family  # noqa: F401  (registers "gemm")
from nova.kernels.optimizer import compile as optimizer_family  # noqa: F401  (registers "multi_tensor")
from nova.kernels.pointwise import compile as pointwise_family  # noqa: F401  (registers "pointwise")
from nova.kernels.rows import compile as rows_family  # noqa: F401  (registers "rows")


def current_keys(entry: dict) -> set[str]:
    """The keys today's code gives a cache entry, over every built-in family and GPU preset
    (``KernelCache.prune(current_keys=...)``)."""
    return family.current_keys(entry, family.preset_targets())


def abis() -> dict[str, int]:
    """Every built-in family's ABI counter by name: what a benchmark's results record, so a later fit
    can tell which kernels a row measured."""
    return {f.name: f.abi for f in family.families()}
