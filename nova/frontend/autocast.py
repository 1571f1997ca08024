"""Mixed precision while tracing: ``torch.autocast`` of the step's device applied to the CPU fakes.

Autocast is a dispatcher key per device: ``torch.autocast("cpu")`` casts CPU tensors, and Nova's
fakes are CPU tensors, so a step written with ``torch.autocast("cpu", dtype=torch.bfloat16)`` is
captured as eager runs it (the casts become ``_to_copy`` nodes, lowered to IR ``cast``; the GEMMs
read bf16 operands; parameters stay FP32 master weights).  ``torch.autocast("cuda")`` would leave
the CPU fakes alone: ``DeviceAutocast`` is a ``TorchFunctionMode`` that, while the step's device's
autocast is enabled (and CPU's is not), runs each torch call under CPU autocast with that dtype
and CUDA's policy where it differs from CPU's:

* lower precision (``autocast_mode.cpp``, CUDA's ``lower_precision_fp`` list): the GEMMs and
  attention CPU autocast also casts (``linear``, ``matmul``, ``mm``, ``bmm``, ``addmm``,
  ``baddbmm``, ``conv*``, ``scaled_dot_product_attention``), plus CUDA-only ones cast here
  (``einsum``, ``mv``, ``addmv``, ``addr``, ``chain_matmul``, ``multi_dot``);
* FP32 (CUDA's ``fp32`` and ``fp32_set_opt_dtype`` lists): normalisations, softmax family,
  reductions, ``exp``/``log``/``pow``/``rsqrt``..., the losses: 16-bit floating arguments are
  widened to FP32 first (CPU autocast would keep ``layer_norm``, ``softmax``, ``sum``... in bf16).

Everything else runs as the arguments' types say (CUDA's "promote" ops -- ``cat``, ``addcmul``...
-- follow torch's own type promotion on the fakes).

A step compiled on a host without a GPU for a GPU target (``explain train``, ``nova precompile``)
still writes ``torch.autocast("cuda")``, which a CPU-only torch disables with a warning
(``amp_definitely_not_available``).  ``cuda_autocast_on_host`` lets it set CUDA's autocast state
during the capture, as it does on a GPU machine, so the step is planned as it will run.
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

_LOWER_PRECISION_CUDA_ONLY = frozenset({"einsum", "mv", "addmv", "addr", "chain_matmul", "multi_dot",
                                        "linalg_multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell",
                                        "rnn_relu_cell"})
_FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm", "rms_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "cross_entropy", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum", "norm", "vector_norm", "linalg_vector_norm",
})
_HALF = (torch.float16, torch.bfloat16)


def _cast_floating(tree, dtype, only=None):
    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and (only is None or x.dtype in only) \
                and x.dtype != dtype:
            return x.to(dtype)
        return x
    return torch.utils._pytree.tree_map(cast, tree)


class DeviceAutocast(TorchFunctionMode):
    """See the module docstring; ``device_type`` is the device the step really runs on."""

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type = device_type

    def _dtype(self):
        """The autocast dtype to emulate now, or None (off, or CPU's own autocast is on)."""
        if self.device_type == "cpu" or torch.is_autocast_enabled("cpu"):
            return None
        try:
            if not torch.is_autocast_enabled(self.device_type):
                return None
            return torch.get_autocast_dtype(self.device_type)
        except (RuntimeError, TypeError):
            return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dtype = self._dtype()
        if dtype is None:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _FP32:
            args, kwargs = _cast_floating((args, kwargs), torch.float32, only=_HALF)
        elif name in _LOWER_PRECISION_CUDA_ONLY:
            args, kwargs = _cast_floating((args, kwargs), dtype)
        with torch.autocast("cpu", dtype=dtype):
            return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_autocast_on_host(device_type: str):
    """While capturing a CUDA step on a machine whose torch sees no GPU: ``torch.autocast("cuda")``
    enables CUDA's autocast state (what ``DeviceAutocast`` reads) instead of disabling itself; its
    bfloat16 check answers for the target GPU (every target Nova plans for, sm_80 and later, has
    bfloat16).  Anything else (a GPU present, another device) leaves torch as it is."""
    if device_type != "cuda" or torch.cuda.is_available():
        yield
        return
    amp_common = torch.cuda.amp.common
    saved = amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported
    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True
    try:
        yield
    finally:
        amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported = saved
