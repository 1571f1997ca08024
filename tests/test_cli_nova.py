"""The ``nova`` command through a subprocess (``python -m nova.cli.main``), and the shared shape parser."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nova.cli.main import build_parser
from nova.cli.shapes import ShapeError, parse_gemm_shape, parse_shape_list, read_suite, read_suite_entries

REPO = Path(__file__).resolve().parents[1]


def nova(*args, cache_dir=None, env=None, timeout=300):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NOVA_")}
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    if cache_dir is not None:
        e["NOVA_CACHE_DIR"] = str(cache_dir)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "nova.cli.main", *args], capture_output=True, text=True,
                          env=e, cwd=REPO, timeout=timeout)


def one_line_error(p):
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith(("usage:", " "))]
    assert len(lines) == 1, p.stderr
    return lines[0]


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("text,dims", [("4096", (4096,) * 3), ("512x512", (512,) * 3), ("128x256x64", (128, 256, 64)),
                                       (" 7 X 9 x 11 ", (7, 9, 11)), ("3×5×7", (3, 5, 7))])
def test_parse_gemm_shape(text, dims):
    assert parse_gemm_shape(text) == dims


@pytest.mark.parametrize("text", ["4096x2", "", "0", "1x2x3x4", "-4", "axbxc", "4x", "1.5"])
def test_parse_gemm_shape_rejects(text):
    with pytest.raises(ShapeError):
        parse_gemm_shape(text)


def test_shape_list_and_suites(tmp_path):
    assert parse_shape_list("64, 8x8x16") == [(64, 64, 64), (8, 8, 16)]
    txt = tmp_path / "s.txt"
    txt.write_text("# suite\n64\n\n32x32x16  # small\n")
    assert read_suite(txt) == [(64, 64, 64), (32, 32, 16)]
    js = tmp_path / "s.json"
    js.write_text(json.dumps(["64", [8, 16, 32]]))
    assert read_suite(js) == [(64, 64, 64), (8, 16, 32)]
    bad = tmp_path / "bad.txt"
    bad.write_text("64\n12x13\n")
    with pytest.raises(ShapeError, match="bad.txt:2"):
        read_suite(bad)
    with pytest.raises(ShapeError, match="cannot read suite file"):
        read_suite(tmp_path / "missing.txt")


def test_json_suite_objects(tmp_path):
    from nova.cli.main import build_parser, problems_from
    from nova.kernels.gemm.problem import GemmProblem
    js = tmp_path / "s.json"
    js.write_text(json.dumps([{"M": 8, "N": 16, "K": 32, "trans_a": True, "bias": True, "role": "dW", "count": 3},
                              "64", {"M": 1, "N": 2, "K": 3, "trans_b": False}]))
    assert read_suite_entries(js) == [((8, 16, 32), {"trans_a": True, "bias": True}), ((64, 64, 64), {}),
                                      ((1, 2, 3), {"trans_b": False})]
    args = build_parser().parse_args(["precompile", "gemm", "--suite", str(js), "--target", "h200", "--trans-b",
                                      "--dtype", "bf16"])
    assert problems_from(read_suite_entries(js), args) == [      # an entry's fields win over the flags
        GemmProblem(8, 16, 32, "bf16", True, True, True), GemmProblem(64, 64, 64, "bf16", False, True),
        GemmProblem(1, 2, 3, "bf16", False, False)]
    with pytest.raises(ShapeError, match="only 'nova precompile gemm' reads"):
        read_suite(js)                             # bench/tune would drop the layouts: refused
    js.write_text(json.dumps([{"M": 8, "N": 16, "K": 32, "residual": True, "round_through": True}]))
    assert problems_from(read_suite_entries(js), args) == [
        GemmProblem(8, 16, 32, "bf16", False, True, out_dtype="f32", residual=True, round_through="bf16")]
    js.write_text(json.dumps([{"M": 8, "N": 16, "K": 32, "trans_a": False, "activation": "none"}]))
    assert read_suite(js) == [(8, 16, 32)]         # default fields change nothing
    for bad, fragment in (({"M": 8, "N": 16}, "needs integer M, N and K"),
                          ({"M": 8, "N": 16, "K": 4, "trans_a": 1}, "trans_a=1 in .* must be true or false")):
        js.write_text(json.dumps([bad]))
        with pytest.raises(ShapeError, match=fragment):
            read_suite_entries(js)


@pytest.mark.parametrize("name,text,message", [
    ("s.json", '["64x64x64",\n "128",\n]\n', "s.json:3:1: JSON parse error: Expecting value"),
    ("s.json", '{"M": 64, "N": 64 "K": 64}\n', "s.json:1:19: JSON parse error: Expecting ',' delimiter"),
    ("s.json", "// shapes\n[\"64\"]\n", "s.json:1:1: JSON parse error: Expecting value"),
    ("s.txt", '{"shapes": ["64"]\n', "s.txt:2:1: JSON parse error: Expecting ',' delimiter"),
    ("s.json", '{"shapes": ["64"]}\n', "s.json: a JSON suite is a list of shapes, not an object"),
    ("s.json", "\n", "s.json lists no shapes"),
])
def test_a_json_suite_that_does_not_parse_is_a_parse_error_not_a_bad_shape(tmp_path, capsys, name, text, message):
    """A .json suite (or one that opens a JSON list or object) that is not JSON: one line naming the
    file, the line and the column, exit 2."""
    from nova.cli.main import main
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ShapeError) as e:
        read_suite(path)
    assert str(e.value).startswith("suite file ") and str(e.value).endswith(message) and "bad GEMM shape" not in str(e.value)
    assert main(["tune", "gemm", "--suite", str(path), "--target", "h200", "--exhaustive",
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"nova: error: {e.value}"]


def test_a_json_suite_may_open_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "s.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(["64", [8, 16, 32]]).encode())
    assert read_suite(path) == [(64, 64, 64), (8, 16, 32)]


def test_precompile_with_a_bad_json_suite_is_one_line(tmp_path, capsys):
    from nova.cli.main import main
    js = tmp_path / "s.json"
    js.write_text(json.dumps([{"M": 8, "N": 16, "K": 4, "bias": "yes"}]))
    assert main(["precompile", "gemm", "--suite", str(js), "--target", "h200", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bias=\"yes\"" in err and "must be true or false" in err


# --------------------------------------------------------------------------- subprocess
def test_cache_path(tmp_path):
    p = nova("cache", "path", cache_dir=tmp_path / "c")
    assert p.returncode == 0 and p.stdout.strip() == str(tmp_path / "c")
    p = nova("cache", "path", env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert p.stdout.strip() == str(tmp_path / "xdg" / "nova")


def test_cache_list_and_clear(tmp_path):
    from nova.codegen.artifact import KernelArtifact
    from nova.runtime.cache import KernelCache
    c = KernelCache(tmp_path / "c")
    art = KernelArtifact("k", "sm_90", "// ptx", (1, 1, 1), (32, 1, 1), 0, ("A", "B", "C"))
    c.put("ab" + "0" * 62, art, "gemm 8x8x8 tf32 NN -> f32 on h200 (sm_90)")
    p = nova("cache", "list", "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 0 and "abab" not in p.stdout
    assert "gemm 8x8x8 tf32 NN -> f32 on h200 (sm_90)" in p.stdout and "1 kernels in" in p.stdout
    p = nova("cache", "prune", "--dry-run", "--cache-dir", str(tmp_path / "c"))   # no problem in its meta: stale
    assert p.returncode == 0 and "would remove 1 kernels" in p.stdout and "stale" in p.stdout and len(c.entries()) == 1
    assert "; 0 kept" in p.stdout                  # a dry run counts what it would keep, not what is on disk
    p = nova("cache", "prune", "--max-size", "forty", "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 2 and "'forty' is not a size" in p.stderr and len(c.entries()) == 1
    p = nova("cache", "prune", "--max-size", "40M", "--dry-run", "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 0 and "would remove 1 kernels" in p.stdout
    p = nova("cache", "clear", cache_dir=tmp_path / "c")
    assert p.returncode == 0 and p.stdout.startswith("removed 1 kernels")
    assert c.entries() == []


@pytest.mark.parametrize("args,fragment", [
    (["compile", "gemm", "4096x2", "--target", "h200"], "ambiguous GEMM shape '4096x2'"),
    (["compile", "gemm", "-3x4", "--target", "h200"], "bad GEMM shape '-3x4'"),
    (["precompile", "gemm", "--shapes", "8x8x8x8x8", "--target", "h200"], "bad GEMM shape '8x8x8x8x8'"),
    (["precompile", "gemm", "--shapes", "3x8x8x8", "--batch-strides", "0,packed", "--target", "h200"],
     "bad batch strides"),
    (["precompile", "gemm", "--shapes", "3x8x8x8", "--batch-strides", "packed,packed,10", "--target", "h200"],
     "batch stride of C (10 elements) is smaller than one C matrix"),
    (["precompile", "gemm", "--shapes", "64,-8", "--target", "h200"], "bad GEMM shape '-8'"),
    (["compile", "gemm", "64", "--target", "h300"], "unknown target 'h300'"),
    (["compile", "gemm", "64", "--target", "h200", "--dtype", "fp64"], "unsupported dtype 'fp64'"),
    (["compile", "gemm", "64", "--target", "h200", "--dtype", "tf32,bf16"], "give one --dtype"),
    (["compile", "gemm", "64", "--target", "h200", "--emit", "cubin"], "refusing to write a binary cubin"),
    (["compile", "gemm", "99999999999x2x3", "--target", "h200"], "GEMM dimension M=99999999999 exceeds the limit"),
    (["precompile", "gemm", "--shapes", "64,300000x300000x8", "--target", "h200"], "more than the 154.6 GB"),
    (["compile", "gemm", "64", "--target", "h200", "--dtype", "bf16", "--tf32-fast"],
     "--tf32-fast applies to --dtype tf32 only"),
    (["precompile", "gemm", "--shapes", "64", "--target", "h200", "--dtype", "bf16,fp16", "--tf32-fast"],
     "--dtype bf16,fp16 has no tf32"),
    (["tune", "gemm", "--target", "h200", "--exhaustive"], "give one shape (MxNxK) or --suite FILE"),
    (["precompile", "gemm", "--suite", "/nonexistent/suite.txt", "--target", "h200"], "cannot read suite file"),
    (["cache", "explode"], "invalid choice"),
    # flags a command would otherwise ignore are refused
    (["precompile", "train", "gpt42m", "--batch", "32", "--target", "h200", "--trans-a"],
     "--trans-a: precompile gemm's options"),
    (["precompile", "train", "gpt42m", "--batch", "32", "--target", "h200", "--dtype", "bf16"], "--dtype: precompile gemm's"),
    (["precompile", "train", "gpt42m", "--batch", "32", "--target", "h200", "--deterministic"],
     "set NOVA_DETERMINISTIC=1"),
    (["precompile", "gemm", "--shapes", "64", "--target", "h200", "--seq", "128"], "--seq: options of precompile train"),
    (["precompile", "gemm", "--shapes", "64", "--target", "h200", "--batch-strides", "0,packed,packed"],
     "--batch-strides applies to a batched shape"),
    (["compile", "gemm", "64", "--target", "h200", "--batch-strides", "0,packed,packed"],
     "--batch-strides applies to a batched shape"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment, tmp_path):
    p = nova(*args, cache_dir=tmp_path / "c")
    line = one_line_error(p)
    assert fragment in line
    assert p.returncode == 2, (p.returncode, line)


def test_version():
    import nova as nova_pkg
    p = nova("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"nova {nova_pkg.__version__}"


def test_debug_shows_traceback(tmp_path):
    p = nova("compile", "gemm", "64", "--target", "h300", env={"NOVA_DEBUG": "1"})
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_offline_hint_is_a_valid_command():
    from nova.kernels.gemm.problem import GemmProblem
    from nova.messages import precompile_command
    cmd = precompile_command(GemmProblem(10, 20, 30, "bf16", True, True, True, "gelu", "f32"), "h200")
    args = build_parser().parse_args(cmd.split()[1:])
    assert args.shapes == [((10, 20, 30), {})] and args.trans_a and args.trans_b and args.bias
    assert (args.activation, args.out_dtype, args.dtype, args.target) == ("gelu", "f32", "bf16", "h200")
    assert not args.tf32_fast


def test_offline_hint_builds_the_same_kernel_key():
    """The hint's command configures the very problem that missed (tf32_fast and the batch included)."""
    from nova.cli.main import make_problem
    from nova.kernels.gemm.problem import GemmProblem
    from nova.messages import precompile_command
    for p in (GemmProblem(64, 32, 16, tf32_rounding="truncate"), GemmProblem(7, 8, 9, "fp16", out_dtype="f32"),
              GemmProblem(64, 32, 16, "bf16", batch=3),
              GemmProblem(7, 8, 9, "fp16", True, batch=5, batch_stride_a=0, batch_stride_c=100)):
        args = build_parser().parse_args(precompile_command(p, "h200").split()[1:])
        assert [make_problem(s, d, args, f) for d in args.dtype.split(",") for s, f in args.shapes] == [p]


def _codegen_ready() -> str:
    try:
        from nova.kernels.gemm.compile import compile_gemm  # noqa: F401
        from nova.configurator import configure  # noqa: F401
    except ImportError as e:
        return f"codegen/configurator not importable yet: {e}"
    if shutil.which("ptxas") is None:
        return "ptxas not found"
    return ""


@pytest.mark.slow
@pytest.mark.skipif(bool(_codegen_ready()), reason=_codegen_ready() or "ready")
def test_precompile_then_cached_then_compile_outputs(tmp_path):
    cache = tmp_path / "c"
    p = nova("precompile", "gemm", "--shapes", "64,32x64x128", "--target", "h200", "--dtype", "tf32,bf16",
             cache_dir=cache)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 compiled, 0 already cached, 0 failed" in p.stdout
    p = nova("precompile", "gemm", "--shapes", "64", "--target", "h200", "--dtype", "tf32", cache_dir=cache)
    assert "0 compiled, 1 already cached" in p.stdout
    listing = nova("cache", "list", cache_dir=cache).stdout
    assert "gemm 32x64x128 bf16 NN -> bf16 on h200 (sm_90)" in listing
    for emit in ("ptx", "mlir"):
        out = tmp_path / f"k.{emit}"
        p = nova("compile", "gemm", "64", "--target", "h200", "--emit", emit, "-o", str(out))
        assert p.returncode == 0, p.stderr
        assert out.stat().st_size > 0
    assert ".entry" in (tmp_path / "k.ptx").read_text()


def test_bench_without_gpu_is_one_clear_line():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "nova.cli.main", "bench", "gemm", "--shapes", "64"],
                       capture_output=True, text=True, timeout=120)
    try:
        import torch  # noqa: F401
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        assert r.returncode == 1                      # a runtime failure, not bad input
        assert r.stderr.strip().count("\n") == 0 and "no NVIDIA GPU" in r.stderr and "Traceback" not in r.stderr


def test_bench_train_forwards_its_arguments(monkeypatch):
    from nova.bench import train
    from nova.cli import main as cli
    seen = {}

    def fake_main(argv=None, prog=None):
        seen["argv"], seen["prog"] = argv, prog
        return 0
    monkeypatch.setattr(train, "main", fake_main)
    argv = ["--all", "--model", "tiny", "--batch", "3", "--seq", "8", "--steps", "4", "--out", "/tmp/x"]
    assert cli.main(["bench", "train", *argv]) == 0
    assert seen == {"argv": argv, "prog": "nova bench train"}
    # the forwarded flags are nova.bench.train's own
    args = train.parser("nova bench train").parse_args(argv)
    assert args.all and args.model == "tiny" and args.batch == 3 and args.seq == 8 and args.out == "/tmp/x"
    with pytest.raises(SystemExit):
        cli.main(["bench", "gemm", "--shapes", "64", "--model", "tiny"])     # only train forwards


# --------------------------------------------------------------------------- the cache directory
def test_a_missing_cache_directory_is_named_not_listed_as_empty(tmp_path):
    missing = tmp_path / "no-such-dir"
    for action in ("list", "prune", "clear"):
        p = nova("cache", action, "--cache-dir", str(missing))
        assert f"--cache-dir {missing} does not exist" in one_line_error(p) and p.returncode == 2
    assert not missing.exists()
    p = nova("cache", "list", cache_dir=missing)          # the default (here NOVA_CACHE_DIR) not made yet: empty
    assert p.returncode == 0 and "0 kernels in" in p.stdout and "does not exist yet" in p.stdout


@pytest.mark.parametrize("args", [["cache", "list"], ["cache", "prune"],
                                  ["precompile", "gemm", "--shapes", "64", "--target", "h200"]])
def test_a_cache_directory_that_is_a_file_is_named_so(args, tmp_path):
    a_file = tmp_path / "cache.tgz"
    a_file.write_bytes(b"not a directory")
    p = nova(*args, "--cache-dir", str(a_file))
    line = one_line_error(p)
    assert f"{a_file} is a file, not a directory" in line and "corrupt" not in line.lower()
    assert p.returncode == 2


def test_a_read_only_cache_directory_is_refused_before_compiling(tmp_path, monkeypatch, capsys):
    """Checked through ``os.access`` (what a read-only mount or a directory without write permission
    reports; root passes permission bits, so the refusal is simulated for this directory only): one
    line, exit 2, and nothing compiled."""
    import nova.runtime.matmul
    from nova.cli.main import main
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == ro else real_access(path, mode, **kw))
    compiled = []
    monkeypatch.setattr(nova.runtime.matmul, "precompile_gemms", lambda *a, **k: compiled.append(a) or
                        {"compiled": 1, "cached": 0, "failed": 0})
    assert main(["precompile", "gemm", "--shapes", "64", "--target", "h200", "--cache-dir", str(ro)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--cache-dir {ro} is not writable" in err[0]
    assert compiled == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_directory_for_real(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        p = nova("precompile", "gemm", "--shapes", "64", "--target", "h200", "--cache-dir", str(ro))
        assert "is not writable" in one_line_error(p) and p.returncode == 2
    finally:
        ro.chmod(0o755)


# --------------------------------------------------------------------------- nova report
@pytest.mark.parametrize("content, fragment", [
    ("[1, 2]", "a JSON list, not a results file"),
    ('"rows"', "a JSON str, not a results file"),
    ('{"rows": 5}', '"rows" is not a list of objects'),
    ('{"rows": [{"M": 64}]}', "benchmark results lack the columns"),
    ('{"environment": 5, "rows": []}', '"environment" is not an object'),
    ("not json at all", "cannot read results file"),
])
def test_report_of_a_wrong_results_file_is_one_line_and_exit_2(content, fragment, tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text(content)
    p = nova("report", "--results", str(bad), "--out", str(tmp_path / "report"))
    assert fragment in one_line_error(p)
    assert p.returncode == 2


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_tune_jobs_below_one_is_one_line(jobs, tmp_path):
    """``--jobs`` counts compiler processes: 0 or a negative count is bad input (it ran before), one
    line and exit 2 like every other (argparse's usage block is not printed either)."""
    r = nova("tune", "gemm", "64", "--target", "h200", "--exhaustive", "--limit", "2", "--jobs", jobs,
             cache_dir=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"argument --jobs: {jobs} is not a positive integer" in lines[0], r.stderr
