"""The pure work of each asset of a query lineage (no Dagster here; assets wrap these).

The assets (`llm_assets.assets`), the CLI (`llm-assets run|plan`) and the benchmarks all call
these functions, through `llm_assets.pipeline.run` outside Dagster.

Row identity: `filtered` holds every row of the join, numbered `_row` = 0..n-1 in stored
order; every later table refers to rows by `_row` and to distinct LLM inputs by `_input_id`.
Row accounting: each row of `filtered` ends in `result` with exactly one `status`:
`answered` (every LLM stage it reached answered it), `skipped` (with a `reason`: a pushed-down
predicate removed it before the LLM, or a null in an LLM field under the skip policy) or
`failed` (with the engine's or the planner's error).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import sqlglot
from sqlglot import exp

from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.dedup import dedup_rows
from llm_assets.optimizer.prompts import PromptFormat, fit_row, parse, render_prompts
from llm_assets.optimizer.table import EncodedTable
from llm_assets.pipeline.options import CONTEXT_POLICIES, NULL_POLICIES
from llm_assets.query import LLMCall, LLMQuery, bare_name
from llm_assets.sql import check_columns
from llm_assets.sql_ast import condition_values_sql
from resources.engine import Request, Response

TOO_LONG_HINT = {
    "fail": "use 'truncate' to cut the longest field",
    "truncate": "even with the longest field cut to nothing it does not fit",
}
ROW = "_row"
INPUT = "_input_id"
SKIP = "_skip"
"""In `filtered`: why a pushed-down predicate removed the row (None: kept)."""


# ---- filtered ---------------------------------------------------------------------------


def locked_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files or attach databases, with its
    configuration locked: the user's SQL sees only the relations registered on it."""
    con = duckdb.connect(config={"enable_external_access": False})
    con.execute("SET lock_configuration = true")
    return con


def predicate_only_columns(query: LLMQuery) -> dict[str, list[str]]:
    """Per source alias, the columns only non-LLM predicates read. They are the ones typed
    for SQL (`rating > 3` on a text file); every other column keeps the file's text, so a
    prompt, a projection or a join key sees the value exactly as written."""
    other = {c for c in query.projection if "." in c}
    other |= set(query.aggregate.group_by if query.aggregate else ())
    other |= {f for call in query.llm_calls for f in call.fields if "." in f}
    other |= {c for r in query.retrievals for c in (r.query_column, r.corpus_column)}
    for j in query.joins:
        other |= {f"{j.left_alias}.{j.left_column}", f"{j.right_alias}.{j.right_column}"}
    out: dict[str, list[str]] = {}
    for p in query.predicates:
        for column in p.columns:
            alias, name = column.split(".", 1)
            if column not in other and name not in out.setdefault(alias, []):
                out[alias].append(name)
    return out


def _typed_view(name: str, raw: str, table: pa.Table, columns: Sequence[str]) -> str:
    """`CREATE VIEW name AS SELECT * REPLACE (TRY_CAST(c AS T) AS c, ...) FROM raw` for the
    text columns whose values all read as a DuckDB type (built from the AST)."""
    from llm_assets.data.sql_types import predicate_types

    text = [c for c in columns if c in table.column_names]
    types = {c: t for c, t in predicate_types(table, text).items() if t != "VARCHAR"}
    star = exp.Star()
    if types:
        star = exp.Star(
            replace=[
                exp.alias_(
                    exp.TryCast(this=exp.column(c, quoted=True), to=exp.DataType.build(t)),
                    c,
                    quoted=True,
                )
                for c, t in types.items()
            ]
        )
    select = exp.select(star).from_(exp.to_identifier(raw, quoted=True))
    view = exp.Create(this=exp.to_identifier(name, quoted=True), kind="VIEW", expression=select)
    return view.sql(dialect="duckdb")


def _columns(table: pa.Table | pd.DataFrame) -> list[str]:
    return table.column_names if isinstance(table, pa.Table) else list(table.columns)


def as_arrow(table: pa.Table | pd.DataFrame) -> pa.Table:
    if isinstance(table, pa.Table):
        return table
    return pa.Table.from_pandas(table, preserve_index=False)


def run_filtered(
    query: LLMQuery, tables: Mapping[str, pa.Table | pd.DataFrame], pushdown: bool
) -> pd.DataFrame:
    """Every row of the join of the sources, numbered `_row` in stored order (by row number in
    the largest source, then in the others; never sorted on values, so the FIFO baseline sees
    the data as stored), with `_skip`: with `pushdown`, the reason a non-LLM predicate removes
    the row before any LLM call (evaluated in DuckDB), else None.

    Runs on `locked_connection()`: the user's SQL reaches only the registered tables. A source
    with columns but no row (a header-only file) is a ValueError: the run would ask nothing."""
    check_columns(query, {t: list(_columns(frame)) for t, frame in tables.items()})
    empty = sorted({s.table for s in query.sources if len(tables[s.table]) == 0})
    if empty:
        raise ValueError(
            f"query {query.name!r}: table {empty[0]!r} has columns but no rows (a header-only "
            "file?): there is nothing to ask the LLM"
        )
    con = locked_connection()
    typed = predicate_only_columns(query)
    size = {s.alias: len(tables[s.table]) for s in query.sources}
    by_size = sorted(range(len(query.sources)), key=lambda i: -size[query.sources[i].alias])
    relation = {}
    try:
        for i, source in enumerate(query.sources):
            if source.table in relation:
                continue
            table = as_arrow(tables[source.table])
            table = table.append_column("_src_row", pa.array(np.arange(len(table), dtype=np.int64)))
            con.register(f"_raw{i}", table)
            con.execute(_typed_view(f"_t{i}", f"_raw{i}", table, typed.get(source.alias, ())))
            relation[source.table] = f"_t{i}"
        rows = {s.alias: f"_src_{i}" for i, s in enumerate(query.sources)}
        inner = query.pre_llm_sql(False, tables=relation, source_row_columns=rows)
        skip = _skip_reason(query) if pushdown else exp.null()
        order = [exp.column(rows[query.sources[i].alias], quoted=True) for i in by_size]
        sql = (
            exp.select(exp.Star(), exp.alias_(skip, "_skip", quoted=True))
            .from_(exp.paren(sqlglot.parse_one(inner, read="duckdb")).as_("_joined"))
            .order_by(*order)
        )
        frame = con.execute(sql.sql(dialect="duckdb")).df()
    finally:
        con.close()
    frame = frame.drop(columns=list(rows.values()))
    frame["_skip"] = frame["_skip"].astype(object).where(frame["_skip"].notna(), None)
    frame.insert(0, ROW, np.arange(len(frame), dtype=np.int64))
    return frame


def _skip_reason(query: LLMQuery) -> exp.Expression:
    """CASE WHEN NOT COALESCE(p1, FALSE) THEN 'predicate p1 is false' ... END over output
    names: the first predicate that removes the row, or NULL."""
    case = exp.Case()
    for sql in query.post_llm_predicates(False):
        predicate = sqlglot.parse_one(sql, read="duckdb")
        kept = exp.func("COALESCE", exp.paren(predicate), exp.false())
        case = case.when(exp.not_(kept), exp.Literal.string(f"predicate {sql} is false"))
    return case if query.predicates else exp.null()


# ---- per-stage rows ---------------------------------------------------------------------


def placeholder_columns(query: LLMQuery, call: LLMCall, frame: pd.DataFrame) -> dict[str, list]:
    """For one LLM call: placeholder -> the columns of `frame` holding its values, in argument
    order; a retrieval field expands to its k columns (`context_1`, ...)."""
    out = {}
    for field, column in query.field_columns(call.name).items():
        if column in frame.columns:
            out[field] = [column]
            continue
        expanded = sorted(c for c in frame.columns if c.startswith(f"{column}_"))
        if not expanded:
            raise KeyError(
                f"LLM field {field!r} (column {column!r}) is not in the stage input; "
                f"available columns: {list(frame.columns)}"
            )
        out[field] = expanded
    return out


def stage_input(
    base: pd.DataFrame,
    query: LLMQuery,
    previous: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
) -> pd.DataFrame:
    """The rows the next LLM stage runs on: `base` rows no pushed-down predicate removed,
    that every earlier stage answered and whose answers passed that stage's LLM filters, with
    the answers as columns."""
    rows = base[base[SKIP].isna()].drop(columns=[SKIP]) if SKIP in base else base
    for call, deduped, outputs in previous:
        answers = answers_by_row(deduped, outputs)
        rows = rows.merge(answers, on=ROW, how="inner")
        rows = rows[rows["_error"].isna() & rows["_skip"].isna()]
        rows = rows.drop(columns=["_error", "_skip"]).rename(columns={"_answer": call.name})
        for f in query.filters_for(call.name):
            rows = rows[rows[call.name].map(lambda a, f=f: _kept(f, a)).astype(bool)]
    return rows.reset_index(drop=True)


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


# ---- deduped ------------------------------------------------------------------------------


def run_dedup(
    rows: pd.DataFrame, fields: list[str], dedup: bool, null_policy: str = "skip"
) -> pd.DataFrame:
    """`rows` with `_input_id` (equal for rows whose LLM inputs are equal when `dedup`,
    else one per row) and `_skip` (reason, or None). Skipped rows get `_input_id` -1."""
    if null_policy not in NULL_POLICIES:
        raise ValueError(f"unknown null policy {null_policy!r}; expected one of {NULL_POLICIES}")
    out = rows.copy()
    skip = pd.Series([None] * len(out), index=out.index, dtype=object)
    if null_policy != "empty":
        for field in fields:
            nulls = out[field].isna()
            if null_policy == "fail" and nulls.any():
                first = int(out.loc[nulls, ROW].iloc[0])
                raise ValueError(
                    f"LLM field {field!r} is null in {int(nulls.sum())} row(s) (first: row "
                    f"{first}); set null_policy to 'skip' or 'empty' to handle them"
                )
            skip = skip.where(~(nulls & skip.isna()), f"null in LLM field {field!r}")
    out["_skip"] = skip
    ids = np.full(len(out), -1, dtype=np.int64)
    live = skip.isna().to_numpy()
    if live.any():
        live_rows = out.loc[live, fields].reset_index(drop=True)
        if dedup:
            ids[live] = dedup_rows(live_rows).inverse
        else:
            ids[live] = np.arange(int(live.sum()))
    out[INPUT] = ids
    return out


# ---- request_plan -------------------------------------------------------------------------


def prompt_format(
    call: LLMCall,
    style: str = "named",
    system: str = "",
    columns: Mapping[str, Sequence[str]] | None = None,
) -> PromptFormat:
    """How `call`'s prompts read (`llm_assets.optimizer.prompts`)."""
    template = parse(call.template, [bare_name(f) for f in call.fields])
    return PromptFormat(template, style, system, dict(columns or {}))


def run_plan(
    deduped: pd.DataFrame,
    call: LLMCall,
    fields: list[str],
    method: str,
    style: str = "named",
    relquery: str = "q",
    system: str = "",
    max_prompt_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    context_policy: str = "fail",
    columns: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """One row per distinct input in submission order: `position`, `_input_id`,
    `request_id`, `prompt`, `field_order`, `truncated`, `error`. Rows (and, unless `style` is
    inline, fields) are reordered by `method` (GGR by default); prompts read as
    `prompt_format` says. `columns` maps placeholders to the `fields` holding their values
    (`placeholder_columns`; by default each placeholder is the column of its name).

    With `max_prompt_tokens`, a longer prompt either has its longest field cut to fit (marked,
    `truncated`; `context_policy="truncate"`) or gets an `error` and is never sent ("fail")."""
    if context_policy not in CONTEXT_POLICIES:
        raise ValueError(
            f"unknown context policy {context_policy!r}; expected one of {CONTEXT_POLICIES}"
        )
    live = deduped[deduped[INPUT] >= 0]
    firsts = live.drop_duplicates(INPUT).sort_values(INPUT)
    inputs = firsts[fields].reset_index(drop=True)
    fmt = prompt_format(call, style, system, columns)
    if len(inputs) == 0:
        names = ["position", INPUT, "request_id", "prompt", "field_order", "truncated", "error"]
        return pd.DataFrame({c: [] for c in names})
    enc: EncodedTable = encode(inputs, fmt.column_order(fields))
    schedule = reorder(enc, method=method, fixed_fields=not fmt.reorders_fields)
    prompts = render_prompts(enc, schedule, fmt)
    truncated = [False] * len(prompts)
    errors: list[str | None] = [None] * len(prompts)
    if max_prompt_tokens is not None and count_tokens is not None:
        index = {f: j for j, f in enumerate(enc.fields)}
        for k, (prompt, (row, order)) in enumerate(zip(prompts, schedule, strict=True)):
            n_tokens = count_tokens(prompt)
            if n_tokens <= max_prompt_tokens:
                continue
            values = [enc.cell(row, index[f]) for f in order]
            fitted = None
            if context_policy == "truncate":
                fitted = fit_row(fmt, order, values, count_tokens, max_prompt_tokens)
            if fitted is None:
                hint = TOO_LONG_HINT[context_policy]
                errors[k] = (
                    f"prompt has {n_tokens} tokens, over the {max_prompt_tokens} the context "
                    f"window leaves (context_policy={context_policy!r}; {hint})"
                )
            else:
                prompts[k], truncated[k] = fitted, True
    input_ids = firsts[INPUT].to_numpy()[schedule.rows]
    return pd.DataFrame(
        {
            "position": np.arange(len(schedule), dtype=np.int64),
            INPUT: input_ids,
            "request_id": [f"{relquery}:{i}" for i in input_ids],
            "prompt": prompts,
            "field_order": [",".join(fields) for _, fields in schedule],
            "truncated": truncated,
            "error": errors,
        }
    )


def first_prompt(plan: pd.DataFrame) -> str | None:
    """The first prompt `plan` sends (None when it sends none), exactly as sent."""
    sendable = plan[plan["error"].isna()] if "error" in plan else plan
    return None if sendable.empty else str(sendable["prompt"].iloc[0])


def requests_from_plan(
    plan: pd.DataFrame, call: LLMCall, max_tokens: int | None = None
) -> list[Request]:
    """The requests to send: every planned prompt that has no planning error, with the call's
    output spec and `max_tokens` (default: the call's)."""
    sendable = plan[plan["error"].isna()] if "error" in plan else plan
    limit = max_tokens or call.max_tokens
    return [
        Request(id=rid, prompt=prompt, max_tokens=limit, output=call.output)
        for rid, prompt in zip(sendable["request_id"], sendable["prompt"], strict=True)
    ]


# ---- llm_outputs --------------------------------------------------------------------------


def outputs_frame(plan: pd.DataFrame, responses: Sequence[Response], call: LLMCall) -> pd.DataFrame:
    """One row per request of `plan`: the answer (or error), spec violation and accounting."""
    by_id = {r.id: r for r in responses}
    planned = plan["error"] if "error" in plan else [None] * len(plan)
    rows = []
    for input_id, rid, plan_error in zip(plan[INPUT], plan["request_id"], planned, strict=True):
        r = by_id.get(rid)
        if r is None:
            error = plan_error if isinstance(plan_error, str) else "no response from the engine"
            r = Response(rid, "", 0, 0, 0, 0.0, 0.0, error=error)
        violation = None if r.error else call.output.violation(r.text)
        rows.append(
            {
                INPUT: int(input_id),
                "request_id": rid,
                "answer": None if r.error else r.text.strip(),
                "error": r.error,
                "violation": violation,
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "output_tokens": r.output_tokens,
                "ttft_s": r.ttft_s,
                "finish_s": r.finish_s,
            }
        )
    columns = [INPUT, "request_id", "answer", "error", "violation", "prompt_tokens"]
    columns += ["cached_tokens", "output_tokens", "ttft_s", "finish_s"]
    return pd.DataFrame(rows, columns=columns)


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


# ---- result and answer --------------------------------------------------------------------


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
            kept = out[call.name].map(lambda a, f=f: _kept(f, a)).astype(bool)
            dropped = passed & ~kept
            reason[dropped] = f"LLM filter {f.call_name} {f.op} {f.value!r} is false"
            passed &= kept
    for predicate in query.post_llm_predicates(pushdown):
        keep = _evaluate(out, predicate)
        dropped = passed & ~keep
        reason[dropped] = f"predicate {predicate} is false"
        passed &= keep
    out["status"], out["reason"], out["passed"] = status, reason, passed
    return out


def _kept(llm_filter, answer) -> bool:
    return isinstance(answer, str) and llm_filter.keeps(answer)


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
    """The query's output: projected passing rows, or the aggregate (`LLMQuery.aggregate_sql`)
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
        return con.execute(query.aggregate_sql("_rows")).df()
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
