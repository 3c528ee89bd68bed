"""`plan`'s prediction of every LLM stage of a query, priced on the simulated engine.

The first stage runs on its real input (the rows pushdown and retrieval leave). A later stage
runs on the rows the earlier LLM filters let through, which only their answers decide: a
seeded sample of the first stage's input (at most `PLAN_SAMPLE_ROWS` rows) runs through the
earlier stages on a separate engine, and the share of the sample reaching each stage is the
predicted share of the table. That many rows are then drawn, seeded, from the full input (whole
groups of rows with equal earlier-stage inputs, as an engine answers duplicates alike, and
only rows no earlier LLM filter skips for a null; capped by a pushed-down LIMIT), and planned
by the same `plan_stage` the run uses: dedup, reorder and prompt lengths are those of
representative rows. Each stage's
planned requests are then sent to the pricing engine in run order, as `run` sends them (a
stage of more than `pricing.EXACT_REQUESTS` requests: windows of them, scaled;
`llm_assets.pipeline.pricing`).

On the sim an answer is a pure function of the prompt (`resources.sim.answers`), so the sample
measures the selectivity `run` will meet there, up to sampling error; a sample covering the
whole input is the run itself and the prediction is exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from llm_assets.optimizer.passes import RULES, dedup
from llm_assets.pipeline.filter_order import FilterOrder
from llm_assets.pipeline.guard import FieldOrderGuard, guarded_plan
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import (
    call_max_tokens,
    placeholder_columns,
    plan_stage,
    relquery_id,
)
from llm_assets.pipeline.pricing import PriceSample, price_stage
from llm_assets.pipeline.rows import INPUT, limit_rows, stage_input
from llm_assets.pipeline.run import prepare
from llm_assets.pipeline.send import send_stage
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine, RunStats

PLAN_SAMPLE_ROWS = 2048
"""Rows of the first stage's input `plan` runs through the earlier LLM stages to predict how
many reach each later one. Far more than the filter order's 32 (`filter_order.SAMPLE_ROWS`,
which a real engine answers at a price): `plan` always samples on the simulated engine, where
a request costs only simulated time, and the target is +-10%. A share p measured on n rows has
a relative standard error sqrt((1 - p) / (p n)): for p = 1/4 (two filters keeping half each)
17% on 32 rows, 7.7% on 512 (measured 9% over 8 seeds), 3.8% on 2,048, so +-10% is 2.6
standard errors."""

_SKIPS = RULES[: RULES.index(dedup)]
"""The optimizer rules before dedup: those that decide which rows a stage skips (a null)."""


@dataclass
class StagePrediction:
    """One LLM stage as `plan` predicts it: the rows reaching it, their plan and its price."""

    call: LLMCall
    rows: int
    """Rows predicted to reach the stage (the real count for the first stage)."""
    share: float
    """Share of the rows no earlier stage skips that the sample let through the earlier
    stages (1.0 for the first stage)."""
    deduped: pd.DataFrame
    plan: pd.DataFrame
    stats: RunStats
    priced_on: PriceSample | None = None
    """The windows a large stage was priced from (`pricing.price_stage`); None: every
    request was simulated."""
    guard: FieldOrderGuard | None = None
    """What the field-order guard would do (`pipeline.guard`; the sim cannot judge)."""

    @property
    def rows_to_llm(self) -> int:
        """Rows whose inputs are planned to be sent (not skipped for a null)."""
        return int((self.deduped[INPUT] >= 0).sum())


@dataclass
class QueryPlan:
    """Every LLM stage of a query, predicted and priced (`plan_query`)."""

    base: pd.DataFrame
    filter_order: FilterOrder | None = None
    stages: list[StagePrediction] = field(default_factory=list)
    sample_rows: int = 0
    sample_requests: int = 0

    @property
    def stats(self) -> RunStats | None:
        """Engine totals over every LLM stage."""
        return RunStats.total(s.stats for s in self.stages)


def plan_query(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    options: QueryOptions,
    engine: LLMEngine,
    *,
    sample_engine: LLMEngine | None = None,
    sample_rows: int = PLAN_SAMPLE_ROWS,
    seed: int = 0,
    release_tables: bool = False,
) -> QueryPlan:
    """Predict and price every LLM stage of `query` in run order (see the module docstring).
    `engine` prices the stages (a fresh simulated engine: it also answers the filter order's
    sample, as in a run); `sample_engine` (default `engine`) answers the reach sample. With
    `release_tables` (the caller's last use of `tables`, a dict), `tables` is emptied once the
    joined rows are built, so the loaded tables are freed before the stages are planned."""
    query, base, order = prepare(query, tables, options, engine)
    if release_tables:
        tables.clear()
        pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed memory
    out = QueryPlan(base=base, filter_order=order)
    calls = list(query.llm_calls)
    if not calls:
        return out
    first = stage_input(base, query, [], limit=options.pushdown)
    inputs: list[tuple[pd.DataFrame, float]] = [(first, 1.0)]
    if len(calls) > 1:
        sampler = sample_engine or engine
        inputs += later_inputs(query, calls, first, options, sampler, out, sample_rows, seed)
    for call, (rows, share) in zip(calls, inputs, strict=True):
        relquery = relquery_id(query, call)
        # on the simulated engine the guard sends nothing: it says what it would sample
        deduped, plan, guard, _ = guarded_plan(query, call, rows, options, engine, relquery)
        max_tokens = call_max_tokens(call, options)
        stats, priced_on = price_stage(engine, relquery, plan, call, max_tokens, seed=seed)
        out.stages.append(
            StagePrediction(call, len(rows), share, deduped, plan, stats, priced_on, guard)
        )
    return out


def later_inputs(
    query: LLMQuery,
    calls: Sequence[LLMCall],
    first: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    out: QueryPlan,
    sample_rows: int,
    seed: int,
) -> list[tuple[pd.DataFrame, float]]:
    """(predicted input rows, share) of each LLM stage after the first: the seeded sample of
    `first` is sent through `calls[:-1]` on `engine` (its size and requests noted on `out`)."""
    whole = len(first) <= sample_rows
    sample = first if whole else first.sample(sample_rows, random_state=seed)
    out.sample_rows = len(sample)
    previous, result = [], []
    eligible_sample, eligible = sample, first
    for k, call in enumerate(calls[:-1]):
        relquery = f"{relquery_id(query, call)}:plan-sample"
        rows = stage_input(sample, query, previous)
        deduped, plan = plan_stage(query, call, rows, options, engine, relquery)
        outputs, sent = send_stage(engine, relquery, plan, call, options)
        out.sample_requests += sent.sent
        previous.append((call, deduped, outputs))
        reached = stage_input(sample, query, previous)
        filters = bool(query.filters_for(call.name))  # a call that filters nothing drops none
        if filters:
            eligible_sample = answerable(query, call, eligible_sample, options, engine)
        share = len(reached) / len(eligible_sample) if len(eligible_sample) else 0.0
        if whole:
            result.append((cap(query, calls[: k + 1], reached, options), share))
            continue
        if filters:
            eligible = answerable(query, call, eligible, options, engine)
        rows = draw(query, calls[: k + 1], eligible, share, seed)
        result.append((cap(query, calls[: k + 1], rows, options), share))
    return result


def cap(
    query: LLMQuery, earlier: Sequence[LLMCall], rows: pd.DataFrame, options: QueryOptions
) -> pd.DataFrame:
    """The predicted `rows` of a stage after `earlier`, as many as the query's LIMIT lets
    reach it (`rows.limit_rows`, when every LLM filter is among `earlier`)."""
    done = {c.name for c in earlier}
    if options.pushdown and {f.call_name for f in query.llm_filters} <= done:
        return limit_rows(rows, query).reset_index(drop=True)
    return rows


def answerable(
    query: LLMQuery, call: LLMCall, rows: pd.DataFrame, options: QueryOptions, engine: LLMEngine
) -> pd.DataFrame:
    """The `rows` `call` does not skip for a null (known without sending anything). Applied
    call after call, it gives the rows none of the earlier calls skips."""
    deduped, _ = plan_stage(query, call, rows, options, engine, rules=_SKIPS)
    return rows[deduped["_skip"].isna().to_numpy()]


def draw(
    query: LLMQuery,
    earlier: Sequence[LLMCall],
    eligible: pd.DataFrame,
    share: float,
    seed: int,
) -> pd.DataFrame:
    """About `share` of the `eligible` rows (those no `earlier` call skips: `answerable`),
    drawn seeded as whole groups of rows whose `earlier` inputs are equal (an engine answers
    equal prompts alike, so a filter keeps or drops such a group together)."""
    eligible = eligible.reset_index(drop=True)
    target = round(share * len(eligible))
    if target == 0 or eligible.empty:
        return eligible.iloc[:0]
    keys = list(
        dict.fromkeys(
            c for call in earlier for cs in placeholder_columns(query, call, eligible).values()
            for c in cs
        )
    )  # fmt: skip
    groups = eligible.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    order = np.random.default_rng(seed).permutation(groups.max() + 1)
    sizes = np.bincount(groups)[order]
    taken = order[: int(np.searchsorted(np.cumsum(sizes), target)) + 1]
    return eligible[np.isin(groups, taken)].reset_index(drop=True)
