"""Cost model: coefficients from profiles and the least-squares fit."""

from __future__ import annotations

import random

import pytest

from resources.sim.cost_model import BatchShape, CostCoefficients, coefficients_from_profile, fit
from resources.sim.profiles import resolve_deployment


def test_fit_recovers_known_coefficients() -> None:
    truth = CostCoefficients(a=2.5e-4, b=7e-9, d=2e-6, e=1.6e-4, f=0.06)
    rng = random.Random(0)
    rows = []
    for _ in range(60):
        prefill = [(rng.randint(1, 2000), rng.randint(0, 2000)) for _ in range(rng.randint(0, 6))]
        decode = [rng.randint(10, 3000) for _ in range(rng.randint(0, 200))]
        shape = BatchShape(prefill=prefill, decode=decode)
        rows.append((shape, truth.time(shape)))
    got = fit(rows)
    assert got.as_array() == pytest.approx(truth.as_array(), rel=1e-6)


def test_fit_with_noise_stays_close() -> None:
    truth = CostCoefficients(a=3e-4, b=1e-8, d=2e-6, e=2e-4, f=0.05)
    rng = random.Random(1)
    rows = []
    for _ in range(400):
        prefill = [(rng.randint(1, 2000), rng.randint(0, 2000)) for _ in range(rng.randint(0, 6))]
        decode = [rng.randint(10, 3000) for _ in range(rng.randint(0, 200))]
        shape = BatchShape(prefill=prefill, decode=decode)
        rows.append((shape, truth.time(shape) * rng.uniform(0.98, 1.02)))
    got = fit(rows)
    assert got.a == pytest.approx(truth.a, rel=0.05)
    assert got.f == pytest.approx(truth.f, rel=0.1)


def test_fit_needs_rows_spanning_all_terms() -> None:
    rows = [(BatchShape(decode=[100] * k), 0.05 + k * 1e-3) for k in range(1, 10)]
    with pytest.raises(ValueError, match="five terms"):
        fit(rows)


def test_profile_coefficients_are_positive_and_ordered_by_hardware() -> None:
    l4 = coefficients_from_profile(resolve_deployment("L4", "llama-2-7b"))
    h100 = coefficients_from_profile(resolve_deployment("H100-80GB", "llama-2-7b"))
    assert min(l4.as_array()) > 0
    assert h100.a < l4.a and h100.d < l4.d and h100.f < l4.f
    # a decode step is dominated by reading the weights: 13.5 GB at ~240 GB/s on an L4
    assert 0.04 < l4.f < 0.08
    # tensor parallelism adds all-reduce time per token
    tp = coefficients_from_profile(resolve_deployment("A100-40GB", "llama-3-70b"))
    assert tp.a > 0


def test_batch_time_terms() -> None:
    c = CostCoefficients(a=1.0, b=10.0, d=100.0, e=1000.0, f=10000.0)
    shape = BatchShape(prefill=[(2, 3)], decode=[5, 7])
    # tokens 2 + 2 decodes = 4; c^2 + 2mc = 4 + 12 = 16; kv 12; one prefill request
    assert c.time(shape) == 4 + 160 + 1200 + 1000 + 10000
