"""PEM pieces (relserve.txt Eq. 6-11, Algorithm 1): predictors, decomposition, estimates."""

from __future__ import annotations

import random

import pytest

from resources.sim import SimulatedEngine
from resources.sim.cost_model import BatchShape
from resources.sim.pem import (
    LinearPredictors,
    batch_decompose,
    cache_miss_ratio,
    pem,
    pem_of,
    static_priority,
)

PRED = LinearPredictors(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02)


def test_predictors_fit_the_cost_model_closely() -> None:
    coef = SimulatedEngine("A100-40GB", "opt-13b").coefficients
    pred = LinearPredictors.fit(coef)
    for utok in (200, 1000, 2000):
        chunks = [(200, 0)] * (utok // 200)
        assert pred.prefill(utok) == pytest.approx(coef.time(BatchShape(prefill=chunks)), rel=0.05)
    for n in (1, 64, 200):
        assert pred.decode(n) == pytest.approx(coef.time(BatchShape(decode=[288] * n)), rel=1e-6)


def test_decomposition_respects_the_three_limits() -> None:
    # mnbt 250: two 100-token prompts per prefill batch; mns 3: a decode group of 3
    dec = batch_decompose(
        [100] * 5, [4] * 5, cap=10_000, max_num_seqs=3, max_num_batched_tokens=250
    )
    assert dec.prefill_tokens == [200, 100, 200]
    assert dec.decode_groups == [[4, 4, 4], [4, 4]]
    # cap 250 tokens on the GPU: flush after two requests, accum restarts
    dec = batch_decompose([100] * 5, [4] * 5, cap=250, max_num_seqs=100, max_num_batched_tokens=1e9)
    assert dec.decode_groups == [[4, 4], [4, 4], [4]]


def test_running_requests_decode_but_do_not_prefill() -> None:
    dec = batch_decompose([0, 0, 50], [3, 7, 10], 1000, 10, 1000)
    assert dec.prefill_tokens == [50] and dec.decode_groups == [[3, 7, 10]]
    # a group costs alpha_d * sum(rem) + beta_d * max(rem): steps run until the longest ends
    assert pem_of(dec, PRED) == pytest.approx(PRED.prefill(50) + 0.002 * 20 + 0.02 * 10)


def test_one_pass_pem_equals_the_decomposition() -> None:
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 40)
        utoks = [rng.choice([0.0, rng.uniform(1, 400)]) for _ in range(n)]
        rems = [rng.randint(1, 100) for _ in range(n)]
        args = (rng.choice([300, 2000, 10**6]), rng.randint(1, 12), rng.choice([256, 2048]))
        expected = pem_of(batch_decompose(utoks, rems, *args), PRED)
        assert pem(utoks, rems, PRED, *args) == pytest.approx(expected)
        # running requests given apart (the updater's form) give the same value
        running = [r for u, r in zip(utoks, rems, strict=True) if u == 0]
        rest = [(u, r) for u, r in zip(utoks, rems, strict=True) if u > 0]
        if len(running) <= args[1] and all(u == 0 for u in utoks[: len(running)]):
            split = pem([u for u, _ in rest], [r for _, r in rest], PRED, *args, decoding=running)
            assert split == pytest.approx(expected)


def test_pem_shrinks_with_progress_and_with_cache_hits() -> None:
    full = pem([200.0] * 10, [50] * 10, PRED, 10_000, 256, 2048)
    half_done = pem([200.0] * 5, [50] * 5, PRED, 10_000, 256, 2048, decoding=[20] * 5)
    cached = pem([60.0] * 10, [50] * 10, PRED, 10_000, 256, 2048)
    assert half_done < full and cached < full
    assert pem([], [], PRED, 1, 1, 1) == 0.0


def test_cache_miss_ratio_eq11() -> None:
    assert cache_miss_ratio([(100, 25), (300, 75)]) == 0.25
    assert cache_miss_ratio([]) == 1.0


def test_static_priority_eq6_7() -> None:
    assert static_priority([100, 200], [5, 5], PRED) == pytest.approx(0.001 * 300 + 0.002 * 10)
    assert static_priority([100, 200], [5, 5], mapping="identity") == 310.0
    with pytest.raises(ValueError, match="'cubic'.*linear.*identity"):
        static_priority([1], [1], PRED, mapping="cubic")
    with pytest.raises(ValueError, match="predictors"):
        static_priority([1], [1], None)
