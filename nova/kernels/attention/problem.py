"""What fused attention computes, independent of any schedule.

``out[b,h] = softmax(scale * q[b,h] @ k[b,h']^T + mask) @ v[b,h']`` with ``h' = h // (heads // kv_heads)``
(grouped-query attention when ``kv_heads < heads``), FP32 accumulation and FP32 softmax, plus the
per-row log-sum-exp ``lse[b,h,i] = log(sum_j exp(scale * q_i . k_j))`` (natural log, FP32) that the
backward pass needs.  Layout: q ``[B, H, Tq, D]``, k and v ``[B, Hkv, Tk, D]``, out like q, lse
``[B, H, Tq]``; all contiguous (torch's ``scaled_dot_product_attention`` layout).

``causal`` masks key ``j > i`` (top-left aligned, as torch's ``is_causal``): every row keeps key 0,
so no row is ever fully masked.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# name: (storage element type, bytes per element)
ATTN_DTYPES = {"tf32": ("f32", 4), "bf16": ("bf16", 2), "fp16": ("f16", 2)}
HEAD_DIMS = (64, 128)          # head dimensions the mma.sync kernels are generated for


class AttentionProblemError(ValueError):
    """A problem statement no attention kernel can compute."""


@dataclass(frozen=True)
class AttentionProblem:
    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool = False
    dtype: str = "tf32"
    kv_heads: int | None = None      # None: = heads (multi-head attention)
    scale: float | None = None       # None: 1/sqrt(head_dim)

    def __post_init__(self):
        for name in ("batch", "heads", "seq_q", "seq_k", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise AttentionProblemError(f"attention {name} must be a positive integer, got {v!r}")
        if self.dtype not in ATTN_DTYPES:
            raise AttentionProblemError(f"unsupported attention dtype {self.dtype!r}; choose one of "
                                        f"{', '.join(ATTN_DTYPES)}")
        if self.head_dim not in HEAD_DIMS:
            raise AttentionProblemError(f"head_dim {self.head_dim} is not supported; choose one of "
                                        f"{', '.join(map(str, HEAD_DIMS))}")
        if not isinstance(self.causal, bool):
            raise AttentionProblemError(f"causal must be True or False, got {self.causal!r}")
        kv = self.heads if self.kv_heads is None else self.kv_heads
        if not isinstance(kv, int) or isinstance(kv, bool) or kv < 1 or self.heads % kv:
            raise AttentionProblemError(f"kv_heads={self.kv_heads!r} must be a positive divisor of heads={self.heads}")
        object.__setattr__(self, "kv_heads", kv)
        sc = 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale
        if isinstance(sc, bool) or not isinstance(sc, (int, float)) or not math.isfinite(sc) or sc <= 0:
            raise AttentionProblemError(f"scale must be a positive finite number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(sc))

    @property
    def storage(self) -> str:
        return ATTN_DTYPES[self.dtype][0]

    @property
    def elem_bytes(self) -> int:
        return ATTN_DTYPES[self.dtype][1]

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    @property
    def pairs(self) -> int:
        """(query, key) pairs that are computed: T_q*T_k, or the lower triangle when causal."""
        tq, tk = self.seq_q, self.seq_k
        if not self.causal:
            return tq * tk
        full = min(tq, tk)      # rows i < Tk keep i+1 keys, rows i >= Tk keep all Tk
        return full * (full + 1) // 2 + max(0, tq - tk) * tk

    @property
    def fwd_flops(self) -> int:
        return 4 * self.batch * self.heads * self.pairs * self.head_dim

    @property
    def bwd_flops(self) -> int:
        """The algorithm's backward: 5 matmuls per pair (S, dP, dV, dK, dQ)."""
        return 10 * self.batch * self.heads * self.pairs * self.head_dim

    @property
    def fwd_bytes(self) -> int:
        """Compulsory DRAM traffic of the forward: q, k, v read, out written, lse written."""
        b, d = self.elem_bytes, self.head_dim
        q = self.batch * self.heads * self.seq_q * d * b
        kv = 2 * self.batch * self.kv_heads * self.seq_k * d * b
        return 2 * q + kv + 4 * self.batch * self.heads * self.seq_q

    @property
    def bwd_bytes(self) -> int:
        b, d = self.elem_bytes, self.head_dim
        q = self.batch * self.heads * self.seq_q * d * b
        kv = 2 * self.batch * self.kv_heads * self.seq_k * d * b
        return 4 * q + 2 * kv + 8 * self.batch * self.heads * self.seq_q + q + kv

    def describe(self) -> str:
        kv = f" kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        t = f"T={self.seq_q}" if self.seq_q == self.seq_k else f"Tq={self.seq_q} Tk={self.seq_k}"
        return (f"attention B={self.batch} H={self.heads}{kv} {t} D={self.head_dim} {self.dtype}"
                f"{' causal' if self.causal else ''} scale={self.scale:.6g}")

    def to_dict(self) -> dict:
        return asdict(self)
