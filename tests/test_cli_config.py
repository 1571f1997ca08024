"""``nova-config`` through a subprocess, as users run it."""
import json
import os
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


def test_help_and_the_reference_list_export():
    """``nova-config --help`` lists every subcommand, ``export`` included, and docs/cli.md documents its
    formats; ``export`` with no format is one usage line."""
    r = run("--help")
    assert r.returncode == 0 and "export" in r.stdout.split("positional arguments:")[0]
    assert "a GEMM's schedule in another tool's format" in r.stdout
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "### `nova-config export triton OP SHAPE`" in doc and "### `nova-config export transform OP SHAPE`" in doc
    assert "| `--with-payload` |" in doc
    r = run("export")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "nova-config export: error: the following arguments are required: FORMAT (see nova-config export --help)"]


def test_the_cast_epilogue_is_stated_with_round_through():
    r = run("explain", "matmul", "16384x768x768", "--target", "h200", "--dtype", "bf16", "--bias", "--residual",
            "--round-through", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["problem"]["round_through"] == "bf16" and d["problem"]["out_dtype"] == "f32", d["problem"]


@pytest.mark.parametrize("args, message", [
    (("explain", "matmul", "0x5"), "bad GEMM shape '0x5'"),
    (("explain", "matmul", "4096x0"), "bad GEMM shape '4096x0': sizes must be positive"),
    (("explain", "matmul", "abc"), "bad GEMM shape 'abc'"),
    (("explain", "matmul", "-3x4"), "bad GEMM shape '-3x4'"),
    (("explain", "matmul", "-3x4", "--target", "h200"), "bad GEMM shape '-3x4'"),
    (("explain", "matmul", "99999999999x2x3"), "GEMM dimension M=99999999999 exceeds the limit 2^31-1"),
    (("explain", "matmul", "300000x300000x8"), "more than the 154.6 GB of the largest GPU"),
    (("explain", "matmul", "64", "--dtype", "bf16", "--tf32-fast"), "--tf32-fast applies to --dtype tf32 only"),
    (("explain", "matmul", "64x128"), "ambiguous GEMM shape"),
    (("explain", "matmul", "64", "--target", "voodoo"), "unknown target 'voodoo'"),
    (("explain", "matmul", "64", "--dtype", "fp8"), "unsupported dtype 'fp8'"),
    (("explain", "conv2d", "64"), "unknown operation 'conv2d'"),
    (("show-target", "tpu"), "unknown target 'tpu'"),
    (("explain", "matmul", "512x512x512", "--batch-strides", "0,packed,packed"),     # not silently ignored
     "--batch-strides applies to a batched shape BxMxNxK; 512x512x512 is a single GEMM"),
    (("explain", "matmul", "64", "--round-through"), "a cast epilogue rounds to the inputs' 16-bit type"),
    (("explain", "matmul", "64", "--dtype", "bf16", "--round-through", "--out-dtype", "bf16"),
     "widened to an f32 output, not bf16"),
])
def test_bad_input_is_one_clear_line(args, message):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_bad_cluster_setting_is_one_clear_line():
    r = subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", "matmul", "4096", "--target", "h200"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "NOVA_CLUSTER": "two"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "NOVA_CLUSTER='two': expected MxN" in lines[0], r.stderr


def test_tf32_fast_is_an_explicit_opt_in():
    r = run("explain", "matmul", "1024", "--target", "h200", "--tf32-fast", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["problem"]["tf32_rounding"] == "truncate"
    default = json.loads(run("explain", "matmul", "1024", "--target", "h200", "--json").stdout)
    assert "tf32_rounding" not in default["problem"]        # round-to-nearest, key-stable default


def test_version():
    import nova
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"nova {nova.__version__}"


def test_targets_json_lists_every_preset_with_its_key_figures():
    from nova.hwmodel import PRESETS
    r = run("targets", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [t["target"] for t in rows] == list(PRESETS)
    h200 = rows[-1]
    assert (h200["arch"], h200["SMs"], h200["dram_TBps"]) == ("sm_90", 132, 4.8)
    assert {"clock_GHz", "tf32_TFLOPs", "bf16_TFLOPs", "fp16_TFLOPs", "l2_MB", "smem_block_KB"} <= set(h200)


def test_warpgroups_cover_the_tile_in_the_kernels_orientation():
    """Swapped operands (C^T = B^T A^T): the warpgroups' rows run along N; the print says so and
    its slabs add up to the tile (the README example, 4096^3 TF32 on the H200, is swapped)."""
    import re
    from nova.cli.config import tile_row, warp_row
    from nova.configurator import GemmProblem, configure
    swapped = 0
    for problem in (GemmProblem(4096, 4096, 4096), GemmProblem(4096, 4096, 4096, "bf16"),
                    GemmProblem(512, 4096, 1000, trans_b=True), GemmProblem(100, 3000, 64, "fp16")):
        s = configure(problem, "h200").schedule
        text = warp_row(s)[1]
        if s.pingpong:          # each warpgroup computes whole tiles (4096^3 BF16 picks ping-pong)
            m = re.match(r"ping-pong: 2 consumer warpgroups, each computing whole (\d+) \((M|N)\) x (\d+) \((M|N)\) tiles", text)
            assert m, text
            along = {"M": s.block_m, "N": s.block_n}
            assert (int(m[1]), int(m[3])) == (along[m[2]], along[m[4]]), text
            continue
        m = re.match(r"(\d+) consumer warpgroups? of (\d+) \((M|N)\) x (\d+) \((M|N)\) covering the (\d+) \((M|N)\) x "
                     r"(\d+) \((M|N)\) tile", text)
        assert m, text
        wgs, per, r1, cols, c1, rows, r2, cols2, c2 = m.groups()
        assert int(wgs) * int(per) == int(rows) and cols == cols2 and (r1, c1) == (r2, c2)
        along = {"M": s.block_m, "N": s.block_n}
        assert (int(rows), int(cols)) == (along[r1], along[c1]) and r1 == ("N" if s.swap_ab else "M")
        assert ("operands swapped" in tile_row(s)[1]) == s.swap_ab
        swapped += s.swap_ab
    assert swapped >= 1
    r = run("explain", "matmul", "4096", "--target", "h200")
    assert "2 consumer warpgroups of 64 (N) x 256 (M) covering the 128 (N) x 256 (M) tile" in " ".join(r.stdout.split())
