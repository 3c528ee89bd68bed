"""What a run costs (`engine_costs`, for `run`, `plan` and MLflow alike) and `plan`'s price of
one LLM stage: its planned requests simulated on the pricing engine.

Up to `EXACT_REQUESTS` sendable requests, every one is simulated in submission order, as `run`
sends them: the figures are the run's own. Beyond that, a step-by-step simulation of every
request costs minutes (about 100 us of Python per request), so the stage is priced from
`WINDOWS` windows of `WINDOW` consecutive requests spread evenly over the submission order
(systematic sampling, seeded offset) and scaled to the whole stage:

- each window is simulated with the `LEAD` requests before it and the `TRAIL` after it, on one
  engine whose prefix cache carries over from window to window, so a window starts with a full
  batch and a warm cache and ends under load, as in the middle of the real run; only the
  window's own requests are counted;
- tokens (prompt, cached, output) and errors are the windows' per-request means times the
  stage's request count;
- engine time is the time the window's requests took to complete in steady state (from the
  `LEAD`-th completion to the (`LEAD` + `WINDOW`)-th, `completion_time`), per request, times
  the request count; the run's final drain (a few steps) is not in it.

`PriceSample` reports what was simulated and each figure's relative standard error over the
windows (as if they were a random sample: systematic windows over a sorted order usually do
better). The request count is exact either way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_assets.optimizer.cost import PRICING, cost_usd, token_cost_usd
from llm_assets.pipeline.plan import sendable
from llm_assets.pipeline.send import requests_from_plan
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine, Response, RunStats

EXACT_REQUESTS = 200_000
"""A stage with at most this many sendable requests is simulated whole."""
WINDOWS = 24
WINDOW = 8192
"""24 windows of 8,192 requests: 196,608 counted, ~245,000 simulated with their leads and
trails, whatever the stage's size."""
LEAD = 1024
TRAIL = 1024
"""Requests simulated before / after each window and not counted: more than any engine's
batch (vLLM's `max_num_seqs` defaults to 256-1,024), so the window starts and ends at full
load."""

FIGURES = ("prompt_tokens", "cached_tokens", "output_tokens", "engine_time_s")


@dataclass(frozen=True)
class PriceSample:
    """How a sampled stage was priced: `requests` counted in `windows` windows out of the
    stage's `of`, `simulated` in all (leads and trails included), and each figure's relative
    standard error over the windows."""

    requests: int
    of: int
    windows: int
    simulated: int
    relative_se: dict[str, float]

    def report(self) -> dict:
        return {
            "requests": self.requests,
            "of": self.of,
            "windows": self.windows,
            "simulated": self.simulated,
            "relative_se": {k: round(v, 6) for k, v in self.relative_se.items()},
        }


def window_starts(n: int, windows: int, window: int, seed: int) -> list[int]:
    """`windows` start positions of `window`-request windows over `n` requests, one per equal
    stretch of the order, all at the same seeded offset within their stretch; the windows never
    overlap (callers sample only when `n >= windows * window`)."""
    stretch = n / windows
    offset = np.random.default_rng(seed).uniform(0, stretch - window)
    return [int(i * stretch + offset) for i in range(windows)]


def completion_time(finishes: Sequence[float], count: float) -> float:
    """When the `count`-th request completed, with requests finishing at `finishes` (from the
    run's start), reading the requests finishing at one instant (a batch that decodes in
    lockstep) as completing evenly since the previous instant: a window's time then does not
    jump by a whole batch with where its ends fall."""
    times, ends = np.unique(np.asarray(finishes, dtype=float), return_counts=True)
    return float(np.interp(count, np.concatenate(([0], np.cumsum(ends))), np.r_[0.0, times]))


def _window_figures(responses: Sequence[Response], lead: int, window: int) -> dict[str, float]:
    """The counted figures of one simulated window (`lead` uncounted responses first)."""
    own = responses[lead : lead + window]
    ok = [r for r in own if r.error is None]
    finishes = [r.finish_s for r in responses if r.error is None]
    begin = completion_time(finishes, lead)
    end = completion_time(finishes, lead + len(ok))
    return {
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "cached_tokens": sum(r.cached_tokens for r in ok),
        "output_tokens": sum(r.output_tokens for r in ok),
        "engine_time_s": end - begin,
        "errors": len(own) - len(ok),
    }


def price_stage(
    engine: LLMEngine,
    relquery: str,
    plan: pd.DataFrame,
    call: LLMCall,
    max_tokens: int,
    *,
    exact: int = EXACT_REQUESTS,
    windows: int = WINDOWS,
    window: int = WINDOW,
    lead: int = LEAD,
    trail: int = TRAIL,
    seed: int = 0,
) -> tuple[RunStats, PriceSample | None]:
    """(stats, sample) of one stage's `plan` (`run_plan`'s frame) priced on `engine` (see the
    module docstring): the whole stage when it has at most `exact` sendable requests (sample
    None), else `windows` windows of `window` requests, each simulated after `lead` and
    before `trail` uncounted ones."""
    sent = sendable(plan)
    n = len(sent)
    if n <= max(exact, windows * window):
        return engine.run(relquery, requests_from_plan(plan, call, max_tokens)).stats, None
    wall0 = time.perf_counter()
    per_window, simulated = [], 0
    for start in window_starts(n, windows, window, seed):
        before = min(lead, start)
        part = plan.iloc[sent[start - before : min(start + window + trail, n)]]
        result = engine.run(relquery, requests_from_plan(part, call, max_tokens))
        per_window.append(_window_figures(result.responses, before, window))
        simulated += len(part)
    counted = windows * window
    totals = {k: sum(w[k] for w in per_window) for k in (*FIGURES, "errors")}
    scale = n / counted
    stats = RunStats(
        engine=engine.name,
        model=engine.model,
        hardware=engine.hardware,
        n_requests=n,
        prompt_tokens=round(totals["prompt_tokens"] * scale),
        cached_tokens=round(totals["cached_tokens"] * scale),
        output_tokens=round(totals["output_tokens"] * scale),
        engine_time_s=totals["engine_time_s"] * scale,
        wall_time_s=time.perf_counter() - wall0,
        errors=round(totals["errors"] * scale),
    )
    relative_se = {}
    for k in FIGURES:
        values = np.array([w[k] for w in per_window], dtype=float)
        mean = values.mean()
        se = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else 0.0
        relative_se[k] = float(se / mean) if mean else 0.0
    return stats, PriceSample(counted, n, windows, simulated, relative_se)


def engine_costs(engine: LLMEngine, stats: RunStats) -> dict[str, float]:
    """`cost_usd_<pricing>` per hosted pricing, plus GPU rental when the engine rents GPUs."""
    rental = engine.gpu_rental
    if rental is not None:
        return cost_usd(
            stats.prompt_tokens,
            stats.cached_tokens,
            stats.output_tokens,
            stats.engine_time_s,
            gpu=rental.gpu,
            n_gpus=rental.num_gpus,
        )
    return {
        f"cost_usd_{name}": token_cost_usd(
            p, stats.prompt_tokens, stats.cached_tokens, stats.output_tokens
        )
        for name, p in PRICING.items()
    }
