"""`plan`'s price of a stage (`llm_assets.pipeline.pricing`): exact up to a size, windows of
consecutive requests scaled beyond it, against the full simulation of the same stage."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.benchmark_queries import compile_query
from llm_assets.pipeline.pricing import PriceSample, completion_time, price_stage, window_starts
from llm_assets.pipeline.send import requests_from_plan
from resources.sim.engine import SimulatedEngine

CALL = compile_query("q1", "movies").llm_calls[0]


def stage_plan(n: int, seed: int = 0) -> pd.DataFrame:
    """A planned stage of `n` requests in a GGR-like order: runs of prompts sharing a long
    group prefix (group sizes 1-60), each row with its own tail; a few rows failed in
    planning (never sent)."""
    rng = np.random.default_rng(seed)
    prompts, group = [], 0
    while len(prompts) < n:
        head = f"Is this review of product {group:05d} positive? " + "context " * (group % 40)
        for _ in range(int(rng.integers(1, 61))):
            prompts.append(head + f"review {len(prompts)}: " + "word " * int(rng.integers(5, 60)))
        group += 1
    prompts = prompts[:n]
    errors = [None] * n
    for k in rng.choice(n, n // 500, replace=False):
        errors[k] = "prompt has too many tokens"
    return pd.DataFrame(
        {"request_id": [f"q:{i}" for i in range(n)], "prompt": prompts, "error": errors}
    )


def sim() -> SimulatedEngine:
    return SimulatedEngine(model="llama-3-8b", gpu="L4", max_num_seqs=32)


def test_a_stage_up_to_the_exact_size_is_simulated_whole():
    plan = stage_plan(900)
    stats, sample = price_stage(sim(), "q", plan, CALL, 8, exact=1000)
    whole = sim().run("q", requests_from_plan(plan, CALL, 8)).stats
    assert sample is None
    assert replace(stats, wall_time_s=0.0) == replace(whole, wall_time_s=0.0)


def test_windows_scaled_to_the_stage_agree_with_simulating_every_request():
    """30 windows of 100 of 12,000 requests (25%): each figure within three of its reported
    standard errors of simulating all 12,000, the request count exactly. The windows are no
    multiple of the engine's 32-request batch, which here decodes in lockstep: engine time
    counted in whole completions (a window's 100 requests completing over 4 batch times)
    was 28% high; read as `completion_time` reads it, within 2% (measured: 0.01%)."""
    plan = stage_plan(12_000)
    kwargs = {"exact": 0, "windows": 30, "window": 100, "lead": 64, "trail": 64}
    stats, sample = price_stage(sim(), "q", plan, CALL, 8, **kwargs)
    whole = sim().run("q", requests_from_plan(plan, CALL, 8)).stats
    assert isinstance(sample, PriceSample)
    assert (sample.requests, sample.of, sample.windows) == (30 * 100, whole.n_requests, 30)
    assert sample.simulated == 30 * (64 + 100 + 64)
    assert stats.n_requests == whole.n_requests
    for figure, se in sample.relative_se.items():
        ratio = getattr(stats, figure) / getattr(whole, figure)
        assert abs(ratio - 1) <= max(3 * se, 0.005), (figure, ratio, se)
    assert stats.engine_time_s == pytest.approx(whole.engine_time_s, rel=0.02)


def test_a_batch_completing_at_one_instant_completes_evenly_over_its_step():
    finishes = [1.0] * 4 + [3.0] * 4  # two batches of 4 requests in lockstep
    assert completion_time(finishes, 0) == 0.0
    assert completion_time(finishes, 2) == pytest.approx(0.5)
    assert completion_time(finishes, 4) == pytest.approx(1.0)
    assert completion_time(finishes, 6) == pytest.approx(2.0)
    assert completion_time(finishes, 8) == pytest.approx(3.0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda windows: st.tuples(
            st.just(windows),
            st.integers(1, 50),
            st.integers(0, 5000),
            st.integers(0, 2**32 - 1),
        )
    )
)
def test_windows_are_one_per_stretch_and_never_overlap(case):
    """Each window starts in its own stretch (n / windows requests) and ends before the
    next starts, the last by the end of the stage."""
    windows, window, extra, seed = case
    n = windows * window + extra
    starts = window_starts(n, windows, window, seed)
    assert len(starts) == windows
    stretch = n / windows
    for i, start in enumerate(starts):
        assert int(i * stretch) <= start < (i + 1) * stretch and start + window <= n
    assert all(a + window <= b for a, b in zip(starts, starts[1:], strict=False))


def test_plan_says_which_stage_it_priced_from_windows():
    from llm_assets.cli.reports import sampled_lines

    sample = PriceSample(196_608, 692_838, 24, 245_760, {"cached_tokens": 0.0005, "x": 0.0})
    sample.relative_se["engine_time_s"] = 0.0007
    stages = [{"llm_call": "llm_1", "priced_on": None}, {"llm_call": "llm_2",
              "priced_on": sample.report()}]  # fmt: skip
    lines = sampled_lines({"ggr": {"stages": stages}})
    assert lines == [
        "",
        "ggr, llm_2: tokens and engine s estimated from 196,608 of its 692,838 requests "
        "(24 windows of consecutive requests; standard error: cached tokens 0.1%, engine s "
        "0.1%)",
    ]
    assert sampled_lines({"ggr": {"stages": stages[:1]}}) == []
