"""``EmbeddingSchedule``: every decision the embedding code generator needs, per kernel (role).

Roles, in launch order:

    forward    gather          one output row per ``threads_per_row`` lanes, ``rows_per_cta`` rows per CTA:
                               the row's index read once, the table row copied in 16-byte vectors
    backward   histogram<p>    pass p of the stable LSD radix sort of the indices (``digit_bits`` a pass):
                               CTA t counts the digits of its tile of ``tile`` keys (shared-memory integer
                               atomics: exact) into column t of the [digit, tile] count table
               scan<p>         one CTA: the exclusive prefix sum of that table in (digit, tile) order, in place:
                               where each tile's keys of each digit go
               scatter<p>      CTA t places each key of its tile at its digit's offset plus its rank among the
                               tile's equal digits before it (warp match + per-warp counts): stable
               accumulate      one table row per ``threads_per_row`` lanes: its segment of the sorted keys
                               found by a (lanes + 1)-ary search (``search_steps`` rounds of one probe a
                               lane and a warp ballot), dy's rows added in that order (index order, FP32),
                               ``tokens_per_trip`` of them loaded before they are added, the row written
                               once (zero where no index names it)

The configurator (``derive.py``) fills it; the builders (``emit.py``) read only it and the problem.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

MAX_UNROLL = 8          # chunk and count loops up to this many steps are unrolled, longer ones are scf.for


@dataclass(frozen=True)
class RowTile:
    """The row-copy geometry of ``gather`` (output rows) and ``accumulate`` (table rows)."""
    rows: int                       # rows the kernel walks
    vec: int                        # elements per vector access (16 bytes at most)
    threads_per_row: int
    rows_per_cta: int
    threads: int                    # threads per CTA
    chunks: int                     # vector steps a lane takes along its row
    grid: int
    blocks_per_sm: int
    search_steps: int = 0           # accumulate: rounds of the segment search (both bounds at once)
    tokens_per_trip: int = 1        # accumulate: dy rows a lane loads before adding them (in index order)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SortPlan:
    """The stable LSD radix sort of the indices (backward)."""
    digit_bits: int                 # bits a pass sorts by
    passes: int                     # ceil(key bits / digit bits)
    tile: int                       # keys a CTA counts and places (its threads: one key each)
    tiles: int                      # ceil(count / tile)
    scan_threads: int               # the scan's one CTA
    scan_per_thread: int            # consecutive counts a scan thread adds: ceil(2^digit_bits * tiles / scan_threads)

    @property
    def digits(self) -> int:
        return 1 << self.digit_bits

    @property
    def entries(self) -> int:
        """Counts in the [digit, tile] table."""
        return self.digits * self.tiles

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EmbeddingSchedule:
    arch: str
    roles: tuple                    # the kernels, in launch order
    rows: RowTile                   # gather (forward) or accumulate (backward)
    sort: SortPlan | None = None

    def to_dict(self) -> dict:
        d = {"arch": self.arch, "roles": list(self.roles), "rows": self.rows.to_dict()}
        if self.sort is not None:
            d["sort"] = self.sort.to_dict()
        return d


@dataclass(frozen=True)
class EmbeddingConfig:
    """The configurator's answer: schedule, prediction and the derivation that explains it."""
    problem: object
    target: object
    schedule: EmbeddingSchedule
    prediction: object              # nova.configurator.step.Prediction of all kernels together
    derivation: tuple = ()
    terms: dict = field(default_factory=dict)      # role -> {"time_us", "bytes", "bound"}
    config_time_ms: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict:
        return {"op": "embedding", "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "schedule": self.schedule.to_dict(),
                "prediction": self.prediction.to_dict(), "kernels_us": self.terms,
                "derivation": [st.to_dict() for st in self.derivation], "config_time_ms": self.config_time_ms}
