"""Benchmarks: each module runs as a script with no arguments (results in BENCHMARKS.md)."""
