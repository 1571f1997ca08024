"""The command line of the GPU test files that build their own kernels on a host with MLIR:

    NOVA_CACHE_DIR=.nova-cache python tests/test_clipping_gpu.py --target h200 [--cache-dir DIR]

Each file defines ``build_kernels(target, cache_dir) -> {"compiled", "cached", "failed"}`` and ends
with ``main(build_kernels)``.  The files whose kernels are built behind a ``--build`` flag

    NOVA_CACHE_DIR=.nova-cache python tests/test_embedding_gpu.py --build --target h200

define ``_build(target)`` and end with ``flag_main(_build, "embedding")``.

Every GPU test file's kernels in one command (each file's own build, in turn; the model steps' plans
through ``nova precompile train``), then carry the cache to the device:

    NOVA_CACHE_DIR=.nova-cache python tests/gpu_build.py --all --target h200
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

# every GPU test file -> the shell lines that put its kernels into $NOVA_CACHE_DIR ({py}: this Python,
# {t}: the target); the files that print precompile commands pipe them into sh
ALL = {
    "test_attention_gpu.py": ["{py} -m nova.bench.attention --precompile --target {t}"],
    # its GPU test's planned calls run causal cases of test_attention_gpu.py: the same kernels
    "test_attention_call_plan.py": ["{py} -m nova.bench.attention --precompile --target {t}"],
    "test_attention_mask_gpu.py": ["{py} tests/test_attention_mask_gpu.py --target {t} --build"],
    "test_clipping_gpu.py": ["{py} tests/test_clipping_gpu.py --target {t}"],
    "test_compile_gpu.py": ["{py} tests/test_compile_gpu.py --target {t}",
                            "{py} -m nova.cli.main precompile train gpt42m --target {t}",
                            "{py} -m nova.cli.main precompile train llama42m --target {t}"],
    "test_embedding_gpu.py": ["{py} tests/test_embedding_gpu.py --target {t} --build"],
    "test_executor_gpu.py": ["{py} tests/test_executor_gpu.py --target {t} --build",
                             "{py} tests/test_executor_gpu.py --target {t} | grep '^nova precompile' | sh"],
    "test_frontend_real_scripts.py": ["{py} tests/test_frontend_real_scripts.py --target {t}"],
    "test_gemm_epilogue_gpu.py": ["{py} tests/test_gemm_epilogue_gpu.py --target {t} --build"],
    "test_heldout.py": ["{py} tests/test_heldout.py --target {t}"],
    "test_grouped_query.py": ["{py} tests/test_grouped_query.py --target {t}"],
    "test_integrations_dynamo_gpu.py": ["{py} tests/test_integrations_dynamo_gpu.py --target {t} --build"],
    "test_memory_policy.py": ["{py} tests/test_memory_policy.py --target {t}"],
    "test_optimizer_gpu.py": ["{py} tests/test_optimizer_gpu.py --target {t}"],
    "test_pointwise_gpu.py": ["{py} tests/test_pointwise_gpu.py --target {t}"],
    "test_pointwise_indexing_gpu.py": ["{py} tests/test_pointwise_indexing_gpu.py --target {t}"],
    "test_rows_gpu.py": ["{py} tests/test_rows_gpu.py --target {t} | grep '^nova precompile' | sh"],
    "test_runtime_gpu.py": ["{py} tests/test_runtime_gpu.py --target {t} | sh"],
    "test_skinny_gpu.py": ["{py} tests/test_skinny_gpu.py --target {t} --build"],
}


def main(build_kernels) -> None:
    ap = argparse.ArgumentParser(description="build the kernels of these GPU tests into the kernel cache "
                                             "(NOVA_CACHE_DIR or --cache-dir) on a host with MLIR")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    sys.exit(1 if build_kernels(args.target, args.cache_dir)["failed"] else 0)


def flag_main(build, what: str) -> None:
    """``--build [--target T]``: ``build(target)`` compiles the file's ``what`` kernels into $NOVA_CACHE_DIR."""
    ap = argparse.ArgumentParser(description=f"build this file's {what} kernels into $NOVA_CACHE_DIR")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true", help="compile the kernels (a host with MLIR, no GPU needed)")
    args = ap.parse_args()
    if args.build:
        build(args.target)


def build_all(target: str, only: list[str] | None = None) -> int:
    """Run ``ALL``'s lines (of the files in ``only``, default every file) from the repository root;
    the number of files whose build failed."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    failed, ran = [], set()
    for name, lines in ALL.items():
        if only and name not in only:
            continue
        start = time.time()
        for line in lines:
            cmd = line.format(py=sys.executable, t=target)
            if cmd in ran:                  # a line two files share (the same kernels) runs once
                continue
            ran.add(cmd)
            done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=root, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode:
                failed.append(name)
                print(f"{name}: FAILED ({cmd}): {done.stderr.strip().splitlines()[-1:] or ['']}", flush=True)
                break
        else:
            print(f"{name}: built ({time.time() - start:.0f} s)", flush=True)
    print(f"{len(ALL) if not only else len(only)} GPU test files, {len(failed)} failed; cache: "
          f"{os.environ.get('NOVA_CACHE_DIR', '~/.cache/nova')}")
    return len(failed)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="build the kernels of every GPU test file into NOVA_CACHE_DIR "
                                             "(a host with MLIR, no GPU needed)")
    ap.add_argument("--all", action="store_true", help="every file of ALL (required: the one action)")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--only", nargs="*", default=None, help="these test files only (names as in ALL)")
    args = ap.parse_args()
    if not args.all:
        ap.error("--all is the only action (each test file's own build: its __main__)")
    sys.exit(1 if build_all(args.target, args.only) else 0)
