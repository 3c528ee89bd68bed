"""The `result` (every row of the join with its status and reason), the query's `answer`
(projection or aggregate) and the row accounting over them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from llm_assets.pipeline.filtering import locked_connection
from llm_assets.pipeline.rows import ROW, SKIP, answers_by_row, passes_filter
from llm_assets.query import LLMQuery
from llm_assets.query_parts import LLMCall
from llm_assets.query_sql import aggregate_sql, post_llm_predicates
from llm_assets.sql_ast import condition_values_sql


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
    answer, a `status` (answered / skipped / failed), a `reason`, and `passed` (in the query's
    output: answered and kept by every predicate and LLM filter).

    Invariant: one row per row of `base`, each with exactly one status; a row a pushed-down
    predicate removed is `skipped` with that predicate as its reason."""
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
        out[call.name] = aligned["_answer"].where(reached, None)
        skipped = reached & aligned["_skip"].notna()
        failed = reached & aligned["_error"].notna() & ~skipped
        status[skipped], reason[skipped] = "skipped", aligned["_skip"][skipped]
        status[failed], reason[failed] = "failed", aligned["_error"][failed]
        passed &= ~(skipped | failed)
        for f in query.filters_for(call.name):
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


def run_answer(result: pd.DataFrame, query: LLMQuery) -> pd.DataFrame:
    """The query's output: projected passing rows, or the aggregate (`query_sql.aggregate_sql`)
    over them: one row per group, or exactly one row without GROUP BY.

    The aggregate reads the rows that passed and were answered: AVG/SUM/MIN/MAX read each
    answer as a number (`answer_number`; an answer that is not one is null, as in SQL),
    COUNT(LLM(...)) counts answers, COUNT(*) counts rows. Runs on a locked DuckDB connection
    with the SQL built from the query model."""
    rows = result[result["passed"] & (result["status"] == "answered")]
    agg = query.aggregate
    if agg is None:
        return rows[list(query.projection_columns())].reset_index(drop=True)
    names = query.output_names()
    frame = pd.DataFrame(index=rows.index)
    for column in dict.fromkeys(names[g] for g in agg.group_by):
        frame[column] = rows[column]
    numeric = {i.call_name for i in agg.items if i.call_name is not None and i.numeric}
    for call in agg.call_names:
        if call in numeric:
            frame[call] = pd.array([answer_number(a) for a in rows[call]], dtype="Float64")
        else:
            frame[call] = rows[call].astype(object)
    if frame.columns.empty:  # COUNT(*) alone, no GROUP BY: DuckDB needs a column to scan
        frame["_"] = True
    con = locked_connection()
    try:
        con.register("_rows", frame.reset_index(drop=True))
        return con.execute(aggregate_sql(query, "_rows")).df()
    finally:
        con.close()


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
