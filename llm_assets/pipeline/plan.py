"""One LLM stage's plan: its input rows, exact dedup, the prompts in submission order (GGR
row and field reorder) and the context-window fit. Nothing is sent here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from llm_assets.optimizer.passes import RULES, Rule, Settings, StagePlan, dedup, optimize
from llm_assets.optimizer.prompts import PromptFormat, parse
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import object_array
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.rows import INPUT, ROW
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine


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


def _deduped_frame(rows: pd.DataFrame, stage: StagePlan) -> pd.DataFrame:
    """`rows` with `_skip` and `_input_id` added: a new frame over the same column arrays
    (nothing here or downstream writes into `rows`; a copy held ~0.5 GB more at 10M rows)."""
    out = rows.copy(deep=False)
    out["_skip"] = pd.Series(stage.skipped(), index=out.index, dtype=object)
    out[INPUT] = stage.ids()
    return out


def _request_plan_frame(stage: StagePlan, relquery: str) -> pd.DataFrame:
    if not stage.prompts:
        names = ["position", INPUT, "request_id", "prompt", "field_order", "truncated", "error"]
        return pd.DataFrame({c: [] for c in names})
    schedule = Schedule.from_pairs(stage.schedule)
    ids = stage.ids()
    ids = np.unique(ids[ids >= 0])[schedule.rows]
    orders = np.array([",".join(o) for o in schedule.orders] or [""], dtype=object)
    return pd.DataFrame(
        {
            "position": np.arange(len(schedule), dtype=np.int64),
            INPUT: ids,
            "request_id": _request_ids(relquery, ids),
            "prompt": object_array(stage.prompts),
            "field_order": orders[schedule.order_ids],  # a few distinct strings, shared
            "truncated": np.fromiter(stage.truncated, bool, len(stage.truncated)),
            "error": object_array(stage.errors),
        },
        copy=False,  # the columns as built: no list copies, no block of them all (GBs at 10M)
    )


def _request_ids(relquery: str, ids: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """`relquery:id` for each input id, as an object array built `chunk` ids at a time (the
    ids as one list of Python ints held ~0.3 GB more at 10M rows)."""
    out = np.empty(len(ids), dtype=object)
    for start in range(0, len(ids), chunk):
        out[start : start + chunk] = [
            f"{relquery}:{i}" for i in ids[start : start + chunk].tolist()
        ]
    return out


_AFTER_DEDUP = RULES.index(dedup) + 1
"""`run_dedup` applies the rules up to dedup, `run_plan` the rest: together, `RULES`."""


def run_dedup(
    rows: pd.DataFrame, fields: list[str], dedup: bool, null_policy: str = "skip"
) -> pd.DataFrame:
    """`rows` with `_input_id` (equal for rows whose LLM inputs are equal when `dedup`,
    else one per row) and `_skip` (reason, or None). Skipped rows get `_input_id` -1.
    The optimizer rules up to `dedup` (`optimizer.passes`)."""
    settings = Settings(dedup=dedup, null_policy=null_policy)
    stage = StagePlan(rows, tuple(fields), None, row_ids=rows[ROW].to_numpy())
    return _deduped_frame(rows, optimize(stage, settings, RULES[:_AFTER_DEDUP]))


def prompt_format(
    call: LLMCall,
    style: str = "named",
    system: str = "",
    columns: Mapping[str, Sequence[str]] | None = None,
) -> PromptFormat:
    """How `call`'s prompts read (`llm_assets.optimizer.prompts`)."""
    template = parse(call.template, call.field_names)
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
    `truncated`; `context_policy="truncate"`) or gets an `error` and is never sent ("fail").
    The optimizer rules after `dedup` (`optimizer.passes`), over `run_dedup`'s output."""
    settings = Settings(
        method=method,
        max_prompt_tokens=max_prompt_tokens,
        count_tokens=count_tokens,
        context_policy=context_policy,
    )
    stage = StagePlan(
        deduped,
        tuple(fields),
        prompt_format(call, style, system, columns),
        skip=deduped["_skip"].to_numpy(dtype=object),
        input_ids=deduped[INPUT].to_numpy(),
    )
    return _request_plan_frame(optimize(stage, settings, RULES[_AFTER_DEDUP:]), relquery)


def sendable(plan: pd.DataFrame) -> np.ndarray:
    """Positions of the rows of a request plan that are sent: those without a planning
    error. Positions, not a copy of the rows (a copy held ~750 MB more at 10M rows)."""
    if "error" not in plan:
        return np.arange(len(plan))
    return np.flatnonzero(plan["error"].isna().to_numpy())


def first_prompt(plan: pd.DataFrame) -> str | None:
    """The first prompt `plan` sends (None when it sends none), exactly as sent."""
    rows = sendable(plan)
    return str(plan["prompt"].iat[int(rows[0])]) if len(rows) else None


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
    rules: Sequence[Rule] = RULES,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(deduped, request_plan) of one LLM call over its input rows (`stage_input`): the
    optimizer `rules` (nulls, exact dedup, row/field reorder, prompts, context-window fit)
    over one `StagePlan`. `relquery` (default `relquery_id`) prefixes the request ids. With
    `options.num_plan_shards` > 1 the rules up to the reorder run per shard in Ray tasks
    (`optimizer.passes.sharded.optimize_sharded`, `resources.ray_executor.planning`)."""
    columns = placeholder_columns(query, call, rows)
    fields = [c for cs in columns.values() for c in cs]
    max_tokens = call_max_tokens(call, options)
    limit, count_tokens = context_limit(engine, options, max_tokens)
    settings = Settings(
        method=options.method,
        reorder_fields=options.reorder_fields,
        dedup=options.dedup,
        null_policy=options.null_policy,
        max_prompt_tokens=limit,
        count_tokens=count_tokens,
        tokens_within_chars=getattr(engine, "tokens_within_chars", False),
        tokenize=getattr(engine, "token_encoder", None),
        block_size=getattr(engine, "kv_block_size", None),
        context_policy=options.context_policy,
    )
    fmt = prompt_format(call, options.prompt_style, options.system_prompt, columns)
    stage = StagePlan(rows, tuple(fields), fmt, row_ids=rows[ROW].to_numpy())
    if options.num_plan_shards > 1:
        from llm_assets.optimizer.passes.sharded import optimize_sharded
        from resources.ray_executor.planning import map_on_ray

        stage = optimize_sharded(stage, settings, options.num_plan_shards, rules, map_on_ray)
    else:
        stage = optimize(stage, settings, rules)
    return _deduped_frame(rows, stage), _request_plan_frame(
        stage, relquery or relquery_id(query, call)
    )
