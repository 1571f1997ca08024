"""Rows kernels: row reductions and normalizations fused with their producers and consumers (LayerNorm,
RMSNorm, softmax, log-softmax, cross-entropy, their backwards, sums/means/maxima over the last axis with
a pointwise prologue, and column sums over rows): the problem, the schedule, the configurator's
derivation, the MLIR builders, compilation and the launcher.

    from nova.kernels.rows import cli_problem, configure_rows
    cfg = configure_rows(cli_problem("layer_norm", 16384, 512, "bf16"), "h200")

Importing this package imports neither MLIR nor the CUDA driver.
"""
from nova.kernels.rows.kinds import cli_problem, column_problem
from nova.kernels.rows.problem import KINDS, Operand, RowsProblem, RowsProblemError
from nova.kernels.rows.prologue import Prologue
from nova.kernels.rows.schedule import ROLES, ColumnTile, PartialsTile, RowsConfig, RowsSchedule, RowTile


def __getattr__(name):
    if name == "configure_rows":
        from nova.kernels.rows.derive import configure_rows
        return configure_rows
    raise AttributeError(f"module 'nova.kernels.rows' has no attribute {name!r}")


__all__ = ["KINDS", "Operand", "RowsProblem", "RowsProblemError", "Prologue", "ROLES", "ColumnTile", "PartialsTile", "RowsConfig",
           "RowsSchedule", "RowTile", "cli_problem", "column_problem", "configure_rows"]
