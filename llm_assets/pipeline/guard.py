"""The field-order guard (DESIGN.md section 10): reordering rows changes no prompt, moving
fields does; before a stage whose fields the plan moves, answer a small sample both ways and
keep the moved order only when the answers agree.

`guarded_plan(...)` plans the stage as usual (`plan_stage`) and, when
`options.field_order_guard` is a threshold:

1. plans it again with the fields in the written order (`reorder_fields=False`: the same
   rows, dedup and row reordering, prompts as written);
2. if no prompt's field order differs, or the engine is the simulated one (its answers are
   placeholders: agreement would mean nothing), it sends nothing and says why;
3. otherwise picks `options.guard_sample` of the distinct inputs whose field order moved
   (an input whose prompt is the same both ways would agree by construction), seeded and
   stratified along the planned schedule (one from each of that many equal slices, so every
   part of the schedule, every large prefix group, is represented), sends each in both orders
   in one engine run,
   and compares the answers (stripped) of the inputs answered both ways;
4. keeps the planned order when the Wilson 95% lower bound of that agreement is at least the
   threshold, else falls back to the written order (rows still reordered).

Invariants: the guard changes which of two plans of the same rows is returned, never the rows,
their dedup or which are sent; the sample's answers in the kept order are returned by request
key (`answered`) and reused by the stage's send, so they are never paid for twice; the
decision, sample size, agreement and the sample's cost (tokens, seconds, and its share of the
stage's prompt characters) are in `FieldOrderGuard.report()`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import call_max_tokens, plan_stage, relquery_id, sendable
from llm_assets.pipeline.quality import wilson_interval
from llm_assets.pipeline.rows import INPUT
from llm_assets.pipeline.send import requests_from_plan
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine, Response
from resources.runner import request_keys, run_requests

__all__ = ["FieldOrderGuard", "guarded_plan", "stratified_sample"]

SEED = 0


@dataclass(frozen=True)
class FieldOrderGuard:
    """What the guard decided for one stage and what its sample cost."""

    verdict: str
    """off | fields not moved | cannot judge | kept planned order | kept written order"""
    reason: str
    threshold: float | None = None
    sample_inputs: int = 0
    compared: int = 0
    """Sampled inputs answered in both orders (failed requests are left out)."""
    agreement: float | None = None
    agreement_low: float | None = None
    """Wilson 95% lower bound of `agreement`."""
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    share_of_stage_chars: float = 0.0
    """The sample's prompt characters / the stage's (the order kept is reused: the other
    order's half is the guard's extra cost)."""

    def report(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def stratified_sample(positions: np.ndarray, n: int, seed: int = SEED) -> np.ndarray:
    """`n` of `positions` (all of them when there are no more): one seeded pick in each of
    `n` equal consecutive slices, so the sample follows the schedule.

    >>> stratified_sample(np.arange(100), 4).tolist()
    [21, 40, 62, 81]
    """
    if len(positions) <= n:
        return positions
    edges = np.linspace(0, len(positions), n + 1).astype(int)
    rng = np.random.default_rng(seed)
    return positions[[rng.integers(lo, hi) for lo, hi in zip(edges, edges[1:], strict=False)]]


def _field_orders(plan: pd.DataFrame) -> pd.Series:
    return plan.set_index(INPUT)["field_order"]


def guarded_plan(
    query: LLMQuery,
    call: LLMCall,
    rows: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    relquery: str | None = None,
    cache=None,
) -> tuple[pd.DataFrame, pd.DataFrame, FieldOrderGuard, dict[str, Response]]:
    """(deduped, request_plan, the guard's decision, the sample's answers in the kept order by
    request key); see the module docstring."""
    relquery = relquery or relquery_id(query, call)
    deduped, planned = plan_stage(query, call, rows, options, engine, relquery)
    threshold = options.field_order_guard
    if threshold is None:
        return deduped, planned, FieldOrderGuard("off", "field_order_guard is not set"), {}
    written_options = options.model_copy(update={"reorder_fields": False})
    written_deduped, written = plan_stage(query, call, rows, written_options, engine, relquery)
    kept = sendable(planned)
    moved = _field_orders(planned.iloc[kept]) != _field_orders(written).reindex(
        planned[INPUT].iloc[kept]
    )
    stage_chars = int(planned["prompt"].iloc[kept].str.len().sum())
    moved_inputs = planned[INPUT].iloc[kept].to_numpy()[moved.to_numpy()]
    n = min(options.guard_sample, len(moved_inputs))
    if not n:
        return (
            deduped,
            planned,
            FieldOrderGuard(
                "fields not moved", "every prompt keeps the written field order", threshold
            ),
            {},
        )
    if engine.name == "sim":
        sample_chars = 2 * n * (stage_chars / max(len(kept), 1))
        return (
            deduped,
            planned,
            FieldOrderGuard(
                "cannot judge",
                "the simulated engine answers placeholders; on a real engine the guard would send "
                f"{n} inputs in both field orders",
                threshold,
                sample_inputs=n,
                requests=2 * n,
                share_of_stage_chars=sample_chars / stage_chars if stage_chars else 0.0,
            ),
            {},
        )
    sample = stratified_sample(moved_inputs, options.guard_sample)
    budget = call_max_tokens(call, options)
    sides = []  # (input ids, requests) in the written, then the planned field order
    for plan, tag in ((written, "written"), (planned, "planned")):
        picked = plan[plan[INPUT].isin(sample) & plan["error"].isna()]
        requests = requests_from_plan(picked, call, budget)
        sides.append((picked[INPUT].tolist(), [replace(r, id=f"{r.id}:{tag}") for r in requests]))
    requests = sides[0][1] + sides[1][1]
    started = time.perf_counter()
    outcome = run_requests(engine, f"{relquery}:guard", requests, cache=cache)
    seconds = time.perf_counter() - started
    split = len(sides[0][1])
    responses = (outcome.responses[:split], outcome.responses[split:])
    answers = [
        {i: r.text.strip() for i, r in zip(ids, side, strict=True) if r.error is None}
        for (ids, _), side in zip(sides, responses, strict=True)
    ]
    common = answers[0].keys() & answers[1].keys()
    agree = sum(answers[0][i] == answers[1][i] for i in common)
    interval = wilson_interval(agree, len(common))
    low = interval[0] if interval else None
    keep_planned = low is not None and low >= threshold
    verdict = "kept planned order" if keep_planned else "kept written order"
    reason = (
        f"{agree} of {len(common)} sampled inputs got the same answer in both field orders "
        f"(95% lower bound {low:.3f} {'>=' if keep_planned else '<'} {threshold})"
        if low is not None
        else "no sampled input was answered in both orders"
    )
    sample_chars = sum(len(r.prompt) for r in requests)
    guard = FieldOrderGuard(
        verdict,
        reason,
        threshold,
        sample_inputs=len(sample),
        compared=len(common),
        agreement=agree / len(common) if common else None,
        agreement_low=low,
        requests=len(requests),
        prompt_tokens=outcome.stats.prompt_tokens + outcome.reused_prompt_tokens,
        cached_tokens=outcome.stats.cached_tokens + outcome.reused_cached_tokens,
        output_tokens=outcome.stats.output_tokens,
        seconds=seconds,
        share_of_stage_chars=sample_chars / stage_chars if stage_chars else 0.0,
    )
    side = 1 if keep_planned else 0
    ok = [(q, r) for q, r in zip(sides[side][1], responses[side], strict=True) if r.error is None]
    answered = dict(zip(request_keys(engine, [q for q, _ in ok]), (r for _, r in ok), strict=True))
    if keep_planned:
        return deduped, planned, guard, answered
    return written_deduped, written, guard, answered
