"""Row identity, and which rows reach each LLM stage (no Dagster here; assets wrap these).

Row identity: `filtered` holds every row of the join, numbered `_row` (ROW) = 0..n-1 in stored
order; every later table refers to rows by `_row` and to distinct LLM inputs by `_input_id`
(INPUT). Row accounting: each row of `filtered` ends in `result` with exactly one `status`:
`answered` (every LLM stage it reached answered it), `skipped` (with a `reason`: a pushed-down
predicate removed it before the LLM, or a null in an LLM field under the skip policy) or
`failed` (with the engine's or the planner's error).

Which rows reach a stage: those no pushed-down predicate removed, that every earlier LLM
*filter* answered and kept (a row skipped or failed by a filter's call is not kept: NULL =
'x' is not true). A call that filters nothing (a projection, an aggregate's) drops no row: a
row it skipped or failed goes on to the next call with NULL as that answer. With a LIMIT
(`LLMQuery.limit_pushdown`), the calls after the last filter get only the rows the LIMIT and
OFFSET keep (`limit_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from llm_assets.pipeline.connection import locked_connection
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from llm_assets.query.render import limit_select

ROW = "_row"
INPUT = "_input_id"
SKIP = "_skip"
"""In `filtered`: why a pushed-down predicate removed the row (None: kept)."""


def stage_input(
    base: pd.DataFrame,
    query: LLMQuery,
    previous: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
    limit: bool = False,
) -> pd.DataFrame:
    """The rows the next LLM stage runs on (the module docstring): `base` rows no pushed-down
    predicate removed and every earlier LLM filter kept, with the earlier answers as columns
    (NULL where a call that filters nothing skipped or failed the row). With `limit` (give
    it only when the predicates were pushed down: the rows the WHERE keeps are known) and
    every LLM filter of the query among `previous`, only the rows the query's LIMIT keeps
    (`limit_rows`)."""
    rows = base[base[SKIP].isna()].drop(columns=[SKIP]) if SKIP in base else base
    for call, deduped, outputs in previous:
        answers = answers_by_row(deduped, outputs)
        rows = rows.merge(answers, on=ROW, how="inner")
        filters = query.filters_for(call.name)
        if filters:
            rows = rows[rows["_error"].isna() & rows["_skip"].isna()]
        rows = rows.drop(columns=["_error", "_skip"]).rename(columns={"_answer": call.name})
        for f in filters:
            rows = rows[rows[call.name].map(lambda a, f=f: passes_filter(f, a)).astype(bool)]
    done = {call.name for call, _, _ in previous}
    if limit and {f.call_name for f in query.llm_filters} <= done:
        rows = limit_rows(rows, query)
    return rows.reset_index(drop=True)


def limit_rows(rows: pd.DataFrame, query: LLMQuery) -> pd.DataFrame:
    """The `rows` (kept by the WHERE) the query's LIMIT and OFFSET keep, in their order:
    sorted in DuckDB by its ORDER BY keys then `_row` (`query.render.limit_select`, as the
    answer sorts them). All of `rows` when the LIMIT cannot be pushed down
    (`LLMQuery.limit_pushdown`)."""
    if not query.limit_pushdown():
        return rows
    names = query.output_names()
    needed = [ROW, *dict.fromkeys(names[c] for k in query.shape.order_by for c in k.columns)]
    con = locked_connection()
    try:
        con.register("_rows", rows[needed])
        sql = limit_select(query, "_rows", ROW).sql(dialect="duckdb")
        kept = con.execute(sql).fetchnumpy()[ROW]
    finally:
        con.close()
    return rows[rows[ROW].isin(kept)]


def answers_by_row(deduped: pd.DataFrame, outputs: pd.DataFrame) -> pd.DataFrame:
    """Per row of `deduped`: `_answer`, `_error` and `_skip` (skip reason) of its input."""
    joined = deduped[[ROW, INPUT, "_skip"]].merge(
        outputs[[INPUT, "answer", "error"]], on=INPUT, how="left"
    )
    return pd.DataFrame(
        {
            ROW: joined[ROW],
            "_answer": joined["answer"],
            "_error": joined["error"].where(joined["_skip"].isna(), None),
            "_skip": joined["_skip"],
        }
    )


def passes_filter(llm_filter, answer) -> bool:
    """An LLM filter keeps `answer` (an answer that is not text, e.g. a failed row, never)."""
    return isinstance(answer, str) and llm_filter.keeps(answer)
