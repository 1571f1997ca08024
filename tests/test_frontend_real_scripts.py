"""``nova.compile`` on what real training scripts do, against eager (float32/float64 on CPU, the
reference engine): masks built like Hugging Face's (index tensors, ``&``, constant causal masks
folded onto the IR attention), padded labels with ``ignore_index``, one-line errors, gradient
clipping and accumulation, autocast."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nova


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def forward_backward(model, loss_fn):
    def step(*args):
        loss = loss_fn(model, *args)
        loss.backward()
        return loss
    return step


def assert_step_matches_eager(model, loss_fn, *args, tolerance=1e-10):
    """One forward/backward compiled and eager on copies of ``model``: the loss and every gradient."""
    reference = copy.deepcopy(model)
    compiled = nova.compile(forward_backward(model, loss_fn))
    loss = compiled(*args)
    expected = forward_backward(reference, loss_fn)(*args)
    assert relative(loss, expected) < tolerance
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None and relative(p.grad, q.grad) < tolerance, name
    return compiled


# ====================================================================== masks
class MaskedAttention(nn.Module):
    """Attention with the mask built the way Hugging Face's ``sdpa_mask`` builds it: index tensors
    into a 2-D padding mask (``padding_mask[batch_idx, kv_idx]``), ``&`` with the causal pattern;
    or, without padding, a causal mask from ``arange`` alone."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, padding_mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        rows = torch.arange(t)
        batch_idx = torch.arange(b)[:, None, None, None]
        q_idx, kv_idx = rows[None, None, :, None], rows[None, None, None, :]
        mask = kv_idx <= q_idx
        if padding_mask is not None:
            mask = mask & padding_mask.bool()[batch_idx, kv_idx]
        else:
            mask = mask.expand(b, 1, t, t)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def attention_loss(model, x, padding_mask=None):
    return model(x, padding_mask).square().mean()


def test_padded_mask_from_index_tensors_lowers_without_opaque_ops():
    torch.manual_seed(0)
    model = MaskedAttention().double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    padding = torch.ones(2, 6, dtype=torch.long)
    padding[1, 4:] = 0
    compiled = assert_step_matches_eager(model, attention_loss, x, padding)
    assert not compiled.captured.stats.opaque
    assert "attention" not in compiled.graph.op_counts()          # a data mask: the masked composition


def test_constant_causal_mask_is_folded_onto_the_ir_attention():
    torch.manual_seed(0)
    model = MaskedAttention().double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    compiled = assert_step_matches_eager(model, attention_loss, x)
    ops = compiled.graph.op_counts()
    assert ops["attention"] == ops["attention_backward"] == 1
    assert next(n for n in compiled.graph.nodes if n.op == "attention").attrs["causal"] is True
    assert "iota" not in ops and "le" not in ops                   # the mask's construction is gone


def test_constant_non_causal_mask_stays_a_masked_composition():
    torch.manual_seed(0)
    model = nn.Linear(8, 8).double()

    def loss_fn(model, x):
        q = model(x).view(1, 6, 2, 4).transpose(1, 2)
        rows = torch.arange(6)
        window = (rows[None, :] <= rows[:, None]) & (rows[:, None] - rows[None, :] < 3)    # sliding window
        return F.scaled_dot_product_attention(q, q, q, attn_mask=window).square().sum()
    compiled = assert_step_matches_eager(model, loss_fn, torch.randn(1, 6, 8, dtype=torch.float64))
    assert "attention" not in compiled.graph.op_counts()


def test_multi_index_and_boolean_mask_ops_lower():
    torch.manual_seed(0)
    model = nn.Linear(5, 5).double()

    def loss_fn(model, x, keep):
        y = model(x)                                               # [4, 5]
        rows = torch.tensor([[0], [3], [-1]])
        picked = y[rows, torch.tensor([1, -2, 4])]                 # broadcast [3, 3], negative indices
        both = (keep[rows, torch.tensor([0, 2, 4])] & (picked > 0)) | ~keep[:3, :3] ^ (picked < -1)
        return torch.where(both, picked, 0.5 * picked).sum()
    keep = torch.rand(4, 5, generator=torch.Generator().manual_seed(1)) > 0.4
    compiled = assert_step_matches_eager(model, loss_fn, torch.randn(4, 5, dtype=torch.float64), keep)
    assert not compiled.captured.stats.opaque
