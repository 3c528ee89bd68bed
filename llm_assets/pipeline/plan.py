"""One LLM stage's plan: its input rows, exact dedup, the prompts in submission order (GGR
row and field reorder) and the context-window fit. Nothing is sent here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.dedup import dedup_rows
from llm_assets.optimizer.prompts import PromptFormat, fit_row, parse, render_prompts
from llm_assets.optimizer.table import EncodedTable
from llm_assets.pipeline.options import CONTEXT_POLICIES, NULL_POLICIES, QueryOptions
from llm_assets.pipeline.rows import INPUT, ROW
from llm_assets.query import LLMCall, LLMQuery, bare_name
from resources.engine import LLMEngine

TOO_LONG_HINT = {
    "fail": "use 'truncate' to cut the longest field",
    "truncate": "even with the longest field cut to nothing it does not fit",
}


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


def relquery_id(query: LLMQuery, call: LLMCall) -> str:
    """The relQuery one LLM stage's requests belong to (`<query>:<call>`): the scheduler's
    unit, the request ids' prefix and the name progress and logs use."""
    return f"{query.name}:{call.name}"


def plan_stage(
    query: LLMQuery,
    call: LLMCall,
    rows: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    relquery: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(deduped, request_plan) of one LLM call over its input rows (`stage_input`): exact
    dedup, then the prompts in submission order fitted to the engine's context window.
    `relquery` (default `relquery_id`) prefixes the request ids."""
    columns = placeholder_columns(query, call, rows)
    fields = [c for cs in columns.values() for c in cs]
    deduped = run_dedup(rows, fields, options.dedup, options.null_policy)
    max_tokens = call_max_tokens(call, options)
    limit, count_tokens = context_limit(engine, options, max_tokens)
    plan = run_plan(
        deduped,
        call,
        fields,
        options.method,
        options.prompt_style,
        relquery or relquery_id(query, call),
        options.system_prompt,
        max_prompt_tokens=limit,
        count_tokens=count_tokens,
        context_policy=options.context_policy,
        columns=columns,
    )
    return deduped, plan
