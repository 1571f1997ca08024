"""``nova-config`` through a subprocess, as users run it."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "nova.cli.config", *args], capture_output=True, text=True,
                          timeout=120)


def test_explain_default_target_prints_derivation_and_prediction():
    r = run("explain", "matmul", "4096x4096")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "gemm 4096x4096x4096 tf32" in out and "RTX 3060" in out
    for word in ("Derivation", "warp tile", "block tile", "stages", "split-K", "group-M", "Schedule",
                 "Roofline", "Prediction", "configured in"):
        assert word in out, word


def test_explain_json_keys_and_values():
    r = run("explain", "matmul", "1024x512x256", "--target", "h200", "--dtype", "bf16", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["op"], d["M"], d["N"], d["K"], d["dtype"], d["target"]) == ("matmul", 1024, 512, 256, "bf16", "h200")
    for k in ("block_m", "block_n", "block_k", "warps", "stages", "split_k", "smem_bytes", "regs_per_thread",
              "threads_per_block", "blocks_per_sm", "mma"):
        assert k in d["schedule"]
    assert d["prediction"]["bound"] in ("tensor-core", "smem", "l2", "dram", "launch")
    assert d["config_time_ms"] < 50
    assert all({"step", "formula", "value", "reason"} <= set(s) for s in d["derivation"])


def test_symbolic_shows_sympy_expressions():
    r = run("explain", "matmul", "2048", "--target", "a100", "--symbolic")
    assert r.returncode == 0
    assert "W_min = B_smem*elem_bytes" in r.stdout and "T_min = B_l2*elem_bytes" in r.stdout


def test_targets_and_show_target():
    r = run("targets")
    assert r.returncode == 0
    for name in ("rtx3060", "a100", "rtx4090", "h100", "h200"):
        assert name in r.stdout
    r = run("show-target", "h200", "--json")
    d = json.loads(r.stdout)
    assert d["arch"] == "sm_90" and d["quantities"]["sm_count"]["value"] == 132
    assert "[H200]" in d["quantities"]["dram_bw"]["source"]


@pytest.mark.parametrize("args, message", [
    (("explain", "matmul", "0x5"), "bad GEMM shape '0x5'"),
    (("explain", "matmul", "abc"), "bad GEMM shape 'abc'"),
    (("explain", "matmul", "64x128"), "ambiguous GEMM shape"),
    (("explain", "matmul", "64", "--target", "voodoo"), "unknown target 'voodoo'"),
    (("explain", "matmul", "64", "--dtype", "fp8"), "unsupported dtype 'fp8'"),
    (("explain", "conv2d", "64"), "unknown operation 'conv2d'"),
    (("show-target", "tpu"), "unknown target 'tpu'"),
])
def test_bad_input_is_one_clear_line(args, message):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_tf32_fast_is_an_explicit_opt_in():
    r = run("explain", "matmul", "1024", "--target", "h200", "--tf32-fast", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["problem"]["tf32_rounding"] == "truncate"
    default = json.loads(run("explain", "matmul", "1024", "--target", "h200", "--json").stdout)
    assert "tf32_rounding" not in default["problem"]        # round-to-nearest, key-stable default
