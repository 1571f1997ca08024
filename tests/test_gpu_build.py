"""Every GPU test file has its kernels' build in ``tests/gpu_build.py``'s ``ALL`` (the one command that
fills the cache a device run carries): a new ``test_*_gpu.py`` whose kernels were never built fails on
the device with a cache miss instead of testing anything."""
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


def test_every_gpu_test_file_has_a_build_and_every_build_a_file():
    from gpu_build import ALL
    gpu_files = {p.name for p in TESTS.glob("test_*_gpu.py")} | {"test_grouped_query.py"}
    assert gpu_files - set(ALL) == set(), "GPU test files without a build in gpu_build.ALL"
    assert {name for name in ALL if not (TESTS / name).exists()} == set()
    for name, lines in ALL.items():
        assert lines and all("{t}" in line for line in lines), f"{name}: every line builds for the target given"
