"""One query end to end, in process: the path `llm-assets run` / `plan` and the tests take.

The Dagster assets call the same stage functions one asset at a time (`llm_assets.assets`),
so for the same tables, options and engine both paths send the same prompts and report the
same tokens (a test holds them to it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from llm_assets.pipeline.filter_order import FilterOrder, estimate_filter_order
from llm_assets.pipeline.filtering import run_filtered
from llm_assets.pipeline.guard import FieldOrderGuard, guarded_plan
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import plan_stage, relquery_id
from llm_assets.pipeline.results import accounting, check_answer, run_answer, run_result
from llm_assets.pipeline.retrieval import retrieve
from llm_assets.pipeline.rows import stage_input
from llm_assets.pipeline.send import Progress, send_stage
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine, RunStats


@dataclass
class StageRun:
    """One LLM call's tables and engine totals."""

    call: LLMCall
    deduped: pd.DataFrame
    plan: pd.DataFrame
    outputs: pd.DataFrame
    stats: RunStats
    sent: int
    cache_hits: int
    guard: FieldOrderGuard | None = None
    """The field-order guard's decision (`pipeline.guard`)."""


@dataclass
class QueryRun:
    """Everything one run produced: every row's status in `result`, the output in `answer`."""

    base: pd.DataFrame
    """Every row of the join (with the retrieved fields when the query retrieves)."""
    filter_order: FilterOrder | None = None
    stages: list[StageRun] = field(default_factory=list)
    result: pd.DataFrame | None = None
    answer: pd.DataFrame | None = None

    @property
    def accounting(self) -> dict[str, int]:
        return accounting(self.result)

    @property
    def stats(self) -> RunStats | None:
        """Engine totals over every LLM stage."""
        return RunStats.total(s.stats for s in self.stages)


def run_query(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    options: QueryOptions,
    engine: LLMEngine,
    *,
    send: bool = True,
    cache=None,
    progress: Callable[[str], Progress] | None = None,
    label: str | None = None,
) -> QueryRun:
    """Run every stage of `query` over `tables` on `engine`. With `send=False` only the first
    LLM stage is planned and nothing is sent but the filter order's sample (`plan_query`
    predicts every stage). A predicate that cannot run on the tables' types
    (`typecheck.check_predicates`) or any other DuckDB error of the pre-LLM SQL is a one-line
    ValueError, raised before anything is sent; so is a `label` column (each row's expected
    answer, carried as `quality.LABEL`, never sent) that no source has."""
    query, base, order = prepare(query, tables, options, engine, label)
    run = QueryRun(base=base, filter_order=order)
    if not send and query.llm_calls:
        call = query.llm_calls[0]
        rows = stage_input(base, query, [], limit=options.pushdown)
        deduped, plan = plan_stage(query, call, rows, options, engine, relquery_id(query, call))
        run.stages.append(StageRun(call, deduped, plan, pd.DataFrame(), None, 0, 0))
        return run
    run.stages = send_stages(query, base, options, engine, cache, progress)
    previous = [(s.call, s.deduped, s.outputs) for s in run.stages]
    run.result = run_result(base, query, previous, options.pushdown)
    run.answer = run_answer(run.result, query, tables)
    return run


def prepare(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    options: QueryOptions,
    engine: LLMEngine,
    label: str | None = None,
) -> tuple[LLMQuery, pd.DataFrame, FilterOrder | None]:
    """Everything before the first LLM stage: (the query with its LLM filters in run order,
    every row of the join with `_skip`, any retrieved fields and, with a `label` column, each
    row's label (`quality.with_labels`), the filter order or None). A predicate that cannot
    run on the tables' types, another DuckDB error of the pre-LLM SQL or a label column no
    source has is a one-line ValueError, raised before anything is sent."""
    from llm_assets.pipeline.quality import with_labels
    from llm_assets.pipeline.typecheck import check_predicates
    from llm_assets.planning import in_order

    check_predicates(query, tables)  # one line, before anything is sent
    filtered = run_filtered(
        query,
        tables,
        options.pushdown,
        options.max_pairs,
        options.retriever,
        source_rows=label is not None or bool(query.star_aliases),
    )
    if label is not None:
        filtered = with_labels(query, tables, filtered, label)
    base = retrieve(query, tables, filtered, options.retriever) if query.retrievals else filtered
    check_answer(query, base, tables)  # the SQL after the LLM binds: one line, nothing sent
    order = (
        estimate_filter_order(query, base, options, engine) if options.order_llm_filters else None
    )
    if order is not None:
        query = in_order(query, order.chosen)
    return query, base, order


def send_stages(
    query: LLMQuery,
    base: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    cache=None,
    progress: Callable[[str], Progress] | None = None,
) -> list[StageRun]:
    """Plan and send every LLM stage of `query` in order over `base`, each on the rows the
    earlier ones let through; one `StageRun` per stage."""
    stages: list[StageRun] = []
    previous: list = []
    for call in query.llm_calls:
        rows = stage_input(base, query, previous, limit=options.pushdown)
        relquery = relquery_id(query, call)
        deduped, plan, guard, answered = guarded_plan(
            query, call, rows, options, engine, relquery, cache
        )
        outputs, sent = send_stage(
            engine,
            relquery,
            plan,
            call,
            options,
            cache=cache,
            progress=progress(relquery) if progress else None,
            answered=answered,
        )
        stages.append(
            StageRun(call, deduped, plan, outputs, sent.stats, sent.sent, sent.cache_hits, guard)
        )
        previous.append((call, deduped, outputs))
    return stages
