"""What a kernel computes: the GEMM problem statement, independent of any schedule.

``C[M,N] = act(A[M,K] @ B[K,N] + bias[N]) + R[M,N]`` with FP32 accumulation.  ``trans_a`` means A is
stored as ``[K,M]`` row-major (i.e. column-major A); ``trans_b`` means B is stored as ``[N,K]`` row-major.

The epilogue's operands beyond the bias, each in C's type and C's layout (row-major, C's batch stride):

* ``residual``: R is read and added after the activation (a transformer's residual connection, or a
  gradient accumulated into an existing one): the add kernel that would read the GEMM's result and R
  and write their sum is gone, and the GEMM's result is never written alone.
* ``preactivation``: the kernel also writes ``P[M,N] = A @ B + bias``, the value the activation was
  applied to (a training step keeps it for the activation's backward), so the activation runs in the
  epilogue instead of a kernel of its own that reads P back.  Needs an activation.

``activation_grad`` (an activation's backward): with ``residual``, R is the saved pre-activation and
``C = (acc + bias) * act'(R)`` replaces ``act(acc + bias) + R`` -- the dgrad GEMM of an MLP's second
layer (``dh = dy @ W2``) followed by the activation's backward (``gelu_tanh_backward(dh, pre)``, the
formulas of ``nova/kernels/activations.py``), so dh is never written and read back.  The GELU's tanh
form only (``activation="gelu"``).

``round_through`` (a cast epilogue): a 16-bit GEMM whose result is widened to f32 before anything else
reads it (autocast's ``f32(bf16(y)) + R``, a weight gradient cast to its f32 parameter's type) writes
f32 directly: ``C = f32(round(act(acc + bias))) + R`` with the rounding to the 16-bit type the cast
would have seen, so C holds the bits of the 16-bit result then the cast (and the add, if R).  The bias
stays in the 16-bit type; R is in C's (f32).  The rounding applies to the whole sum, so atomic split-K
(partial sums added into C) cannot take it.

The kernel's arguments after A, B and C are the epilogue's operands in ``epilogue_operands`` order.

Batched (``batch`` > 1): ``C[b] = act(A[b] @ B[b] + bias)`` for ``b < batch``, one launch.  Each
operand's matrices lie ``batch_stride_a/b/c`` elements apart (None: packed, ``M*K``, ``K*N``,
``M*N``); a stride of 0 broadcasts A or B (one matrix read by every batch element, e.g. a weight).
C's matrices must not overlap (stride >= M*N).  ``batch = 1`` is the plain problem: its strides are
normalised to None, so its key, schedule and kernel are those of an unbatched GEMM; so is a batch
whose A matrices (row-major) and C matrices lie packed against one broadcast B: it is normalised to
the one [batch*M, K] x [K, N] GEMM (its tiles span the elements' rows, no padding per element), the
same problem however ``nova.matmul``, the graph compiler or the CLI state it.  Strides the
TMA unit cannot use (not a multiple of 16 bytes, overlapping input matrices) are not errors: the
Hopper configurator sends such an operand through its operand-prep pass (``hopper.operand_plan``).

Validation rejects what no kernel can run, with one line naming the limit:

* each of M, N, K (and the batch) below 2^31 (``MAX_DIM``): TMA's tensor coordinates are signed
  32-bit (its dimension limit, 2^32, is looser); one limit for both kernel families;
* batch strides non-negative, C's no smaller than one C matrix (M*N: batch elements of the output
  would overlap);
* A, B and C (over the batch: from the first element to the end of the last matrix) together no
  larger than ``MAX_GPU_BYTES``, the largest memory of any GPU Nova models.  With tiles of at least
  one 16x8 MMA this also bounds the launch grid: under 10^9 output tiles over all batch elements
  (gridDim.x < 2^31); gridDim.y is 1 and gridDim.z (split-K) is at most the resident blocks of the
  GPU, far below 65535.

``tf32_rounding`` means something for ``dtype="tf32"`` only; for bf16/fp16 it is normalised to
"rna", so ``tf32_fast`` never changes the kernel or the cache key of a 16-bit problem (the runtime
and ``nova precompile`` agree).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# Input "dtype" names the tensor-core mode (tf32: FP32 storage, TF32 tensor cores, round-to-nearest);
# storage is what lives in memory; the default output storage is the inputs' (nova/dtypes.py).
from nova.dtypes import ELEMENT_TYPES, MODES as DTYPES, OUT_STORAGES as OUT_DTYPES

ACTIVATIONS = ("none", "relu", "gelu", "gelu_erf", "silu")   # gelu: the tanh approximation; gelu_erf: exact
TF32_ROUNDING = ("rna", "truncate")

from nova.kernels.limits import MAX_DIM, MAX_GPU_BYTES, MAX_GPU_NAME  # noqa: E402  (the bounds every family shares)


class ProblemError(ValueError):
    """A problem statement that no kernel can compute (bad shape, dtype, epilogue)."""


@dataclass(frozen=True)
class GemmProblem:
    M: int
    N: int
    K: int
    dtype: str = "tf32"
    trans_a: bool = False
    trans_b: bool = False
    bias: bool = False
    activation: str = "none"
    out_dtype: str | None = None  # None: same storage as the inputs (torch.matmul's rule)
    # TF32 only: "rna" rounds both operands to nearest (cuBLAS's accuracy); "truncate" is the
    # opt-in ``tf32_fast`` mode (the tensor core truncates raw FP32: ~2.6x larger error).
    tf32_rounding: str = "rna"
    # Bitwise reproducible results run to run: K slices (split-K) add in a fixed order (a workspace
    # and a reduction kernel) instead of with FP32 atomics, whose order varies.
    deterministic: bool = False
    # Batched GEMM (module docstring): the batch count and each operand's batch stride in elements
    # (None: packed; 0: A or B broadcast over the batch).  batch = 1 normalises the strides to None.
    batch: int = 1
    batch_stride_a: int | None = None
    batch_stride_b: int | None = None
    batch_stride_c: int | None = None
    # The epilogue's matrix operands (module docstring), in C's type and layout.
    residual: bool = False        # C = act(acc + bias) + R
    preactivation: bool = False   # also write P = acc + bias; needs an activation
    activation_grad: bool = False     # C = (acc + bias) * act'(R): R the pre-activation (module docstring)
    round_through: str | None = None  # C's value rounded to this 16-bit type before it is widened to
                                      # out_dtype f32 (a cast epilogue; module docstring)

    def __post_init__(self):
        for name in ("M", "N", "K"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ProblemError(f"GEMM dimension {name} must be a positive integer, got {v!r}")
            if v > MAX_DIM:
                raise ProblemError(f"GEMM dimension {name}={v} exceeds the limit 2^31-1 = {MAX_DIM} (TMA's tensor "
                                   f"coordinates are signed 32-bit)")
        if self.dtype not in DTYPES:
            raise ProblemError(f"unsupported dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        if self.activation not in ACTIVATIONS:
            raise ProblemError(f"unsupported activation {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        for name in ("residual", "preactivation"):
            if not isinstance(getattr(self, name), bool):
                raise ProblemError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.preactivation and self.activation == "none":
            raise ProblemError("preactivation output without an activation: it would equal C")
        if self.tf32_rounding not in TF32_ROUNDING:
            raise ProblemError(f"unsupported tf32_rounding {self.tf32_rounding!r}; choose one of {', '.join(TF32_ROUNDING)}")
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", DTYPES[self.dtype].storage)
        if self.out_dtype not in OUT_DTYPES:
            raise ProblemError(f"unsupported output dtype {self.out_dtype!r}; choose one of {', '.join(OUT_DTYPES)}")
        if not isinstance(self.deterministic, bool):
            raise ProblemError(f"deterministic must be True or False, got {self.deterministic!r}")
        self._check_round_through()
        if not isinstance(self.activation_grad, bool):
            raise ProblemError(f"activation_grad must be True or False, got {self.activation_grad!r}")
        if self.activation_grad and not (self.residual and self.activation == "gelu" and not self.preactivation):
            raise ProblemError(f"activation_grad multiplies by gelu'(R): it needs residual=True (R, the pre-activation), "
                               f"activation='gelu' and no pre-activation output (got activation={self.activation!r}, "
                               f"residual={self.residual}, preactivation={self.preactivation})")
        if self.dtype != "tf32" and self.tf32_rounding != "rna":
            object.__setattr__(self, "tf32_rounding", "rna")      # tf32_fast does not apply: same kernel, same key
        # a matrix one element wide (A with M or K = 1, B with K or N = 1) is the same bytes in either layout:
        # stated row-major, so a plan and the views nova.matmul reads it off state one problem, one key
        if self.trans_a and 1 in (self.M, self.K):
            object.__setattr__(self, "trans_a", False)
        if self.trans_b and 1 in (self.K, self.N):
            object.__setattr__(self, "trans_b", False)
        self._check_batch()
        total = self.footprint_bytes
        if total > MAX_GPU_BYTES:
            raise ProblemError(f"GEMM {self.M}x{self.N}x{self.K} {self.dtype}: A, B and C take {total / 1e9:.1f} GB, more "
                               f"than the {MAX_GPU_BYTES / 1e9:.1f} GB of the largest GPU Nova models ({MAX_GPU_NAME})")

    def _check_round_through(self) -> None:
        r = self.round_through
        if r is None:
            return
        storage = DTYPES[self.dtype].storage
        if r not in ("bf16", "f16") or r != storage:
            raise ProblemError(f"round_through {r!r}: a cast epilogue rounds to the inputs' 16-bit type "
                               f"({storage if storage != 'f32' else 'none for tf32'})")
        if self.out_dtype != "f32":
            raise ProblemError(f"round_through {r}: the rounded value is widened to an f32 output, not {self.out_dtype}")
        if self.preactivation:
            raise ProblemError(f"round_through {r} with a pre-activation output: P would be in {r}, C in f32")

    def _check_batch(self) -> None:
        """Validate the batch and normalise it: strides None (packed) -> M*K, K*N, M*N; batch = 1 ->
        strides None; packed row-major A and packed C against a broadcast B -> batch 1, M x batch."""
        b = self.batch
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ProblemError(f"GEMM batch must be a positive integer, got {b!r}")
        if b > MAX_DIM:
            raise ProblemError(f"GEMM batch={b} exceeds the limit 2^31-1 = {MAX_DIM} (TMA's tensor coordinates are "
                               f"signed 32-bit)")
        packed = {"a": self.M * self.K, "b": self.K * self.N, "c": self.M * self.N}
        for op, dense in packed.items():
            name = f"batch_stride_{op}"
            v = getattr(self, name)
            if b == 1:
                object.__setattr__(self, name, None)               # meaningless without a batch: same key
                continue
            if v is None:
                object.__setattr__(self, name, dense)
            elif not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ProblemError(f"batch stride of {op.upper()} must be a non-negative integer (elements), got {v!r}")
        if b > 1 and self.batch_stride_c < packed["c"]:
            raise ProblemError(f"batch stride of C ({self.batch_stride_c} elements) is smaller than one C matrix "
                               f"(M*N = {packed['c']}): the {b} outputs would overlap")
        packed_ac = self.batch_strides[::2] == (packed["a"], packed["c"])
        if b > 1 and self.batch_stride_b == 0 and not self.trans_a and packed_ac:
            if b * self.M > MAX_DIM:
                raise ProblemError(f"GEMM dimension M={b * self.M} (a batch of {b} packed A matrices against one B) "
                                   f"exceeds the limit 2^31-1 = {MAX_DIM}")
            for name, value in (("M", b * self.M), ("batch", 1), ("batch_stride_a", None), ("batch_stride_b", None),
                                ("batch_stride_c", None)):
                object.__setattr__(self, name, value)

    @property
    def batch_strides(self) -> tuple[int, int, int]:
        """(A, B, C) batch strides in elements; 0 for every operand of an unbatched problem."""
        if self.batch == 1:
            return 0, 0, 0
        return self.batch_stride_a, self.batch_stride_b, self.batch_stride_c

    def batch_stride(self, op: str) -> int:
        """Elements between operand ``op``'s ("a", "b", "c") consecutive matrices; 0 when unbatched or broadcast."""
        return self.batch_strides["abc".index(op)]

    def matrices(self, op: str) -> int:
        """How many distinct matrices operand ``op`` holds: the batch, or 1 (unbatched or broadcast)."""
        return self.batch if self.batch_stride(op) else 1

    def packed_stride(self, op: str) -> int:
        """Elements of one matrix of operand ``op``: M*K, K*N or M*N."""
        return {"a": self.M * self.K, "b": self.K * self.N, "c": self.M * self.N}[op]

    @property
    def epilogue_operands(self) -> tuple[str, ...]:
        """The kernel's arguments after A, B and C, in order: "bias", "residual", "preactivation"
        (those the problem has)."""
        return tuple(name for name in ("bias", "residual", "preactivation") if getattr(self, name))

    @property
    def c_like_operands(self) -> int:
        """Matrices of C's shape and type the kernel reads or writes: C, R and P (those it has)."""
        return 1 + self.residual + self.preactivation

    @property
    def bias_dtype(self) -> str:
        """The bias vector's element type: f32 for TF32; else the type C has before a cast epilogue
        widens it (``round_through``), which is the output's otherwise (``torch.addmm``'s rule)."""
        return "f32" if self.dtype == "tf32" else self.round_through or self.out_dtype

    @property
    def atomic_split_reason(self) -> str:
        """Why K slices cannot be added atomically into C ("" when they can): only an f32 output that
        is the plain sum of the slices' products takes FP32 atomic adds, in an order that varies."""
        if self.out_dtype != "f32":
            return f"the {self.out_dtype} output cannot take FP32 atomic adds"
        if self.activation != "none":
            return f"{self.activation}(sum) is not a sum of {self.activation}s"
        if self.round_through:
            return f"C is rounded through {self.round_through} once, after the whole sum"
        if self.deterministic:
            return "the problem is deterministic and atomic adds land in a varying order"
        return ""

    @property
    def storage(self) -> str:
        """Element type of A and B in memory: 'f32', 'bf16' or 'f16'."""
        return DTYPES[self.dtype].storage

    @property
    def in_bytes(self) -> int:
        return DTYPES[self.dtype].bytes

    @property
    def out_bytes(self) -> int:
        return ELEMENT_TYPES[self.out_dtype].bytes

    def extent(self, op: str) -> int:
        """Elements from operand ``op``'s first element to the end of its last matrix:
        (matrices - 1) x batch stride + one matrix."""
        return (self.matrices(op) - 1) * self.batch_stride(op) + self.packed_stride(op)

    @property
    def footprint_bytes(self) -> int:
        """Device memory the operands take: A, B, C, R and P (their extents over the batch) and the bias vector."""
        bias = self.N * ELEMENT_TYPES[self.bias_dtype].bytes if self.bias else 0
        return ((self.extent("a") + self.extent("b")) * self.in_bytes
                + self.c_like_operands * self.extent("c") * self.out_bytes + bias)

    @property
    def flops(self) -> int:
        """2 x M x N x K per batch element."""
        return 2 * self.M * self.N * self.K * self.batch

    @property
    def min_bytes(self) -> int:
        """Compulsory DRAM traffic: read each distinct matrix of A and B once (a broadcast one once in
        all), write every C once, read every R and write every P once (bias is negligible)."""
        return ((self.matrices("a") * self.M * self.K + self.matrices("b") * self.K * self.N) * self.in_bytes
                + self.c_like_operands * self.batch * self.M * self.N * self.out_bytes)

    def describe(self) -> str:
        t = ("T" if self.trans_a else "N") + ("T" if self.trans_b else "N")
        epi = []
        if self.bias:
            epi.append("bias")
        if self.activation != "none":
            epi.append(self.activation)
        if self.preactivation:
            epi.append("preact")
        if self.residual:
            epi.append("residual")
        if self.activation_grad:
            epi[-2:] = [f"d{self.activation}(R)"]
        fast = " tf32_fast" if self.dtype == "tf32" and self.tf32_rounding == "truncate" else ""
        batch = f"{self.batch}x" if self.batch > 1 else ""
        through = f"{self.round_through}->" if self.round_through else ""
        return (f"gemm {batch}{self.M}x{self.N}x{self.K} {self.dtype}{fast} {t}"
                + (f" +{'+'.join(epi)}" if epi else "") + f" -> {through}{self.out_dtype}"
                + (" deterministic" if self.deterministic else "")
                + (f" (batch strides A,B,C = {self.strides_text()})" if not self.packed_batch else ""))

    @property
    def packed_batch(self) -> bool:
        """Unbatched, or every operand's matrices packed one after the other."""
        return all(self.batch_stride(op) == self.packed_stride(op) for op in "abc") or self.batch == 1

    def strides_text(self) -> str:
        """``"A,B,C"`` batch strides as ``--batch-strides`` spells them: elements, or "packed"."""
        return ",".join("packed" if self.batch_stride(op) == self.packed_stride(op) else str(self.batch_stride(op))
                        for op in "abc")

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["tf32_rounding"] == "rna":      # the defaults stay out: a problem's dict (and key) only grows
            del d["tf32_rounding"]           # when it asks for something new
        for k in ("deterministic", "residual", "preactivation", "activation_grad", "round_through"):
            if not d[k]:
                del d[k]
        if d["batch"] == 1:                  # an unbatched problem keeps the key it always had
            for k in ("batch", "batch_stride_a", "batch_stride_b", "batch_stride_c"):
                del d[k]
        return d
