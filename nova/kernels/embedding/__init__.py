"""Embedding kernels: the gather of table rows by an index tensor (``index_select`` on axis 0, the
embedding lookup) and its transpose, the deterministic scatter-add of gradient rows into a zeroed
table (``scatter_add``, the embedding backward): the problem, the schedule, the configurator's
derivation, the MLIR builders, compilation and the launcher.

    from nova.kernels.embedding import EmbeddingProblem, configure_embedding
    cfg = configure_embedding(EmbeddingProblem("forward", 16384, 32768, 512, "f32"), "h200")

Why a family of its own rather than a kind of the ``rows`` family: a rows problem states each operand
as an affine layout over one ``[rows, n]`` space (row, column, per-row, scalar), and every rows kernel
is one pass of fused arithmetic over it.  Here the address of a row is data (an index read from
memory), the backward is not one pass but a pipeline (a stable radix sort of the indices in integer
workspaces, then an ordered segmented sum per table row), and neither kernel does arithmetic on the
rows besides the sum.  What the two share is small and shared by import: the 16-byte vector rule and
the FP32 memory helpers of ``rows/emit.py``, and the memory-bound prediction of the pointwise family.

Importing this package imports neither MLIR nor the CUDA driver.
"""
from nova.kernels.embedding.problem import DIRECTIONS, EmbeddingProblem, EmbeddingProblemError
from nova.kernels.embedding.schedule import EmbeddingConfig, EmbeddingSchedule, RowTile, SortPlan


def __getattr__(name):
    if name == "configure_embedding":
        from nova.kernels.embedding.derive import configure_embedding
        return configure_embedding
    raise AttributeError(f"module 'nova.kernels.embedding' has no attribute {name!r}")


__all__ = ["DIRECTIONS", "EmbeddingProblem", "EmbeddingProblemError", "EmbeddingConfig", "EmbeddingSchedule",
           "RowTile", "SortPlan", "configure_embedding"]
