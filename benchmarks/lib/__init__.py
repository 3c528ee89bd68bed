"""Helpers shared by benchmarks and the tests that drive a real engine."""
