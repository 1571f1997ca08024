"""Kernel families: per family, the problem, the schedule, the derivation and the MLIR builder side by side.

Each family registers itself with ``nova.kernels.family`` when its module is imported;
``nova.kernels.registry`` imports every built-in family (what ``nova cache prune`` needs).
"""
