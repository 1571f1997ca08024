"""Nova's GEMM schedule as Triton's matmul knobs (no Triton needed): the mapping read field by field
from the configurator's schedule, the ``triton.Config`` wrapping, ``prune`` and the CLI."""
from __future__ import annotations

import ast
import json
import re
import sys
import types

import pytest

from nova.cli.config import main as config_main
from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.integrations import triton as nt

CASES = [(M, N, K, dtype, target) for (M, N, K) in ((4096, 4096, 4096), (8192, 8192, 1024), (128, 4096, 4096),
                                                     (64, 64, 8192), (1000, 3000, 700))
         for dtype in ("tf32", "bf16", "fp16") for target in ("h200", "a100", "rtx3060")]


@pytest.mark.parametrize("M, N, K, dtype, target", CASES)
def test_mapping_reads_the_schedule(M, N, K, dtype, target):
    gpu = get_target(target)
    s = configure(GemmProblem(M, N, K, dtype=dtype), gpu).schedule
    c = nt.triton_config(M, N, K, dtype, target)
    assert c.GROUP_M == s.group_m
    for name, block, nova_block in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), (c.BLOCK_M, c.BLOCK_N, c.BLOCK_K),
                                       (s.block_m, s.block_n, s.block_k)):
        assert block & (block - 1) == 0 and block <= nova_block < 2 * block     # tl.arange: powers of two
        assert (block != nova_block) == any(n.startswith(f"{name} {nova_block} rounded down") for n in c.notes)
    warps = 4 * s.consumer_warpgroups if s.mma.family == "wgmma" else s.warps_m * s.warps_n
    assert c.num_warps & (c.num_warps - 1) == 0 and c.num_warps <= warps < 2 * c.num_warps
    assert (c.num_warps != warps) == any(n.startswith("num_warps") and "rounded down" in n for n in c.notes)
    ring = c.num_stages * (c.BLOCK_M * c.BLOCK_K + c.BLOCK_K * c.BLOCK_N) * nt.ELEMENT_BYTES[dtype]
    assert 1 <= c.num_stages <= min(s.stages, -(-K // c.BLOCK_K) + 1) and ring <= gpu.smem_per_block
    assert (c.num_stages != s.stages) == any("num_stages" in n for n in c.notes)
    assert c.input_precision == ("tf32" if dtype == "tf32" else None)
    assert c.split_k == s.split_k and (s.split_k > 1) == any("split-K" in n for n in c.notes)
    assert s.pingpong == any("ping-pong" in n for n in c.notes)
    assert (s.cluster_m * s.cluster_n > 1) == any("cluster" in n for n in c.notes)
    assert bool(s.stream_k_tiles) == any("stream-K" in n for n in c.notes)
    assert c.as_dict() == {"kwargs": c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    assert set(c.kwargs) == set(nt.META_NAMES)


def test_a_short_k_loop_takes_no_more_stages_than_its_steps():
    """4096x4096x128 bf16 (two K steps of 64): a cooperative Nova ring is 6-8 deep (ping-pong takes no K loop
    under four tiles); Triton's one program per tile prefetches at most its two steps, and the unused stages
    only keep programs off the SM (the H100 measured this shape at 0.43x the autotuned pick with 8
    stages).  A deep K keeps Nova's."""
    nova_stages = configure(GemmProblem(4096, 4096, 128, dtype="bf16"), "h200", kernel="tiles").schedule.stages
    short = nt.triton_config(4096, 4096, 128, "bf16", "h200")
    assert short.num_stages == min(nova_stages, 3)
    assert any("K loop is 2 step(s)" in n for n in short.notes) == (nova_stages > 3)
    deep = nt.triton_config(4096, 4096, 4096, "bf16", "h200")
    assert deep.num_stages == configure(GemmProblem(4096, 4096, 4096, dtype="bf16"), "h200", kernel="tiles"
                                        ).schedule.stages or any("exceed" in n for n in deep.notes)


def test_layout_reaches_the_configurator():
    for trans_a, trans_b in ((True, False), (False, True)):
        s = configure(GemmProblem(2048, 1024, 512, dtype="bf16", trans_a=trans_a, trans_b=trans_b), "h200").schedule
        c = nt.triton_config(2048, 1024, 512, "bf16", "h200", trans_a=trans_a, trans_b=trans_b)
        assert (c.BLOCK_M, c.BLOCK_K) == (s.block_m, s.block_k) and c.BLOCK_N <= s.block_n
        assert ("TN" if trans_a else "NT") in c.problem


def test_autotune_configs_are_dicts_without_triton_and_configs_with_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)               # not importable
    dicts = nt.autotune_configs(4096, 4096, 4096, "bf16", "h200")
    assert dicts == nt.config_dicts(4096, 4096, 4096, "bf16", "h200") and len(dicts) == 1

    class Config:                                                   # triton.Config's signature
        def __init__(self, kwargs, num_warps=4, num_stages=3):
            self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(Config=Config))
    [wrapped] = nt.autotune_configs(4096, 4096, 4096, "bf16", "h200")
    assert isinstance(wrapped, Config)
    assert (wrapped.kwargs, wrapped.num_warps, wrapped.num_stages) == \
        (dicts[0]["kwargs"], dicts[0]["num_warps"], dicts[0]["num_stages"])


def _user_configs():
    """A usual autotuning list, under the tutorial kernel's names."""
    out = []
    for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4),
                                      (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4),
                                      (64, 32, 32, 2, 5), (32, 64, 32, 2, 5), (256, 128, 64, 8, 3)):
        out.append({"kwargs": {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                    "num_warps": warps, "num_stages": stages})
    return out


@pytest.mark.parametrize("M, N, K, dtype", [(4096, 4096, 4096, "bf16"), (128, 4096, 4096, "tf32"),
                                            (8192, 8192, 1024, "fp16")])
def test_prune_keeps_the_configs_nearest_novas(M, N, K, dtype):
    configs = _user_configs()
    nova = nt.triton_config(M, N, K, dtype, "h200")
    ranked = nt.prune(configs, M, N, K, dtype, "h200", keep=len(configs))
    assert sorted(map(id, ranked)) == sorted(map(id, configs))
    distances = [nt.distance(c, nova) for c in ranked]
    assert distances == sorted(distances)
    assert nt.prune(configs, M, N, K, dtype, "h200") == ranked[:1]
    assert nt.prune(configs, M, N, K, dtype, "h200", keep=3) == ranked[:3]
    exact = nova.as_dict()                                          # Nova's own config, under Nova's names
    assert nt.prune(configs + [exact], M, N, K, dtype, "h200") == [exact] and nt.distance(exact, nova) == 0
    hook = nt.early_config_prune(dtype, "h200", keep=2)
    assert hook(configs, {"M": M, "N": N, "K": K, "a_ptr": None}) == ranked[:2]


def test_prune_names_a_config_without_tile_sizes():
    with pytest.raises(ValueError, match="no BLOCK_M"):
        nt.prune([{"kwargs": {"BM": 64}}], 64, 64, 64)


def test_cli_prints_the_config_and_its_json(capsys):
    assert config_main(["export", "triton", "matmul", "4096x2048x1024", "--dtype", "bf16", "--target", "h200"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("triton.Config("))
    call = ast.parse(line).body[0].value
    kwargs = ast.literal_eval(call.args[0])
    options = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    c = nt.triton_config(4096, 2048, 1024, "bf16", "h200")
    assert kwargs == c.kwargs and options == {"num_warps": c.num_warps, "num_stages": c.num_stages}
    assert config_main(["export", "triton", "matmul", "4096x2048x1024", "--dtype", "tf32", "--trans-b", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d == nt.triton_config(4096, 2048, 1024, "tf32", "h200", trans_b=True).to_dict()
    assert d["input_precision"] == "tf32" and "NT" in d["problem"]


@pytest.mark.parametrize("argv, message", [
    (["conv", "64"], "unknown operation 'conv'"),
    (["matmul", "64x"], "bad GEMM shape"),
    (["matmul", "64", "--dtype", "f8"], "dtype"),
    (["matmul", "64", "--target", "h300"], "h300"),
])
def test_cli_bad_input_is_one_line(argv, message, capsys):
    assert config_main(["export", "triton", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(re.escape(message), err[0]), err
