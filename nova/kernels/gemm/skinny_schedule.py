"""``SkinnySchedule``: every decision the skinny GEMM's code generator and launcher read.

The skinny kernel (``skinny.py`` derives it, ``emit_skinny.py`` builds it) computes a GEMM of a few
rows (M at most the FP32 balance point, ``skinny.m_max``) on the CUDA cores: B is streamed once from
DRAM with vector loads, A's rows are staged in shared memory (with vector loads along them where
``a_vec`` > 1, ``skinny.staging_vector``), every output is an FP32 sum of FMAs.  Two thread layouts,
by how B is stored:

* ``lanes_along = "n"`` (B row-major ``[K, N]``): thread ``(tn, tk)`` of a CTA owns the ``vec``
  columns from ``(blockIdx.x * threads_n + tn) * vec`` and adds rows ``tk, tk + threads_k, ...`` of
  its K slice; a warp's lanes read one row's ``32 x vec`` consecutive columns (one coalesced access).
  The ``threads_k`` partial sums of a column meet in shared memory, added in ``tk`` order.  With
  ``row_shift`` (N not a multiple of ``vec``) row ``k`` is read as the two aligned vectors from
  ``k N + c - d``, ``d = (k N) mod vec``, for a thread's first column ``c``: elements ``d .. d + vec - 1``
  of the eight are its columns.  A thread's rows step by ``threads_k``, a multiple of ``vec``, so ``d``
  is one value for all of them (``(tk N) mod vec``), and the columns are taken out by a shifter of
  ``log2(vec)`` selects on its bits; columns past N are computed from whatever lies there and never
  written.
* ``lanes_along = "k"`` (B stored ``[N, K]``, ``trans_b``): warp ``w`` owns the ``rows`` columns of C
  from ``(blockIdx.x * threads_n + w) * rows``; its lanes read consecutive ``vec``-element vectors of
  those rows of the stored B along K, and a butterfly of shuffles adds the lanes' sums at the end.
  With ``row_shift`` (K not a multiple of ``vec``, so rows do not start on 16-byte boundaries) a row
  ``n`` is read as the aligned vectors from ``n K - d``, ``d = (n K) mod vec``: position ``v`` of the
  loop (over ``k_extent(K)``) holds element ``k = v - d``, and elements with ``k`` outside ``[0, K)``
  (the row's neighbours) are masked to zero before their FMAs.  Rows congruent mod ``vec`` share ``d``,
  so warp ``w`` owns rows ``c0 + (w mod vec) + vec (g rows + j)``, ``g = w div vec``, ``j < rows`` of
  its CTA's ``columns`` from ``c0``; A's chunk is staged with ``halo`` columns before it, and a lane
  reads A's value for ``v`` at ``v + halo - d`` of the chunk's staged row.

``blockIdx.y`` is the K slice ``[y * k_slice, min((y + 1) * k_slice, K))``; A's columns of a slice are
staged ``a_chunk`` at a time.  One slice (``splits`` = 1): the kernel writes C with the epilogue
(bias, activation, output type).  Several: each CTA writes its FP32 partial sums into its column
block's region of a workspace (``[splits, M, columns]``, each region padded to whole 128-byte lines
so no two regions share one), fences them and takes a ticket from its column block's counter; the
CTA holding the last ticket adds the block's partials in slice order (``reduce_groups`` groups of
threads each adding a contiguous share of the slices, the shares then added in group order through
shared memory), writes C with the epilogue and resets the counter for the next launch: one launch,
no float atomics, the same bits on every run.

``from_dict(to_dict())`` round-trips through JSON; the kernel cache hashes ``to_dict``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

LANES = ("n", "k")
WARP = 32
LINE_WORDS = 32           # FP32 words of a 128-byte cache line
FLAG_WORDS = 4            # shared words before the last CTA's meeting buffer: the ticket's verdict (16-byte aligned)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def shift_halo(lanes_along: str, vec: int, row_shift: bool) -> int:
    """A's columns staged before a chunk beyond its own: ``vec`` with rows shifted along K (a row's
    shift), else 0 (rows shifted along N read A as rows read whole do)."""
    return vec if row_shift and lanes_along == "k" else 0


def loop_extent(K: int, vec: int, halo: int) -> int:
    """K the loop runs over: K, or with a halo (rows shifted along K) K plus the largest shift, in whole
    vectors."""
    return cdiv(K + vec - 1, vec) * vec if halo else K


@dataclass(frozen=True)
class SkinnySchedule:
    arch: str                    # PTX target ("sm_80", "sm_86", "sm_89", "sm_90")
    lanes_along: str             # "n": B row-major [K, N]; "k": B stored [N, K] (module docstring)
    vec: int                     # B elements per vector load (16 bytes at most)
    threads: int                 # per CTA
    threads_n: int               # "n": threads side by side along N (each ``vec`` columns); "k": warps
    rows: int                    # "k": columns of C a warp owns; "n": 1
    unroll: int                  # B vector loads a thread keeps in flight per column ("n") or row ("k") and trip
    splits: int                  # K slices (grid y); 1: the kernel writes C itself
    k_slice: int                 # K per slice, a multiple of the trip span (the last slice: the rest)
    a_chunk: int                 # K of A staged in shared memory at a time, a multiple of the trip span
    stage_loads: int             # A's elements a thread loads per staging round (loads first, then stores)
    m_pad: int                   # "n": A staged as [a_chunk, m_pad] (rows read as vectors); "k": M
    smem_bytes: int              # dynamic shared memory: A's chunk, or the partial sums met in it
    regs_per_thread: int         # the derivation's estimate (ptxas reports the real count)
    max_regs: int                # the register cap (nvvm.maxnreg) of ``blocks_per_sm`` CTAs: ptxas would
                                 # otherwise pick its own (more: fewer CTAs; or a cap of its own, and spill)
    blocks_per_sm: int
    reduce_groups: int = 1       # splits > 1: the last CTA's thread groups, each adding a share of the slices
    b_first: bool = False        # a chunk's first trip issues its loads of B before A's staging (``emit_skinny.chunk``)
    a_vec: int = 1               # A's elements a staging load reads: a vector along a row of A ([M, K] stored, K,
                                 # the chunks and the slices multiples of it, no halo), else 1 (element by element)
    row_shift: bool = False      # B's rows (K for "k", N for "n") not a multiple of vec: each row read as aligned
                                 # vectors from (row start) - shift; "k" masks the elements outside the row,
                                 # "n" reads two vectors and keeps the thread's columns (module docstring)

    kernel: ClassVar[str] = "skinny"      # the GEMM kernel this schedule describes (Schedule: "tiles")

    def __post_init__(self):
        if self.lanes_along not in LANES:
            raise ValueError(f"lanes_along must be one of {LANES}, got {self.lanes_along!r}")

    # ---- derived quantities (never stored twice)
    @property
    def launches(self) -> int:
        """Kernel launches per call: one (a split's last CTA adds the slices and resets its counter)."""
        return 1

    @property
    def threads_k(self) -> int:
        """Threads stacked along K in a CTA: "n" the rest of the CTA, "k" a warp's lanes."""
        return self.threads // self.threads_n if self.lanes_along == "n" else WARP

    @property
    def columns(self) -> int:
        """Columns of C one CTA computes."""
        return self.threads_n * (self.vec if self.lanes_along == "n" else self.rows)

    @property
    def span(self) -> int:
        """K one loop trip of a CTA covers: "n" its stacked threads x unroll rows; "k" a warp's lanes x vec x unroll."""
        return self.threads_k * self.unroll if self.lanes_along == "n" else WARP * self.vec * self.unroll

    @property
    def accumulators(self) -> int:
        """FP32 sums a thread keeps (per M row: its vec columns, or its warp's rows)."""
        return self.vec if self.lanes_along == "n" else self.rows

    @property
    def split(self) -> bool:
        """K slices write partials that the last CTA of each column block adds."""
        return self.splits > 1

    @property
    def halo(self) -> int:
        """``shift_halo`` of this schedule."""
        return shift_halo(self.lanes_along, self.vec, self.row_shift)

    def k_extent(self, K: int) -> int:
        """``loop_extent`` of ``K`` under this schedule."""
        return loop_extent(K, self.vec, self.halo)

    def grid(self, N: int) -> tuple[int, int, int]:
        """(CTAs along N, K slices, 1)."""
        return cdiv(N, self.columns), self.splits, 1

    def region(self, M: int) -> int:
        """FP32 words of one column block's partials, [splits, M, columns], padded to whole 128-byte lines."""
        return LINE_WORDS * cdiv(self.splits * M * self.columns, LINE_WORDS)

    def reduction_smem_bytes(self, M: int) -> int:
        """A split's shared memory for the last CTA: the ticket's verdict and, with several thread
        groups, their sums (one word per group and output); 0 without a split."""
        if not self.split:
            return 0
        return 4 * (FLAG_WORDS + (self.reduce_groups * M * self.columns if self.reduce_groups > 1 else 0))

    def tickets_offset(self, M: int, N: int) -> int:
        """Bytes from the workspace's start to the column blocks' counters (after the partials)."""
        return 4 * self.grid(N)[0] * self.region(M)

    def workspace_bytes(self, M: int, N: int) -> int:
        """The partials of every column block and one 32-bit counter each (0 without a split)."""
        return self.tickets_offset(M, N) + 4 * self.grid(N)[0] if self.split else 0

    def label(self) -> str:
        """``"skinny n v4 32x8 u4 s6"``: lanes, vector, threads (along N x along K, or warps x rows), unroll, splits."""
        shape = f"{self.threads_n}x{self.threads_k}" if self.lanes_along == "n" else f"w{self.threads_n}r{self.rows}"
        return f"skinny {self.lanes_along} v{self.vec} {shape} u{self.unroll} s{self.splits}"

    def to_dict(self) -> dict:
        d = asdict(self)
        for flag in ("row_shift", "b_first"):
            if not d[flag]:
                del d[flag]        # the schedules (and cache keys) without it stay as they were
        if d["a_vec"] == 1:
            del d["a_vec"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SkinnySchedule":
        return cls(**d)
