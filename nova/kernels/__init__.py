"""Kernel families: per family, the problem, the schedule, the derivation and the MLIR builder side by side."""
