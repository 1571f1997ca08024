"""``torch.compile(model, backend="nova")`` on the GPU: forward and backward graphs on Nova's
executor (Nova GEMMs and attention, CUDA graph) against a float64 eager twin (run on the device;
skipped without a GPU).  Every graph must run on Nova (no fallback warning: with ``NOVA_OFFLINE=1``
a kernel missing from the cache is one).

Kernels come from a cache precompiled on a host with MLIR (``nova.integrations.dynamo_precompile.precompile``
on the same models and inputs, traced on the CPU with CUDA's attention kernels):

    NOVA_CACHE_DIR=.nova-cache python3 tests/test_integrations_dynamo_gpu.py --target h200 --build    # host
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m pytest -m gpu tests/test_integrations_dynamo_gpu.py
"""
from __future__ import annotations

import copy
import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

pytestmark = pytest.mark.gpu

MODELS = ("mlp", "tiny", "gpt42m", "hf-gpt2", "hf-llama")
STEPS = 3


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def make_case(model_name: str, device: str, steps: int = STEPS):
    """(model, [batch args per step], loss_of) on ``device``: the model seeded, the batches random."""
    import torch
    from nova.models.gpt import GPT
    torch.manual_seed(0)
    if model_name == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(device)
        batches = [(torch.randn(512, 256, device=device),) for _ in range(steps)]
        return model, batches, lambda y: (y ** 2).mean()
    if model_name.startswith("hf-"):
        return hugging_face_case(model_name[3:], device, steps)
    model = GPT(model_name, seed=0).to(device)
    vocab, seq = model.config.vocab_size, min(model.config.block_size, 256)
    batches = [(torch.randint(0, vocab, (4, seq), device=device), torch.randint(0, vocab, (4, seq), device=device))
               for _ in range(steps)]
    return model, batches, lambda loss: loss


def hugging_face_case(which: str, device: str, steps: int):
    """A tiny Hugging Face GPT-2 or Llama (random init, 4 layers of 256, vocabulary 512) on right-padded
    batches of 4 x 128 (rows keep 128, 100, 57 and 9 tokens), labels -100 where the mask is 0."""
    import torch
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[dev])")
    torch.manual_seed(0)
    if which == "gpt2":
        lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=512, n_positions=128, n_embd=256, n_layer=4, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    else:
        lm = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, bos_token_id=0, eos_token_id=0, pad_token_id=0))

    class LanguageModelLoss(torch.nn.Module):
        """The LM called as a training script does, returning its loss: the module torch.compile gets."""
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, ids, mask, labels):
            return self.lm(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
    model = LanguageModelLoss().to(device)
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(steps):
        ids = torch.randint(0, 512, (4, 128), generator=g)
        mask = torch.ones(4, 128, dtype=torch.long)
        for row, keep in enumerate((128, 100, 57, 9)):
            mask[row, keep:] = 0
        batches.append(tuple(t.to(device) for t in (ids, mask, ids.masked_fill(mask == 0, -100))))
    return model, batches, lambda loss: loss


@pytest.mark.parametrize("model_name", MODELS)
def test_training_steps_on_nova_match_float64_eager(model_name, caplog):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from nova.integrations.dynamo import nova_backend
    torch._dynamo.reset()
    model, batches, loss_of = make_case(model_name, "cuda")
    twin = copy.deepcopy(model).double()
    compiled = torch.compile(model, backend=nova_backend)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (model, twin)]
    with caplog.at_level(logging.INFO, logger="nova"):
        for step, args in enumerate(batches):
            for p in model.parameters():              # cleared: this step's backward must write every gradient
                p.grad = None
            loss = loss_of(compiled(*args))
            loss.backward()
            ref = loss_of(twin(*[a.double() if a.is_floating_point() else a for a in args]))
            ref.backward()
            assert _rel(loss.detach(), ref.detach()) < 2e-3, f"step {step} loss"
            worst = max((_rel(p.grad, q.grad), n) for (n, p), q in zip(model.named_parameters(), twin.parameters()))
            assert worst[0] < 1e-2, f"step {step}: gradient of {worst[1]}: relative error {worst[0]:.2e}"
            for opt in opts:
                opt.step()
                opt.zero_grad()
    messages = [r.message for r in caplog.records if r.name.startswith("nova")]
    assert not [r for r in caplog.records if r.name.startswith("nova") and r.levelno >= logging.WARNING], messages
    assert any("forward graph" in m and "executor on cuda" in m for m in messages), messages
    assert any("backward graph" in m and "executor on cuda" in m for m in messages), messages


def steady_peak(model, compiled, batches, loss_of, warm: int = 2) -> int:
    """Bytes ``torch.cuda.max_memory_allocated`` reaches over training steps (plain SGD: no optimizer
    state) after ``warm`` steps (the programs built, their bindings and CUDA graphs made), beyond
    what was allocated before the first step."""
    import gc
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gc.collect()                     # an earlier test's programs (their arena, output buffers) freed now, not mid-run
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()

    def step(args):
        for p in model.parameters():
            p.grad = None
        loss_of(compiled(*args)).backward()
        opt.step()
    for args in batches[:warm]:
        step(args)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for args in batches[warm:]:
        step(args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_training_memory_is_the_plans_prediction(caplog):
    """GPT-42M (batch 4, 256 tokens) on Nova: the device's peak over steady training steps against
    ``dynamo_memory.step_memory`` of the same run's plans (traced on a CPU copy): within 5% (+ 8 MiB
    of small allocations) above, and no more than 15% below (the prediction counts what is held)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from nova.integrations.dynamo import nova_backend
    from nova.integrations.dynamo_memory import step_memory
    from nova.integrations.dynamo_precompile import plan_dynamo
    from nova.runtime.matmul import resolve_target
    torch._dynamo.reset()
    model, batches, loss_of = make_case("gpt42m", "cuda", steps=4)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    predicted = step_memory(plan_dynamo(model, batches[0], resolve_target(), training=True))
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="nova"):
        measured = steady_peak(model, torch.compile(model, backend=nova_backend), batches, loss_of) + params
    warned = [r.message for r in caplog.records if r.name.startswith("nova") and r.levelno >= logging.WARNING]
    assert not warned, warned
    print(f"\n{predicted.describe()}\nmeasured peak {measured / 2**30:.3f} GiB")
    assert measured <= 1.05 * predicted.peak_bytes + (8 << 20)
    assert measured >= 0.85 * predicted.peak_bytes


def test_training_memory_near_inductor(caplog):
    """GPT-42M (batch 4, 256 tokens): Nova's steady training peak within 1.3x of Inductor's on the
    same model, batches and optimizer (each measured beyond what was allocated before its steps)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from nova.integrations.dynamo import nova_backend
    peaks = {}
    for backend in ("inductor", "nova"):
        torch._dynamo.reset()
        model, batches, loss_of = make_case("gpt42m", "cuda", steps=4)
        compiled = torch.compile(model) if backend == "inductor" else torch.compile(model, backend=nova_backend)
        with caplog.at_level(logging.WARNING, logger="nova"):
            peaks[backend] = steady_peak(model, compiled, batches, loss_of)
        del model, compiled, batches
        torch._dynamo.reset()
    warned = [r.message for r in caplog.records if r.name.startswith("nova") and r.levelno >= logging.WARNING]
    assert not warned, warned
    print(f"\nsteady peak beyond the parameters: inductor {peaks['inductor'] / 2**30:.3f} GiB, "
          f"nova {peaks['nova'] / 2**30:.3f} GiB ({peaks['nova'] / peaks['inductor']:.2f}x)")
    assert peaks["nova"] <= 1.3 * peaks["inductor"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_precompile_trace_picks_the_attention_kernel_cuda_picks(dtype):
    """``cuda_attention_kernel`` (what the host's trace calls in place of SDPA) against torch's own
    choice on this GPU, for the models' attention shapes."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from nova.integrations.dynamo_precompile import CUDNN, EFFICIENT, FLASH, MATH, cuda_attention_kernel
    names = {int(torch.nn.attention.SDPBackend.FLASH_ATTENTION): FLASH,
             int(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION): EFFICIENT,
             int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION): CUDNN,
             int(torch.nn.attention.SDPBackend.MATH): MATH}
    major, minor = torch.cuda.get_device_capability()
    wrong = []
    for b, h, t, d in [(4, 8, 256, 64), (2, 4, 16, 8), (2, 2, 40, 16), (2, 4, 64, 128)]:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
                   for _ in range(3))
        chosen = names.get(int(torch._fused_sdp_choice(q, k, v, None, 0.0, True)), "other")
        predicted = cuda_attention_kernel(q, k, v, sm=10 * major + minor)
        if predicted != chosen:
            wrong.append(((b, h, t, d, dtype), predicted, chosen))
    assert not wrong, wrong


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="compile every Nova kernel of these GPU tests' torch.compile runs into "
                                             "NOVA_CACHE_DIR (needs MLIR, no GPU)")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true", help="compile the kernels (without it: print this command)")
    ap.add_argument("--cache-dir", default=None, help="the cache directory (default NOVA_CACHE_DIR)")
    args = ap.parse_args()
    if not args.build:
        print(f"python3 {sys.argv[0]} --target {args.target} --build")
        sys.exit(0)
    from nova.integrations.dynamo_precompile import precompile
    failed = 0
    for name in MODELS:
        model, batches, _ = make_case(name, "cpu", steps=1)
        counts = precompile(model, batches[0], target=args.target, training=True, cache_dir=args.cache_dir)
        failed += counts["failed"]        # a graph left to torch is reported above (the GPU test then fails on it)
    sys.exit(1 if failed else 0)
