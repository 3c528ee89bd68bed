"""The pure work of each asset of a query lineage (no Dagster here; assets wrap these).

Row identity: `filtered` numbers its rows `_row` = 0..n-1 in a deterministic order (sorted on
every column), and every later table refers to rows by `_row` and to distinct LLM inputs by
`_input_id`. Row accounting: each row of `filtered` ends in exactly one `status`:
`answered` (every LLM stage it reached answered it), `skipped` (with a `reason`: a null in an
LLM field under the skip policy) or `failed` (with the engine's error). Rows removed by a
predicate before the LLM are counted as skipped too (`rows_skipped_by_predicate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.dedup import dedup_rows
from llm_assets.optimizer.prompts import fit_row, parse_template, render_prompts
from llm_assets.optimizer.table import EncodedTable
from llm_assets.query import LLMCall, LLMQuery, bare_name
from llm_assets.sql_ast import condition_values_sql
from resources.engine import Request, Response

NULL_POLICIES = ("skip", "empty", "fail")
CONTEXT_POLICIES = ("fail", "truncate")
TOO_LONG_HINT = {
    "fail": "use 'truncate' to cut the longest field",
    "truncate": "even with the longest field cut to nothing it does not fit",
}
ROW = "_row"
INPUT = "_input_id"


# ---- filtered ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Filtered:
    frame: pd.DataFrame
    rows_joined: int
    """Rows of the join before any predicate (the query's input rows)."""


def run_filtered(query: LLMQuery, tables: dict[str, pd.DataFrame], pushdown: bool) -> Filtered:
    """Join the sources in DuckDB; with `pushdown`, run the non-LLM predicates there too.

    Rows come out in stored order: by row number in the largest source (the fact table),
    then in the others; never sorted on values, so the FIFO baseline sees the data as stored.
    """
    con = duckdb.connect()
    size = {s.alias: len(tables[s.table]) for s in query.sources}
    by_size = sorted(range(len(query.sources)), key=lambda i: -size[query.sources[i].alias])
    order = [f"_src_{i}" for i in by_size]
    try:
        for name, frame in tables.items():
            con.register(name, frame.assign(_src_row=np.arange(len(frame), dtype=np.int64)))
        joined = con.execute(f"SELECT COUNT(*) FROM (SELECT 1 {query.from_sql()})").fetchone()[0]
        rows = {s.alias: f"_src_{i}" for i, s in enumerate(query.sources)}
        sql = query.pre_llm_sql(pushdown, source_row_columns=rows)
        frame = con.execute(f"SELECT * FROM ({sql}) ORDER BY {', '.join(order)}").df()
    finally:
        con.close()
    frame = frame.drop(columns=order)
    frame.insert(0, ROW, np.arange(len(frame), dtype=np.int64))
    return Filtered(frame, int(joined))


# ---- per-stage rows ---------------------------------------------------------------------


def llm_field_columns(query: LLMQuery, call: LLMCall, frame: pd.DataFrame) -> list[str]:
    """Columns holding the call's values, in argument order; a retrieval field expands to its
    k columns (`context_1`, ...)."""
    out = []
    for field, column in query.field_columns(call.name).items():
        if column in frame.columns:
            out.append(column)
        else:
            expanded = sorted(c for c in frame.columns if c.startswith(f"{column}_"))
            if not expanded:
                raise KeyError(
                    f"LLM field {field!r} (column {column!r}) is not in the stage input; "
                    f"available columns: {list(frame.columns)}"
                )
            out += expanded
    return out


def stage_input(
    base: pd.DataFrame,
    query: LLMQuery,
    previous: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
) -> pd.DataFrame:
    """The rows the next LLM stage runs on: `base` rows that every earlier stage answered and
    whose answers passed that stage's LLM filters, with the answers as columns."""
    rows = base
    for call, deduped, outputs in previous:
        answers = answers_by_row(deduped, outputs)
        rows = rows.merge(answers, on=ROW, how="inner")
        rows = rows[rows["_error"].isna() & rows["_skip"].isna()]
        rows = rows.drop(columns=["_error", "_skip"]).rename(columns={"_answer": call.name})
        for f in query.filters_for(call.name):
            rows = rows[rows[call.name].map(lambda a, f=f: _kept(f, a))]
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
) -> pd.DataFrame:
    """One row per distinct input in submission order: `position`, `_input_id`,
    `request_id`, `prompt`, `field_order`, `truncated`, `error`. Rows are reordered by
    `method` (GGR by default). A prompt is `system`, the instruction, then the row's fields.

    With `max_prompt_tokens`, a longer prompt either has its longest field cut to fit (marked,
    `truncated`; `context_policy="truncate"`) or gets an `error` and is never sent ("fail")."""
    if context_policy not in CONTEXT_POLICIES:
        raise ValueError(
            f"unknown context policy {context_policy!r}; expected one of {CONTEXT_POLICIES}"
        )
    live = deduped[deduped[INPUT] >= 0]
    firsts = live.drop_duplicates(INPUT).sort_values(INPUT)
    inputs = firsts[fields].reset_index(drop=True)
    instruction, _ = parse_template(call.template, [bare_name(f) for f in call.fields])
    if system:
        instruction = f"{system}\n{instruction}"
    if len(inputs) == 0:
        columns = ["position", INPUT, "request_id", "prompt", "field_order", "truncated", "error"]
        return pd.DataFrame({c: [] for c in columns})
    enc: EncodedTable = encode(inputs, fields)
    schedule = reorder(enc, method=method)
    prompts = render_prompts(enc, schedule, instruction, style)
    truncated = [False] * len(prompts)
    errors: list[str | None] = [None] * len(prompts)
    if max_prompt_tokens is not None and count_tokens is not None:
        head = instruction.rstrip("\n") + "\n"
        index = {f: j for j, f in enumerate(enc.fields)}
        for k, (prompt, (row, order)) in enumerate(zip(prompts, schedule, strict=True)):
            n_tokens = count_tokens(prompt)
            if n_tokens <= max_prompt_tokens:
                continue
            values = [enc.cell(row, index[f]) for f in order]
            fitted = None
            if context_policy == "truncate":
                fitted = fit_row(head, order, values, style, count_tokens, max_prompt_tokens)
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


def requests_from_plan(plan: pd.DataFrame, call: LLMCall) -> list[Request]:
    """The requests to send: every planned prompt that has no planning error."""
    sendable = plan[plan["error"].isna()] if "error" in plan else plan
    return [
        Request(id=rid, prompt=prompt, max_tokens=call.max_tokens, output=call.output)
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
    """Rows of this stage by outcome: answered, failed (engine or planning error), skipped."""
    answers = answers_by_row(deduped, outputs)
    skipped = answers["_skip"].notna()
    failed = answers["_error"].notna() & ~skipped
    return {
        "rows_answered": int((~skipped & ~failed).sum()),
        "rows_failed": int(failed.sum()),
        "rows_skipped": int(skipped.sum()),
    }


# ---- result and answer --------------------------------------------------------------------


def run_result(
    base: pd.DataFrame,
    query: LLMQuery,
    stages: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
    pushdown: bool,
) -> pd.DataFrame:
    """Every row of `base` (the filtered or retrieved rows) with each stage's answer, a
    `status` (answered / skipped / failed), a `reason`, and `passed` (in the query's output:
    answered and kept by every LLM filter and post-LLM predicate)."""
    out = base.copy()
    status = pd.Series("answered", index=out.index, dtype=object)
    reason = pd.Series([None] * len(out), index=out.index, dtype=object)
    passed = pd.Series(True, index=out.index)
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
            kept = out[call.name].map(lambda a, f=f: _kept(f, a))
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
    con = duckdb.connect()
    try:
        con.register("t", frame)
        values = con.execute(condition_values_sql(predicate, "t")).fetchnumpy()
    finally:
        con.close()
    return pd.Series(next(iter(values.values())).astype(bool), index=frame.index)


def run_answer(result: pd.DataFrame, query: LLMQuery) -> pd.DataFrame:
    """The query's output: projected passing rows, or the aggregate per group."""
    rows = result[result["passed"] & (result["status"] == "answered")]
    names = query.output_names()
    agg = query.aggregate
    if agg is None:
        return rows[list(query.projection_columns())].reset_index(drop=True)
    groups = [names[c] for c in agg.group_by]
    values = pd.to_numeric(rows[agg.call_name], errors="coerce")
    frame = rows[groups].assign(_value=values)
    func = {"AVG": "mean", "SUM": "sum", "COUNT": "count", "MIN": "min", "MAX": "max"}
    grouped = frame.groupby(groups, dropna=False)["_value"].agg(func[agg.function])
    out = grouped.rename(agg.alias).reset_index()
    return out[list(query.projection_columns())]


def accounting(result: pd.DataFrame, rows_joined: int) -> dict[str, int]:
    """Counts of the query's input rows by status; invariant: they sum to `rows_in`."""
    counts = result["status"].value_counts()
    by_predicate = rows_joined - len(result)
    return {
        "rows_in": rows_joined,
        "answered": int(counts.get("answered", 0)),
        "skipped": int(counts.get("skipped", 0)) + by_predicate,
        "failed": int(counts.get("failed", 0)),
        "rows_skipped_by_predicate": by_predicate,
        "rows_passed": int(result["passed"].sum()),
    }
