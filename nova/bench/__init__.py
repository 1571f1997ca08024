"""Benchmarking, tuning and calibration: importable package code behind ``nova bench``/``nova tune``
and the device jobs of ``bench/`` (run as ``python3 -m nova.bench.<module>``).

    harness         measurement primitives: fresh operands, float64 references, errors, CUDA-event
                    and CUDA-graph timing, one correctness check (``check_case``)
    benchmark       Nova vs cuBLAS, ``nova bench gemm`` (CSV, Markdown, JSON)
    correctness     the device correctness sweep (``python3 -m nova.bench.correctness``)
    tune            the oracle's host side (``nova tune --exhaustive``: precompile a schedule space,
                    a manifest) and its device side (check and time every candidate)
    oracle          the device oracle run over a manifest (``python3 -m nova.bench.oracle``)
    oracle_replay   replay an oracle results file against today's configurator (host)
    calibrate       fit a preset's efficiency constants from a results file (host)
    calibrate_aten  fit a preset's constants of ATen's kernels (per kind) from a training-step
                    profile of ``train_profile`` (host)
    attention       fused attention vs torch SDPA backends (``python3 -m nova.bench.attention``)
    train           the training-step benchmark: PyTorch eager, torch.compile, JAX, Nova on the
                    built-in GPTs, one process per framework (``python3 -m nova.bench.train``);
                    ``jax_gpt`` its JAX twin of the model, ``train_report`` the summary and plot
    triton_matmul   Triton's matmul with Nova's one config vs autotuned vs cuBLAS: time to the first
                    result, steady TFLOP/s (``python3 -m nova.bench.triton_matmul``; needs triton)
    kernel_profile, host_profile, l2_probe   device profiles (per-kernel time, host cost per call,
                    L2/DRAM bandwidth)

The device modules need torch (``harness.require_torch``) or cupy, imported when they run;
importing the package touches neither.  Nothing in ``nova`` outside this package and ``nova.cli``
imports it.
"""
