"""What fused attention computes, independent of any schedule.

``out[b,h] = softmax(scale * q[b,h] @ k[b,h']^T + mask) @ v[b,h']`` with ``h' = h // (heads // kv_heads)``
(grouped-query attention when ``kv_heads < heads``), FP32 accumulation and FP32 softmax, plus the
per-row log-sum-exp ``lse[b,h,i] = log(sum_j exp(scale * q_i . k_j))`` (natural log, FP32) that the
backward pass needs.  Layout: q ``[B, H, Tq, D]``, k and v ``[B, Hkv, Tk, D]``, out like q, lse
``[B, H, Tq]`` (torch's ``scaled_dot_product_attention`` layout).

Strides.  The eight ``[B, H|Hkv, T, D]`` operands (``OPERANDS``: q, k, v, out and, in the backward,
dout, dq, dk, dv) are contiguous unless ``strides`` gives their element strides ``(sB, sH, sT)``: the
head dimension is always contiguous (stride 1), the other three are arbitrary multiples of 16 bytes
(cp.async copies 16-byte chunks), and an output's elements must not overlap.  In a training step q, k
and v are views of the fused projection ``[B, T, 3, H, D]`` and dout a transposed ``[B, T, H*D]``: the
kernels read them in place.  Strides are static (a kernel is generated per problem): ``strides`` is
normalised to the operands that differ from the contiguous layout (a dimension of size 1 has no
stride), so a contiguous problem's dict and cache key are what they were without the field.  lse and
the backward's delta are always contiguous ``[B*H*Tq]`` FP32.

``causal`` masks key ``j > i`` (top-left aligned, as torch's ``is_causal``): every row keeps key 0,
so no row is ever fully masked by it.

``bias`` (empty: none) is an additive FP32 score bias ``[B|1, H|1, Tq|1, Tk]``, stored as its element
strides ``(sB, sH, sQ, sK)``, 0 on a broadcast axis (a padding mask ``[B, 1, 1, Tk]`` has sH = sQ = 0):
``score = max(scale * q . k + bias, BIAS_FLOOR)`` before the softmax, the causal mask on top.  The
floor (-1e4, ``BIAS_FLOOR``, the IR op's ``ATTENTION_BIAS_FLOOR``) catches every -inf and ``torch.finfo.min`` entry, so
no row ever meets inf - inf.  Where a row keeps some key (a score above about -1e4 + 104), a clamped
key's weight is exp(-1e4 - max): exactly 0 in FP32, what eager's -inf and finfo.min masks give.  A
row whose every causally visible key is clamped is *masked*: out = 0 and lse = +inf, what torch's SDPA
gives a row a boolean or -inf mask masks whole (a left-padded sequence's first queries under Hugging
Face's causal & padding mask); the backward's P = exp(s - lse) is then 0 across the row, so it gets no
gradient.  (For a finfo.min mask eager averages v over all Tk keys instead; the rows Hugging Face
masks so are left-padding queries whose outputs no loss reads.)  The backward treats the clamp as the
identity (dS = P (dP - D) everywhere), as eager's autograd does for ``s + finfo.min``; the bias gets
no gradient.

``score_precision`` (TF32 only) is how the score product ``S = Q K^T`` is computed: ``"tf32"``, one
TF32 tensor-core product (inputs rounded to 10 mantissa bits: each score carries a relative error of
about 2^-11 of ``|q| |k|``), or ``"3xtf32"``, the split product ``S = Qb Kb + Qb Ks + Qs Kb`` with
``x = xb + xs`` (``xb`` = x rounded to TF32, ``xs`` = the exact rest, of which the tensor core reads
the top 10 mantissa bits), FP32-accurate to about 2^-21 at three times the score MMAs.  The softmax
exponentiates scores, so an absolute score error ``e`` becomes a relative probability error ``e``.
P V, dP and the gradient products stay single TF32 (their errors are relative).  ``"fp32"`` splits
every product the same way (S, P V, and the backward's dP, dV, dK, dQ): attention as accurate as
FP32 arithmetic, as PyTorch's float32 attention is, at three times every MMA (``score_precision_for``
says when that matters).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from nova.options import Options
from nova.options import current as current_options

# name: (storage element type, bytes per element)
ATTN_DTYPES = {"tf32": ("f32", 4), "bf16": ("bf16", 2), "fp16": ("f16", 2)}
SCORE_PRECISIONS = ("tf32", "3xtf32", "fp32")   # how TF32 computes its products (module docstring)
HEAD_DIMS = (64, 128)          # head dimensions the mma.sync kernels are generated for
OPERANDS = ("q", "k", "v", "out", "dout", "dq", "dk", "dv")   # the [B, H|Hkv, T, D] tensors
KV_OPERANDS = ("k", "v", "dk", "dv")                          # [B, Hkv, Tk, D]; the others [B, H, Tq, D]
OUTPUTS = ("out", "dq", "dk", "dv")                           # written: their elements must not overlap
# the operands each kernel reads or writes (build.PARAMS without lse/delta): a kernel's cache key holds
# only their strides, so the forward of a step and its backward share the kernels they both use
ROLE_OPERANDS = {"fwd": ("q", "k", "v", "out"), "bwd_pre": ("out", "dout"),
                 "bwd_dkv": ("q", "k", "v", "dout", "dk", "dv"), "bwd_dq": ("q", "k", "v", "dout", "dq"),
                 "fwd_combine": ("out",), "bwd_dq_combine": ("dq",), "bwd_dkv_combine": ("dk", "dv")}
BIAS_ROLES = ("fwd", "bwd_dkv", "bwd_dq")                     # the kernels that compute scores read the bias
BIAS_CODE_ROLES = BIAS_ROLES + ("fwd_combine",)   # the kernels whose code depends on a bias: those, and the forward's
                                                # combine (its merge of rows masked in every split, build_combine)


# scale q.k + bias below it is clamped there (module docstring): exp(-1e4 - max) is 0 in FP32 beside any key a
# row keeps, and the kernels' base-2 exponents of a fully masked row (-1.4e4) keep ~1e-3 absolute accuracy in FP32
BIAS_FLOOR = -1.0e4


class AttentionProblemError(ValueError):
    """A problem statement no attention kernel can compute."""


def score_precision_for(dtype: str, opts: Options | None = None) -> str:
    """The score precision that ``nova.attention``, compiled programs and ``nova-config explain`` state
    for ``dtype`` problems: for TF32 ``NOVA_ATTENTION_PRECISION`` (``opts``, None: the environment's),
    by default "tf32" (one TF32 product, like every float32 matmul Nova runs), "3xtf32" FP32-accurate
    scores only (2.4x TF32's attention time on the H200; it did not bring GPT-144M's 200-step loss
    curve closer to eager's, bench/NOTES.md), "fp32" every product FP32-accurate (three MMAs each,
    3.9x), the arithmetic of PyTorch's float32 attention.  Else "tf32" (the 16-bit kernels multiply exactly, FP32
    accumulation)."""
    opts = opts if opts is not None else current_options()
    return opts.attention_precision if dtype == "tf32" else "tf32"


def dense_strides(shape) -> tuple[int, int, int, int]:
    """Element strides of a contiguous ``[B, H, T, D]`` tensor."""
    _, h, t, d = shape
    return (h * t * d, t * d, d, 1)


def strides_reason(name: str, shape, strides, elem_bytes: int) -> str:
    """Why the kernels cannot address operand ``name`` of ``shape`` ``[B, H, T, D]`` with element
    ``strides`` (four, as ``torch.Tensor.stride()``) in place; '' when they can."""
    strides = tuple(strides)
    if len(strides) != 4 or any(not isinstance(x, int) or isinstance(x, bool) for x in strides):
        return f"{name} needs 4 integer strides [sB, sH, sT, sD], got {list(strides)}"
    if any(x < 0 for x in strides):
        return f"{name}'s strides {list(strides)} are negative"
    if strides[3] != 1 and shape[3] > 1:
        return f"{name}'s head dimension is not contiguous (stride {strides[3]}, the kernels need 1)"
    vec = 16 // elem_bytes
    for dim, n, x in zip("BHT", shape, strides):
        if n > 1 and x % vec:
            return (f"{name}'s {dim} stride {x} is not a multiple of 16 bytes ({vec} elements; cp.async copies "
                    f"16-byte chunks)")
    if name in OUTPUTS:             # non-overlapping: by increasing stride, each steps over the ones below
        span = 0
        for x, n in sorted((x, n) for n, x in zip(shape, strides) if n > 1):
            if x <= span:
                return f"{name}'s strides {list(strides)} overlap (an output element would be written twice)"
            span += (n - 1) * x
    return ""


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
    # {operand: (sB, sH, sT)} (or a trailing sD = 1) for the operands that are not contiguous; stored
    # as a tuple of (operand, (sB, sH, sT)) pairs in OPERANDS order, contiguous ones left out
    strides: tuple = ()
    score_precision: str = "tf32"    # TF32 only: "tf32" or "3xtf32" (the module docstring)
    # additive FP32 score bias: its element strides (sB, sH, sQ, sK), 0 on a broadcast axis; () none
    bias: tuple = ()

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
        if self.score_precision not in SCORE_PRECISIONS:
            raise AttentionProblemError(f"unsupported score_precision {self.score_precision!r}; choose one of "
                                        f"{', '.join(SCORE_PRECISIONS)}")
        if self.score_precision != "tf32" and self.dtype != "tf32":
            raise AttentionProblemError(f"score_precision {self.score_precision!r} applies to tf32 attention only, "
                                        f"not {self.dtype}")
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
        object.__setattr__(self, "strides", self._normalized_strides())
        object.__setattr__(self, "bias", self._normalized_bias())

    def _normalized_bias(self) -> tuple:
        """The bias strides with every size-1 axis's set to 0 (a size-1 axis has no stride): one key
        per layout, whatever stride torch reports for a broadcast or length-1 axis."""
        if self.bias in ((), None):
            return ()
        st = tuple(self.bias)
        if len(st) != 4 or any(not isinstance(x, int) or isinstance(x, bool) or x < 0 for x in st):
            raise AttentionProblemError(f"bias needs 4 non-negative integer strides [sB, sH, sQ, sK], got {list(st)}")
        return tuple(0 if n == 1 else x for n, x in zip(self.bias_shape, st))

    @property
    def bias_shape(self) -> tuple[int, int, int, int]:
        """The ``[B, H, Tq, Tk]`` scores the bias is added to (its broadcast axes have stride 0)."""
        return (self.batch, self.heads, self.seq_q, self.seq_k)

    @property
    def bias_bytes(self) -> int:
        """Bytes of the bias's distinct elements (each kernel that reads it reads them at least once)."""
        if not self.bias:
            return 0
        return 4 * math.prod(n for n, x in zip(self.bias_shape, self.bias) if x)

    @property
    def bias_extent(self) -> int:
        """FP32 elements from the bias's first to its last, inclusive (the kernels' 1-D view of it)."""
        return 1 + sum((n - 1) * x for n, x in zip(self.bias_shape, self.bias))

    def _normalized_strides(self) -> tuple:
        given = self.strides
        if isinstance(given, dict):
            given = given.items()
        try:
            given = {name: tuple(st) for name, st in given}
        except (TypeError, ValueError):
            raise AttentionProblemError(f"strides must map operands to (sB, sH, sT), got {self.strides!r}") from None
        out = []
        for name in given:
            if name not in OPERANDS:
                raise AttentionProblemError(f"strides of unknown operand {name!r}; operands: {', '.join(OPERANDS)}")
        for name in OPERANDS:
            if name not in given:
                continue
            st = given[name] + ((1,) if len(given[name]) == 3 else ())
            shape = self.operand_shape(name)
            why = strides_reason(name, shape, st, self.elem_bytes)
            if why:
                raise AttentionProblemError(f"unsupported attention strides: {why}")
            dense = dense_strides(shape)
            st = tuple(x if n > 1 else c for n, x, c in zip(shape[:3], st, dense))   # size 1: no stride
            if st != dense[:3]:
                out.append((name, st))
        return tuple(out)

    def operand_shape(self, name: str) -> tuple[int, int, int, int]:
        """``[B, H, Tq, D]``, or ``[B, Hkv, Tk, D]`` for k, v and their gradients."""
        if name in KV_OPERANDS:
            return (self.batch, self.kv_heads, self.seq_k, self.head_dim)
        return (self.batch, self.heads, self.seq_q, self.head_dim)

    def operand_strides(self, name: str) -> tuple[int, int, int]:
        """Element strides (sB, sH, sT) of operand ``name`` (the head dimension's is 1)."""
        return dict(self.strides).get(name) or dense_strides(self.operand_shape(name))[:3]

    def extent(self, name: str) -> int:
        """Elements from the operand's first to its last, inclusive (the kernels' 1-D view of it)."""
        return 1 + sum((n - 1) * x for n, x in zip(self.operand_shape(name), self.operand_strides(name) + (1,)))

    def for_role(self, role: str) -> "AttentionProblem":
        """This problem with only the strides of the operands kernel ``role`` reads or writes, and the bias
        where the kernel's code depends on it (``BIAS_CODE_ROLES``)."""
        keep = ROLE_OPERANDS[role]
        return replace(self, strides=tuple(e for e in self.strides if e[0] in keep),
                       bias=self.bias if role in BIAS_CODE_ROLES else ())

    @property
    def split_scores(self) -> bool:
        """S = Q K^T as three TF32 products (``score_precision`` "3xtf32" or "fp32")."""
        return self.score_precision in ("3xtf32", "fp32")

    @property
    def split_all(self) -> bool:
        """Every product as three TF32 products (``score_precision == "fp32"``)."""
        return self.score_precision == "fp32"

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
    def q_bytes(self) -> int:
        """Bytes of one query-shaped tensor (q, out, dO, dQ): B x H x Tq x D elements."""
        return self.batch * self.heads * self.seq_q * self.head_dim * self.elem_bytes

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V together (or dK and dV): 2 x B x Hkv x Tk x D elements."""
        return 2 * self.batch * self.kv_heads * self.seq_k * self.head_dim * self.elem_bytes

    @property
    def row_bytes(self) -> int:
        """Bytes of one FP32 value a query row (lse, D = rowsum(dO * O))."""
        return 4 * self.batch * self.heads * self.seq_q

    @property
    def fwd_bytes(self) -> int:
        """Compulsory DRAM traffic of the forward: q, k, v read, out written, lse written."""
        return 2 * self.q_bytes + self.kv_bytes + self.row_bytes

    @property
    def bwd_bytes(self) -> int:
        return 4 * self.q_bytes + 2 * self.kv_bytes + 2 * self.row_bytes + self.q_bytes + self.kv_bytes

    def describe(self) -> str:
        kv = f" kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        t = f"T={self.seq_q}" if self.seq_q == self.seq_k else f"Tq={self.seq_q} Tk={self.seq_k}"
        st = "".join(f" {n}[{','.join(map(str, x))}]" for n, x in self.strides)
        sp = " fp32-products" if self.split_all else " 3xtf32-scores" if self.split_scores else ""
        return (f"attention B={self.batch} H={self.heads}{kv} {t} D={self.head_dim} {self.dtype}{sp}"
                f"{' causal' if self.causal else ''}{self.describe_bias()} scale={self.scale:.6g}"
                f"{' strides' + st if st else ''}")

    def describe_bias(self) -> str:
        """`` bias[B,1,1,Tk](sB,0,0,1)``: the bias's shape (1 on broadcast axes) and strides; '' for none."""
        if not self.bias:
            return ""
        shape = [n if x else 1 for n, x in zip(self.bias_shape, self.bias)]
        return f" bias[{','.join(map(str, shape))}]({','.join(map(str, self.bias))})"

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.strides:                 # contiguous operands stay out: a contiguous problem's dict is unchanged
            d["strides"] = {n: list(x) for n, x in self.strides}
        else:
            del d["strides"]
        if not self.split_scores:        # likewise the default precision: earlier problems' keys unchanged
            del d["score_precision"]
        if self.bias:
            d["bias"] = list(self.bias)
        else:                            # and an unbiased problem's
            del d["bias"]
        return d
