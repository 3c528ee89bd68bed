"""One query end to end, in process: the path `llm-assets run` / `plan` and the tests take.

The Dagster assets call the same stage functions one asset at a time (`llm_assets.assets`),
so for the same tables, options and engine both paths send the same prompts and report the
same tokens (a test holds them to it).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from llm_assets.pipeline import stages
from llm_assets.pipeline.options import QueryOptions
from llm_assets.query import LLMCall, LLMQuery
from resources.engine import LLMEngine, RunStats

Progress = Callable[[int, int], None]


def context_limit(engine: LLMEngine, options: QueryOptions, max_tokens: int):
    """(prompt token limit or None, token counter): the engine's context window minus the
    output budget `max_tokens`, unless `options.max_prompt_tokens` says otherwise."""
    limit = options.max_prompt_tokens
    if limit is None:
        window = engine.max_model_len
        limit = window - max_tokens if window else None
    return limit, engine.count_tokens


def call_max_tokens(call: LLMCall, options: QueryOptions) -> int:
    """The generation limit of one call: the option when set, else what the SQL implies."""
    return options.max_tokens or call.max_tokens


def plan_stage(
    query: LLMQuery,
    call: LLMCall,
    rows: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    relquery: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(deduped, request_plan) of one LLM call over its input rows."""
    columns = stages.placeholder_columns(query, call, rows)
    fields = [c for cs in columns.values() for c in cs]
    deduped = stages.run_dedup(rows, fields, options.dedup, options.null_policy)
    max_tokens = call_max_tokens(call, options)
    limit, count_tokens = context_limit(engine, options, max_tokens)
    plan = stages.run_plan(
        deduped,
        call,
        fields,
        options.method,
        options.prompt_style,
        relquery,
        options.system_prompt,
        max_prompt_tokens=limit,
        count_tokens=count_tokens,
        context_policy=options.context_policy,
        columns=columns,
    )
    return deduped, plan


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
        return stages.accounting(self.result)

    @property
    def stats(self) -> RunStats | None:
        """Engine totals over every LLM stage."""
        totals = [s.stats for s in self.stages if s.stats is not None]
        return functools.reduce(operator.add, totals) if totals else None


def retrieve(query: LLMQuery, tables: Mapping[str, pa.Table | pd.DataFrame], rows, retriever):
    """`rows` with the k nearest corpus values of each retrieval as columns `name_1..name_k`."""
    import duckdb

    from llm_assets.pipeline.retrieval import build_retriever

    out = rows.copy()
    for retrieval in query.retrievals:
        source = next(s for s in query.sources if s.alias == retrieval.corpus_column.split(".")[0])
        con = stages.locked_connection()
        try:
            con.register("_corpus", stages.as_arrow(tables[source.table]))
            sql = query.corpus_sql(retrieval.name, tables={source.table: "_corpus"})
            corpus = [v for (v,) in con.execute(sql).fetchall()]
        except duckdb.Error as exc:
            raise ValueError(f"retrieval {retrieval.name!r}: {exc}") from exc
        finally:
            con.close()
        index = build_retriever(retriever, corpus)
        column = query.output_names()[retrieval.query_column]
        hits = index.search(out[column].fillna("").tolist(), retrieval.k)
        for j in range(hits.shape[1]):
            out[f"{retrieval.name}_{j + 1}"] = [index.corpus[i] for i in hits[:, j]]
    return out


SAMPLE_ROWS = 32
"""Rows per LLM filter sent first to estimate its selectivity (when a query has several)."""


@dataclass(frozen=True)
class FilterOrder:
    """The LLM filters' written and chosen order, with their estimates (cost in prompt
    tokens per row reaching the filter, selectivity from a sample) and expected costs."""

    written: tuple[str, ...]
    chosen: tuple[str, ...]
    estimates: dict[str, tuple[float, float]]
    sample_requests: int

    def report(self) -> dict:
        from llm_assets.planning import expected_cost

        return {
            "written_order": list(self.written),
            "chosen_order": list(self.chosen),
            "estimates": {
                k: {"tokens_per_row": round(c, 1), "selectivity": round(s, 4)}
                for k, (c, s) in self.estimates.items()
            },
            "expected_tokens_per_row_written": round(
                expected_cost(self.written, self.estimates), 1
            ),
            "expected_tokens_per_row_chosen": round(expected_cost(self.chosen, self.estimates), 1),
            "sample_requests": self.sample_requests,
        }


def estimate_filter_order(
    query: LLMQuery,
    base: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    sample_rows: int = SAMPLE_ROWS,
) -> FilterOrder | None:
    """Send each LLM filter a seeded sample of the rows (at most `sample_rows`), and order
    the filters by cost / (1 - selectivity); None when the query has fewer than two."""
    from llm_assets.planning import cheapest_first, filter_calls

    names = filter_calls(query)
    if len(names) < 2:
        return None
    rows = stages.stage_input(base, query, [])
    sample = rows.sample(min(sample_rows, len(rows)), random_state=0) if len(rows) else rows
    by_name = {c.name: c for c in query.llm_calls}
    estimates, sent = {}, 0
    for name in names:
        call = by_name[name]
        _, plan = plan_stage(query, call, sample, options, engine, f"{query.name}:sample")
        requests = stages.requests_from_plan(plan, call, call_max_tokens(call, options))
        result = engine.run(f"{query.name}:sample:{name}", requests) if requests else None
        sent += len(requests)
        if result is None or not result.responses:
            estimates[name] = (0.0, 1.0)
            continue
        outputs = stages.outputs_frame(plan, result.responses, call)
        answers = outputs["answer"].dropna()
        kept = sum(all(f.keeps(a) for f in query.filters_for(name)) for a in answers)
        tokens = result.stats.prompt_tokens + result.stats.output_tokens
        per_row = tokens / len(sample)  # duplicates share a request: cost per row reaching
        estimates[name] = (per_row, kept / len(answers) if len(answers) else 1.0)
    return FilterOrder(names, cheapest_first(names, estimates), estimates, sent)


def run_query(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    options: QueryOptions,
    engine: LLMEngine,
    *,
    send: bool = True,
    cache=None,
    progress: Callable[[str], Progress] | None = None,
) -> QueryRun:
    """Run every stage of `query` over `tables` on `engine`. With `send=False` only the first
    LLM stage is planned (nothing is sent; `plan` reports what it would cost). A predicate
    that cannot run on the tables' types (`typecheck.check_predicates`) or any other DuckDB
    error of the pre-LLM SQL is a one-line ValueError, raised before anything is sent."""
    import duckdb

    from llm_assets.pipeline.typecheck import check_predicates
    from llm_assets.planning import order_llm_filters
    from resources.runner import raise_if_too_many_errors, run_requests

    check_predicates(query, tables)  # one line, before anything is sent
    try:
        filtered = stages.run_filtered(query, tables, options.pushdown)
    except duckdb.Error as exc:
        first = " ".join(str(exc).splitlines()[0].split())
        raise ValueError(f"query {query.name!r}: the SQL before the LLM failed: {first}") from exc
    base = retrieve(query, tables, filtered, options.retriever) if query.retrievals else filtered
    order = (
        estimate_filter_order(query, base, options, engine) if options.order_llm_filters else None
    )
    if order is not None:
        query = order_llm_filters(query, order.estimates)
    run = QueryRun(base=base, filter_order=order)
    previous: list = []
    for call in query.llm_calls:
        rows = stages.stage_input(base, query, previous)
        relquery = f"{query.name}:{call.name}"
        deduped, plan = plan_stage(query, call, rows, options, engine, relquery)
        if not send:
            run.stages.append(StageRun(call, deduped, plan, pd.DataFrame(), None, 0, 0))
            return run
        requests = stages.requests_from_plan(plan, call, call_max_tokens(call, options))
        chunk = options.chunk_size if cache is not None and cache.enabled else len(requests)
        sent = run_requests(
            engine,
            relquery,
            requests,
            cache=cache,
            chunk_size=max(1, chunk),
            progress=progress(relquery) if progress else None,
        )
        raise_if_too_many_errors(sent, options.max_error_rate)
        outputs = stages.outputs_frame(plan, sent.responses, call)
        run.stages.append(
            StageRun(call, deduped, plan, outputs, sent.stats, sent.sent, sent.cache_hits)
        )
        previous.append((call, deduped, outputs))
    run.result = stages.run_result(base, query, previous, options.pushdown)
    run.answer = stages.run_answer(run.result, query)
    return run
