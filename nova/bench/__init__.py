"""Benchmark harnesses (importable package code; the scripts in ``bench/`` stay thin).

``nova.bench.train``: the training-step benchmark (PyTorch eager, torch.compile, JAX, Nova) on the
built-in GPTs; ``nova.bench.jax_gpt``: its JAX twin of the model; ``nova.bench.train_report``:
the summary table and plot of a run.
"""
