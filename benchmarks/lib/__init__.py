"""Helpers shared by benchmarks and the tests that drive them or a real engine (kept apart from
the benchmarks' command-line modules)."""
