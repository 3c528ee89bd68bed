"""The `result` (every row of the join with its status and reason), the query's `answer`
(projection or aggregate) and the row accounting over them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from llm_assets.pipeline.filtering import (
    as_arrow,
    fetch_frame,
    locked_connection,
    source_row_column,
)
from llm_assets.pipeline.rows import ROW, SKIP, answers_by_row, passes_filter
from llm_assets.query.answer import star_alias
from llm_assets.query.model import SOURCE_ROW, LLMQuery
from llm_assets.query.parts import LLMCall
from llm_assets.query.render import answer_select, post_llm_predicates
from llm_assets.sql.syntax import condition_values_sql


def row_counts(deduped: pd.DataFrame, outputs: pd.DataFrame) -> dict[str, int]:
    """This stage's input rows by outcome: answered, failed (engine or planning error),
    skipped (a null field). Named `stage_*`: rows a predicate or an earlier LLM filter removed
    never reach the stage, so the query's totals (`accounting`, on `result`) are larger."""
    answers = answers_by_row(deduped, outputs)
    skipped = answers["_skip"].notna()
    failed = answers["_error"].notna() & ~skipped
    return {
        "stage_rows_answered": int((~skipped & ~failed).sum()),
        "stage_rows_failed": int(failed.sum()),
        "stage_rows_skipped": int(skipped.sum()),
    }


def run_result(
    base: pd.DataFrame,
    query: LLMQuery,
    stages: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
    pushdown: bool,
) -> pd.DataFrame:
    """Every row of `base` (the filtered or retrieved rows, all of the join) with each stage's
    answer (NULL where not answered), a `status` (answered / skipped / failed), a `reason`,
    and `passed`: the WHERE keeps the row (every predicate and LLM filter is true), so the
    answer's SQL reads it (`run_answer`).

    Invariant: one row per row of `base`, each with exactly one status; a row a pushed-down
    predicate removed is `skipped` with that predicate as its reason. A call that filters
    nothing drops no row: a row it skips or fails keeps `passed` (its answer NULL) and the
    first such reason; a kept row the query's LIMIT left out of that call
    (`rows.limit_rows`) is `skipped` with the LIMIT as its reason."""
    out = base.drop(columns=[SKIP]) if SKIP in base else base.copy()
    removed = base[SKIP].notna() if SKIP in base else pd.Series(False, index=out.index)
    status = pd.Series("answered", index=out.index, dtype=object).where(~removed, "skipped")
    reason = base[SKIP].astype(object) if SKIP in base else pd.Series(None, index=out.index)
    reason = reason.where(removed, None)
    passed = ~removed
    for call, deduped, outputs in stages:
        answers = answers_by_row(deduped, outputs).set_index(ROW)
        reached = out[ROW].isin(answers.index) & passed
        aligned = answers.reindex(out[ROW]).set_index(out.index)
        skipped = reached & aligned["_skip"].notna()
        failed = reached & aligned["_error"].notna() & ~skipped
        out[call.name] = aligned["_answer"].astype(object).where(reached & ~skipped, None)
        first = status == "answered"  # the first reason a row was not answered stays
        status[skipped & first], reason[skipped & first] = "skipped", aligned["_skip"]
        status[failed & first], reason[failed & first] = "failed", aligned["_error"]
        filters = query.filters_for(call.name)
        if filters:
            passed &= ~(skipped | failed)
        else:  # kept by the WHERE, left out of the call by the LIMIT
            cut = passed & ~out[ROW].isin(answers.index) & (status == "answered")
            status[cut], reason[cut] = "skipped", f"{query.shape.show_limit()}: not sent"
        for f in filters:
            kept = out[call.name].map(lambda a, f=f: passes_filter(f, a)).astype(bool)
            dropped = passed & ~kept
            reason[dropped] = f"LLM filter {f.call_name} {f.op} {f.value!r} is false"
            passed &= kept
    for predicate in post_llm_predicates(query, pushdown):
        keep, unknown = _evaluate(out, predicate), _evaluate(out, f"({predicate}) IS NULL")
        dropped = passed & ~keep
        reason[dropped & ~unknown] = f"predicate {predicate} is false"
        reason[dropped & unknown] = f"predicate {predicate} is null (unknown)"
        passed &= keep
    out["status"], out["reason"], out["passed"] = status, reason, passed
    return out


def _evaluate(frame: pd.DataFrame, predicate: str) -> pd.Series:
    """The predicate (SQL over output names, from the query model) on every row, null as
    false; on a locked connection, the statement built from the parsed predicate."""
    con = locked_connection()
    try:
        con.register("_rows", frame)
        values = con.execute(condition_values_sql(predicate, "_rows")).fetchnumpy()
    finally:
        con.close()
    return pd.Series(next(iter(values.values())).astype(bool), index=frame.index)


def run_answer(
    result: pd.DataFrame,
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame] | None = None,
    check: bool = False,
) -> pd.DataFrame:
    """The query's answer: its SELECT run in DuckDB (`query.render.answer_select`, on a locked
    connection) over every row the WHERE keeps (`passed`), each LLM call's answers a column,
    NULL where the row was skipped or failed.

    A projection returns those rows under `LLMQuery.answer_names()` (a star's columns read from
    `tables` by source row number, as the table has them), then DISTINCT, ORDER BY (ties in
    `_row` order), OFFSET and LIMIT. An aggregate reads them all: AVG/SUM/MIN/MAX read each
    answer as a number (`answer_number`; NULL when it is not one, or when the row was skipped
    or failed), COUNT(LLM(...)) counts answers, COUNT(*) counts rows; one row per group, or
    exactly one row without GROUP BY. A DuckDB error (an ORDER BY expression that cannot run
    on the answers) is one ValueError line (`check_answer` finds most before any call).
    `check`: text columns registered as VARCHAR however few rows they hold."""
    rows = result[result["passed"]]
    agg = query.aggregate
    names = query.output_names()
    frame = pd.DataFrame(index=rows.index)
    if agg is not None:
        for column in dict.fromkeys(names[g] for g in agg.group_by):
            frame[column] = rows[column]
        numeric = {i.call_name for i in agg.items if i.call_name is not None and i.numeric}
        for call in agg.call_names:
            if call in numeric:
                frame[call] = pd.array([answer_number(a) for a in rows[call]], dtype="Float64")
            else:
                frame[call] = rows[call].astype(object)
    else:
        keys = query.shape.order_by
        read = [names.get(p, p) for p in query.projection if star_alias(p) is None]
        read += [names[c] for k in keys for c in k.columns] + [o for k in keys for o in k.outputs]
        read += [source_row_column(query, a) for a in query.star_aliases]
        for column in dict.fromkeys([*read, ROW] if ROW in rows else read):
            frame[column] = rows[column]
    if frame.columns.empty:  # COUNT(*) alone, no GROUP BY: DuckDB needs a column to scan
        frame["_"] = True
    con = locked_connection()
    try:
        frame = frame.reset_index(drop=True)
        con.register("_rows", _as_text(frame) if check else frame)
        stars = _register_stars(con, query, tables)
        select = answer_select(query, "_rows", ROW if ROW in frame else None, stars)
        return fetch_frame(con, select.sql(dialect="duckdb"))  # as .df(), in less memory
    except duckdb.Error as exc:
        first = " ".join(str(exc).splitlines()[0].split())
        what = "cannot run on the answers" if check else "failed"
        raise ValueError(f"query {query.name!r}: the SQL after the LLM {what}: {first}") from exc
    finally:
        con.close()


def check_answer(
    query: LLMQuery, base: pd.DataFrame, tables: Mapping[str, pa.Table | pd.DataFrame]
) -> None:
    """Bind the answer's SQL (`run_answer`) before anything is sent, over none of `base`'s
    rows with each LLM call's answers a VARCHAR column: an ORDER BY that cannot run on them
    (`ORDER BY stars + 1`; write `TRY_CAST(stars AS DOUBLE) + 1`) is one ValueError line."""
    calls = {c.name: pd.Series([], dtype=object) for c in query.llm_calls}
    empty = base.iloc[:0].assign(**calls, passed=pd.Series([], dtype=bool))
    run_answer(empty, query, tables, check=True)


def _as_text(frame: pd.DataFrame) -> pa.Table:
    """`frame` as Arrow, its object columns as text (an empty one would have no type)."""
    return pa.table(
        {c: pa.array(frame[c], pa.string() if frame[c].dtype == object else None) for c in frame}
    )


def _register_stars(con, query: LLMQuery, tables) -> dict[str, tuple[str, list[str], str]]:
    """Each source a star item returns, registered on `con` with its row numbers
    (`answer_select`'s `stars`)."""
    stars = {}
    for i, alias in enumerate(query.star_aliases):
        source = next(s for s in query.sources if s.alias == alias)
        if tables is None or source.table not in tables:
            raise ValueError(
                f"query {query.name!r}: SELECT {alias}.* reads table {source.table!r}, "
                "which this step was not given"
            )
        table = as_arrow(tables[source.table])
        numbered = table.append_column(SOURCE_ROW, pa.array(np.arange(len(table))))
        con.register(f"_star{i}", numbered)
        stars[alias] = (f"_star{i}", table.column_names, source_row_column(query, alias))
    return stars


ANSWER_PREVIEW_ROWS = 20
"""Rows of the answer a run summary shows (`answer_records`)."""


def answer_records(answer: pd.DataFrame, limit: int | None = ANSWER_PREVIEW_ROWS) -> list[dict]:
    """The first `limit` rows of the query's answer (all with None) as JSON-ready dicts, for a
    run summary: nulls (None, NaN, NA) as None, numpy numbers as Python numbers, timestamps
    and other values as text. An aggregate without GROUP BY is one record, e.g.
    `[{"avg_stars": 3.2, "n": 812}]`."""
    rows = answer if limit is None else answer.head(limit)
    return [
        {str(k): _json_value(v) for k, v in record.items()}
        for record in rows.to_dict(orient="records")
    ]


def _json_value(value: object) -> object:
    if value is None or (
        not isinstance(value, list | tuple | dict | np.ndarray) and pd.isna(value)
    ):
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def answer_number(answer: object) -> float | None:
    """An answer as a number, read as `OutputSpec.violation` reads a `number(lo,hi)` answer
    (the stripped text as a float), or None when it is not a finite number. A number outside
    the spec's range is kept (its violation is recorded in `llm_outputs`)."""
    if answer is None or (isinstance(answer, float) and math.isnan(answer)):
        return None
    try:
        value = float(str(answer).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def accounting(result: pd.DataFrame) -> dict[str, int]:
    """Counts of the query's input rows (every row of the join) by status; invariant:
    answered + skipped + failed == rows_in."""
    counts = result["status"].value_counts()
    skipped = result["status"] == "skipped"
    by_predicate = skipped & result["reason"].astype(str).str.startswith("predicate ")
    return {
        "rows_in": len(result),
        "answered": int(counts.get("answered", 0)),
        "skipped": int(counts.get("skipped", 0)),
        "failed": int(counts.get("failed", 0)),
        "rows_skipped_by_predicate": int(by_predicate.sum()),
        "rows_passed": int(result["passed"].sum()),
    }
