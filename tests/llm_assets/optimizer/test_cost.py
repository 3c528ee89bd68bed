"""Pricing: one dated table, hosted / Anthropic-style / self-hosted costs."""

from __future__ import annotations

import pytest

from llm_assets.optimizer.cost import (
    GPU_USD_PER_HOUR,
    PRICING,
    PRICING_DATE,
    cost_usd,
    self_hosted_usd,
    token_cost_usd,
)


def test_keys_and_date() -> None:
    costs = cost_usd(1000, 0, 10, 1.0)
    assert set(costs) == {f"cost_usd_{n}" for n in PRICING} | {"cost_usd_self_hosted"}
    assert len(PRICING_DATE) == 7 and PRICING_DATE[4] == "-"


def test_hosted_cached_input_is_discounted() -> None:
    p = PRICING["openai_gpt4o_mini"]
    assert token_cost_usd(p, 1_000_000, 0, 0) == pytest.approx(0.15)
    assert token_cost_usd(p, 1_000_000, 1_000_000, 0) == pytest.approx(0.075)
    assert token_cost_usd(p, 0, 0, 1_000_000) == pytest.approx(0.60)


def test_anthropic_cache_writes_cost_more_reads_less() -> None:
    p = PRICING["anthropic_haiku"]
    uncached = token_cost_usd(p, 1_000_000, 0, 0)
    cached = token_cost_usd(p, 1_000_000, 1_000_000, 0)
    assert uncached == pytest.approx(1.00) and uncached > p.input_per_mtok / 1e6 * 1e6
    assert cached == pytest.approx(0.08)


def test_self_hosted_scales_with_time_and_gpus() -> None:
    assert self_hosted_usd(3600, "L4") == pytest.approx(GPU_USD_PER_HOUR["L4"])
    assert self_hosted_usd(1800, "A100-40GB", 4) == pytest.approx(2 * GPU_USD_PER_HOUR["A100-40GB"])
    assert cost_usd(0, 0, 0, 0.0)["cost_usd_self_hosted"] == 0.0


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"unknown gpu 'T4'.*A100-40GB.*L4"):
        cost_usd(1, 0, 1, 1.0, gpu="T4")
    with pytest.raises(ValueError, match="cached_tokens=5 exceeds prompt_tokens=3"):
        cost_usd(3, 5, 0, 1.0)
    with pytest.raises(ValueError, match="n_gpus"):
        self_hosted_usd(1.0, "L4", 0)


def test_cached_tokens_lower_hosted_cost() -> None:
    cold = cost_usd(10_000, 0, 100, 1.0)
    warm = cost_usd(10_000, 8_000, 100, 1.0)
    for name in PRICING:
        assert warm[f"cost_usd_{name}"] < cold[f"cost_usd_{name}"]
