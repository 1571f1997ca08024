"""``RowsSchedule``: every decision the rows code generator needs, for each kernel a problem launches.

Kernels (roles), in launch order where a problem has several:

    row           one row per ``threads_per_row`` threads (a warp or part of one for short rows, the whole
                  CTA for long ones), ``rows_per_cta`` rows per CTA; the row held in registers
                  (``in_registers``) or walked in ``chunks`` vector steps per pass, re-read per pass.
                  A row reduction over few long rows splits each row over ``splits`` CTAs (CTA ``bx``:
                  row ``bx / splits``, its ``chunks`` vector steps from step ``(bx % splits) x chunks``),
                  each writing its part's reduction to a workspace slot
    row_final     the split rows' parts added in split order, one warp per row (deterministic)
    column        the column reduction's first stage: CTA (x, s) sums rows of split s for its columns into
                  per-split partials (the final values when ``splits`` is 1)
    column_final  the second stage: each column's ``splits`` partials added in order (deterministic)
    partials_final  the norms' weight/bias gradients accumulated by the row kernel itself (``partials``):
                  each of its CTAs adds its rows' columns into one partial row per gradient in a
                  workspace; this kernel adds each column's partials in CTA order (deterministic)
    total         one CTA: a loss's sum (and count) over all rows, or the backward's per-row scale

The configurator (``derive.py``) fills it; the builders (``emit_*.py``) read only it and the problem.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

ROLES = ("total_pre", "row", "row_final", "column", "column_final", "partials_final", "total")


@dataclass(frozen=True)
class RowTile:
    threads: int                    # threads per CTA
    threads_per_row: int
    rows_per_cta: int
    vec: int                        # elements per vector access (16 bytes at most)
    chunks: int                     # vector steps per thread per row: ceil(n / (threads_per_row * vec))
    in_registers: bool              # the row stays in registers (one read); else every pass re-reads it
    grid: int
    smem_bytes: int
    blocks_per_sm: int
    regs_per_thread: int            # the derivation's estimate (ptxas verifies)
    max_regs: int = 255             # the register cap (nvvm.maxnreg): the planned residency's share of the file
    splits: int = 1                 # CTAs per row (row reductions over few long rows); chunks is per split
    final_threads: int = 0          # row_final (splits > 1): threads a CTA, one warp per row
    final_grid: int = 0             # row_final: CTAs
    early: tuple[str, ...] = ()     # row operands only the writing sweep reads, loaded in the row's first sweep

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.splits == 1:        # an unsplit row kernel keeps the schedule (and cache key) it always had
            for name in ("splits", "final_threads", "final_grid"):
                del d[name]
        if not self.early:          # as does a kernel with no early loads
            del d["early"]
        return d

    @property
    def row_groups(self) -> int:
        """CTAs along the rows (the grid is row_groups x splits)."""
        return self.grid // self.splits


class FinalSum:
    """The shape of a kernel adding partial rows (``final_vec``, ``final_threads_cols``,
    ``final_threads_rows``, ``outputs``: ``emit_partials.final_sum``) shared by the tiles that have one."""

    @property
    def final_threads(self) -> int:
        return self.final_threads_cols * self.final_threads_rows

    @property
    def final_smem_bytes(self) -> int:
        return 4 * self.outputs * self.final_threads * self.final_vec if self.final_threads_rows > 1 else 0


@dataclass(frozen=True)
class ColumnTile(FinalSum):
    threads_cols: int               # threads side by side along the columns (each ``vec`` columns)
    threads_rows: int               # threads stacked along the rows (their sums added through shared memory)
    vec: int
    splits: int                     # row slabs summed by separate CTAs (first stage grid y)
    rows_per_split: int
    grid: tuple[int, int]           # (column blocks, splits)
    final_vec: int                  # column_final (splits > 1): f32 elements per access
    final_threads_cols: int         # column_final: threads along the columns (a warp's lanes)
    final_threads_rows: int         # column_final: threads along the partials, met in shared memory
    final_grid: int
    smem_bytes: int
    outputs: int = 1                # sums reduced (one partial slab each)
    unroll: int = 1                 # rows a thread loads before adding them (loads in flight)
    final_unroll: int = 1           # column_final: partials a thread loads before adding them

    @property
    def threads(self) -> int:
        return self.threads_cols * self.threads_rows


    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"] = list(self.grid)
        return d


@dataclass(frozen=True)
class PartialsTile(FinalSum):
    """The weight/bias gradients summed in the row kernel's pass: its grid is ``partials`` CTAs, CTA b
    walks row groups b, b + partials, ... (``groups_per_cta`` of them) and keeps its columns' sums in
    registers; one partial row per gradient and CTA, then ``partials_final`` adds them in CTA order."""
    partials: int                   # row-kernel CTAs = partial rows per gradient
    groups_per_cta: int             # row groups (rows_per_cta rows each) a CTA walks
    outputs: int                    # gradients summed (dweight, dbias)
    final_vec: int                  # partials_final: f32 elements per access
    final_threads_cols: int         # partials_final: threads along the columns (a warp's lanes)
    final_threads_rows: int         # partials_final: threads along the partials, met in shared memory
    final_grid: int
    final_unroll: int = 1           # partials a final-sum thread loads before adding them


    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RowsSchedule:
    arch: str
    roles: tuple                    # the kernels, in launch order
    row: RowTile | None = None
    column: ColumnTile | None = None
    total_threads: int = 0          # the single-CTA loss kernels (0: none)
    partials: PartialsTile | None = None    # weight/bias gradients in the row kernel's pass

    def to_dict(self) -> dict:
        d = {"arch": self.arch, "roles": list(self.roles)}
        if self.row is not None:
            d["row"] = self.row.to_dict()
        if self.column is not None:
            d["column"] = self.column.to_dict()
        if self.total_threads:
            d["total_threads"] = self.total_threads
        if self.partials is not None:
            d["partials"] = self.partials.to_dict()
        return d

    def workspace_bytes(self, problem) -> int:
        """Scratch the launches need besides the operands (``abi.workspace_layout``)."""
        from nova.kernels.rows.abi import workspace_layout
        return workspace_layout(problem, self)[1]


@dataclass(frozen=True)
class RowsConfig:
    """The configurator's answer: schedule, prediction and the derivation that explains it."""
    problem: object
    target: object
    schedule: RowsSchedule
    prediction: object              # nova.configurator.step.Prediction of all kernels together
    derivation: tuple = ()
    terms: dict = field(default_factory=dict)      # role -> {"time_us", "bytes", "bound"}
    config_time_ms: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict:
        return {"op": "rows", "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "schedule": self.schedule.to_dict(),
                "prediction": self.prediction.to_dict(), "kernels_us": self.terms,
                "derivation": [st.to_dict() for st in self.derivation], "config_time_ms": self.config_time_ms}
