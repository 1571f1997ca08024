"""The Hopper attention forward of one problem under a schedule variant (a fault's diagnosis):

    python3 bench/probes/attention_variant.py B H Hkv T D VARIANT --build   # host: compile into $NOVA_CACHE_DIR
    python3 bench/probes/attention_variant.py B H Hkv T D VARIANT           # GPU: run it against float64

VARIANT: ``base`` (the configured schedule), ``stagesN`` (the ring's depth N, shared memory to match),
``persistentN`` (the persistent kernel on N CTAs).  bf16, not causal.  The configurator is replaced
by one returning the variant, so the kernel is keyed, built and launched as any other."""
import dataclasses
import math
import sys

import nova.kernels.attention.derive as derive
from nova.hwmodel import get_target
from nova.kernels.attention.problem import AttentionProblem

B, H, Hkv, T, D = map(int, sys.argv[1:6])
variant = sys.argv[6]
problem = AttentionProblem(B, H, T, T, D, False, "bf16", kv_heads=Hkv)
configured = derive.configure_attention


def configure_variant(p, target, *args, **kwargs):
    result = configured(p, target, *args, **kwargs)
    if p != problem or variant == "base":
        return result
    s = result.schedule
    fwd = s.fwd
    if variant.startswith("stages"):
        n = int(variant[6:])
        stage = fwd.block_cols * D * 2 * 2
        fwd = dataclasses.replace(fwd, stages=n, smem_bytes=fwd.block_rows * D * 2 + n * stage + 1024)
    elif variant.startswith("persistent"):
        fwd = dataclasses.replace(fwd, persistent=True, grid=(int(variant[10:]), 1, 1), tile_order="head")
    return dataclasses.replace(result, schedule=dataclasses.replace(s, fwd=fwd))


derive.configure_attention = configure_variant
if "--build" in sys.argv:
    from nova.kernels.attention.compile import get_or_compile
    target = get_target("h200")
    s = configure_variant(problem, target).schedule
    print(variant, s.fwd.stages, s.fwd.smem_bytes, s.fwd.persistent, s.fwd.grid,
          get_or_compile(problem, s, "fwd", target, offline=False)[2])
    sys.exit(0)

import torch  # noqa: E402

import nova  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(7)
q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
k, v = (torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
out = torch.full_like(q, math.nan)
try:
    nova.attention(q, k, v, out=out)
    torch.cuda.synchronize()
except Exception as e:
    print(variant, "FAILED", str(e).split(": ")[-1][:80])
    sys.exit(0)
g = H // Hkv
ref = torch.softmax(q.double() @ k.double().repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(D), -1) \
    @ v.double().repeat_interleave(g, 1)
print(variant, "ok, relative error", float((out.double() - ref).norm() / ref.norm()))
