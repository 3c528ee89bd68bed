"""Helpers shared by benchmarks (kept apart from the benchmarks' command-line modules)."""
