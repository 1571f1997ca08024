"""Benchmark harnesses (importable package code; the scripts in bench/ are thin)."""
