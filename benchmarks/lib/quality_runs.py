"""One run of `benchmarks.quality`: a query over a table on a fresh `LlamaCppEngine`, through
`llm_assets.pipeline.run.run_query` (the path `llm-assets run` takes), reduced to what the
quality report needs: per-row answers, parse rate, tokens, hit rate and wall time.

Rows reordered, prompts unchanged (`rows_only`): the pipeline offers no option for it under
the `named` prompt style (`method` moves rows and fields together; `prompt_style: inline` is
the one rows-only mode, and it changes the prompt's text). So the harness builds it from the
written-order plan: a prompt depends only on the row's values and the field order, so the
written-order query (`method=original`) run over the table with its rows permuted into GGR's
submission order sends exactly the written-order prompts, in GGR's row order. GGR's order
comes from the pipeline itself: `run_query(..., send=False)` with `method=ggr` plans the
stage and sends nothing (`rows_only_table`). `same_prompts` checks the prompts row by row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from benchmarks.lib.quality_metrics import parse_rate

ROW = "_row"
INPUT = "_input_id"


@dataclass
class RunRecord:
    """What one run produced: per-row answers (None: not answered) and the run's figures."""

    answers: dict[str, str | None]
    figures: dict
    prompts: dict[str, str]
    """Row key -> the prompt its answer came from."""
    sent_keys: list[str]
    """The first row key of each request, in submission order."""
    cached: dict[str, int]
    """Row key -> the prompt tokens its request reused from the server's cache."""


def prompts_by_key(deduped: pd.DataFrame, plan: pd.DataFrame, key: str) -> dict[str, str]:
    """Row key -> the prompt sent for it (rows that reached the stage)."""
    prompt = dict(zip(plan[INPUT].tolist(), plan["prompt"].tolist(), strict=True))
    live = deduped[deduped[INPUT] >= 0]
    return {str(k): prompt[i] for k, i in zip(live[key], live[INPUT], strict=True) if i in prompt}


def cached_by_key(deduped: pd.DataFrame, outputs: pd.DataFrame, key: str) -> dict[str, int]:
    """Row key -> the cached prompt tokens the server reported for its request."""
    cached = dict(zip(outputs[INPUT].tolist(), outputs["cached_tokens"].tolist(), strict=True))
    live = deduped[deduped[INPUT] >= 0]
    return {str(k): int(cached[i]) for k, i in zip(live[key], live[INPUT], strict=True)}


def submission_keys(deduped: pd.DataFrame, plan: pd.DataFrame, key: str) -> list[str]:
    """The first row key of each request of `plan`, in submission order (`position`)."""
    first = deduped[deduped[INPUT] >= 0].drop_duplicates(INPUT).set_index(INPUT)[key]
    ordered = plan.sort_values("position")[INPUT]
    return [str(first[i]) for i in ordered]


def rows_only_table(table: pd.DataFrame, deduped: pd.DataFrame, plan: pd.DataFrame, key: str):
    """`table`'s rows permuted into the submission order of a planned stage (`deduped`,
    `plan` of `run_query(..., send=False)`): for each request in order, every row of that
    input in table order; rows the stage does not send (skipped) follow in table order.
    Run with `method=original` this sends the written-order prompts in the plan's row order.
    """
    rows_of: dict[int, list] = {}
    for k, i in zip(deduped[key], deduped[INPUT], strict=True):
        if i >= 0:
            rows_of.setdefault(int(i), []).append(k)
    ordered = [k for i in plan.sort_values("position")[INPUT] for k in rows_of[int(i)]]
    placed = set(ordered)
    rest = [k for k in table[key] if k not in placed]
    position = pd.Index(table[key])
    if not position.is_unique:
        raise ValueError(f"column {key!r} must identify each row")
    return table.iloc[position.get_indexer(ordered + rest)].reset_index(drop=True)


def run_once(
    query,
    table_name: str,
    table: pd.DataFrame,
    options,
    make_engine: Callable[[], object],
    key: str,
    column: str,
    before: Callable[[object], pd.DataFrame] | None = None,
) -> RunRecord:
    """`query` over `table` on a fresh engine from `make_engine` (started before the clock,
    closed after): per-row answers of `column` keyed by `key`, and the run's figures.
    `before(engine)` may replace the table (`rows_only`) once the engine is up."""
    from llm_assets.pipeline.run import run_query

    engine = make_engine()
    try:
        started = time.perf_counter()
        engine.max_model_len  # noqa: B018 - starts llama-server outside the timed run
        server_start_s = time.perf_counter() - started
        if before is not None:
            table = before(engine)
        started = time.perf_counter()
        run = run_query(query, {table_name: table}, options, engine)
        wall_s = time.perf_counter() - started
    finally:
        engine.close()
    return record(run, key, column, options, wall_s, server_start_s)


def record(run, key: str, column: str, options, wall_s: float, server_start_s: float):
    """A `RunRecord` of a finished `QueryRun` of one LLM stage."""
    (stage,) = run.stages
    result = run.result
    answered = result["status"] == "answered"
    answers = {
        str(k): (str(a) if ok else None)
        for k, a, ok in zip(result[key], result[column], answered, strict=True)
    }
    outputs = stage.outputs
    stats = run.stats
    counts = run.accounting
    figures = {
        "options": options.model_dump(),
        "rows": len(result),
        "answered": int(counts.get("answered", 0)),
        "skipped": int(counts.get("skipped", 0)),
        "failed": int(counts.get("failed", 0)),
        "requests": int(stats.n_requests),
        "prompt_tokens": int(stats.prompt_tokens),
        "cached_tokens": int(stats.cached_tokens),
        "cached_tokens_reported": bool(stats.cached_tokens_reported),
        "output_tokens": int(stats.output_tokens),
        "token_hit_rate": stats.token_hit_rate,
        "wall_s": round(wall_s, 3),
        "engine_time_s": round(float(stats.engine_time_s), 3),
        "server_start_s": round(server_start_s, 3),
        "parse": parse_rate(
            [None if pd.isna(a) else a for a in outputs["answer"]],
            [None if pd.isna(v) else v for v in outputs["violation"]],
        ),
        "field_orders": {
            str(k): int(v) for k, v in stage.plan["field_order"].value_counts().items()
        },
    }
    return RunRecord(
        answers=answers,
        figures=figures,
        prompts=prompts_by_key(stage.deduped, stage.plan, key),
        sent_keys=submission_keys(stage.deduped, stage.plan, key),
        cached=cached_by_key(stage.deduped, outputs, key),
    )


def same_prompts(a: RunRecord, b: RunRecord) -> bool:
    """Whether both runs sent every row the very same prompt."""
    return a.prompts == b.prompts


def planned_order(query, table_name: str, table: pd.DataFrame, options, engine, key: str):
    """(deduped, plan) of the query's one LLM stage as the pipeline plans it, nothing sent."""
    from llm_assets.pipeline.run import run_query

    planned = run_query(query, {table_name: table}, options, engine, send=False)
    (stage,) = planned.stages
    return stage.deduped, stage.plan
