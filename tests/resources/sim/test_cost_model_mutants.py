"""Every coefficient of `coefficients_from_profile`, worked by hand on a made-up deployment with
round numbers (tensor-parallel all-reduce term included, at TP 1, 2 and 4); and the parts of
the fit and the profile lookup the first mutation run found unguarded
(benchmarks/results/mutation.md)."""

from __future__ import annotations

import pytest

from resources.sim.cost_model import (
    BatchShape,
    Efficiency,
    coefficients_from_profile,
    fit,
    get_timing_profile,
)
from resources.sim.profiles import Deployment, HardwareProfile, ModelProfile

GPU = HardwareProfile("test-gpu", 1e12, 1e9, 10**12, 1e8)
# 1e6 parameters; matmul params 1e6 - 2 tables * 100 vocab * 8 hidden = 998,400;
# KV bytes per token 2 * 2 layers * 1 KV head * 4 head_dim * 2 bytes = 32
MODEL = ModelProfile("test-model", 1e6, 2, 8, 2, 1, 4, 100, False, 64)
EFF = Efficiency(
    matmul=0.5,
    attention=0.25,
    memory=0.5,
    interconnect=0.5,
    step_overhead_s=0.001,
    prefill_request_overhead_s_per_layer=1e-4,
)

# (tp, a, b, d, e, f); by hand from the docstring of `coefficients_from_profile`:
# a = 2 * 998,400 / (tp * 1e12 * 0.5) + all-reduce, where the all-reduce (tp > 1) is
#     (2 * 2 layers * 8 hidden * 2 bytes = 64 bytes) * 2 * (tp - 1) / tp / (1e8 * 0.5);
# b = 2 * 2 layers * 2 heads * 4 head_dim / (tp * 1e12 * 0.25);  d = 32 / (tp * 1e9 * 0.5);
# e = 1e-4 * 2 layers;  f = 2e6 weight bytes / (tp * 1e9 * 0.5) + 0.001
EXPECTED = [
    (1, 3.9936e-6, 1.28e-10, 6.4e-8, 2e-4, 0.005),
    (2, 1.9968e-6 + 1.28e-6, 6.4e-11, 3.2e-8, 2e-4, 0.003),
    (4, 9.984e-7 + 1.92e-6, 3.2e-11, 1.6e-8, 2e-4, 0.002),
]


@pytest.mark.parametrize(("tp", "a", "b", "d", "e", "f"), EXPECTED)
def test_every_coefficient_by_hand(tp, a, b, d, e, f) -> None:
    got = coefficients_from_profile(Deployment(GPU, MODEL, tp, 0.9), EFF)
    assert (got.a, got.b, got.d, got.e, got.f) == pytest.approx((a, b, d, e, f), rel=1e-9)


def test_the_all_reduce_term_alone() -> None:
    """At TP 2 the all-reduces add 64 bytes * 2 * 1/2 / 5e7 B/s = 1.28 us per token; with a
    twice faster interconnect, half of that."""
    slow = coefficients_from_profile(Deployment(GPU, MODEL, 2, 0.9), EFF)
    fast = coefficients_from_profile(
        Deployment(GPU, MODEL, 2, 0.9), Efficiency(**{**EFF.__dict__, "interconnect": 1.0})
    )
    assert slow.a - fast.a == pytest.approx(0.64e-6, rel=1e-9)


TRUTH = (2e-5, 3e-10, 4e-8, 5e-4, 6e-3)
SHAPES = [
    BatchShape(prefill=[(4096, 8000)]),
    BatchShape(prefill=[(512, 0), (256, 100)]),
    BatchShape(decode=[3000] * 64),
    BatchShape(decode=[10] * 3),
    BatchShape(prefill=[(128, 4000)], decode=[500] * 8),
    BatchShape(prefill=[(2000, 0), (16, 16), (16, 32)], decode=[7]),
    BatchShape(decode=[100]),
]
ROWS = [(s, sum(c * x for c, x in zip(TRUTH, s.features(), strict=True))) for s in SHAPES]


@pytest.mark.parametrize("n", [5, len(ROWS)])
def test_fit_recovers_coefficients_on_features_of_very_different_scales(n) -> None:
    """Attention units reach 1e8 where a batch has a few prefill requests: the fit still
    recovers each coefficient, from five rows spanning the five terms too."""
    got = fit(ROWS[:n])
    assert (got.a, got.b, got.d, got.e, got.f) == pytest.approx(TRUTH, rel=1e-6)


def test_fit_refuses_too_few_rows_naming_the_count() -> None:
    rows = [(BatchShape(decode=[k]), 0.01) for k in range(1, 5)]
    with pytest.raises(
        ValueError, match=r"^fit needs >= 5 rows spanning all five terms, got 4 rows of rank 2;"
    ):
        fit(rows)
    with pytest.raises(ValueError, match="got 0 rows of rank 0"):
        fit([])


def test_an_unknown_timing_profile_lists_the_names() -> None:
    with pytest.raises(ValueError, match=r"^unknown timing profile 'x'; expected one of \["):
        get_timing_profile("x")
    assert get_timing_profile("vllm-2026").step_overhead_s == 0.00055
