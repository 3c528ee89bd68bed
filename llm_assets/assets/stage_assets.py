"""The LLM stages of a query lineage and its end: per LLM call `deduped` + `request_plan`
(one planning pass) and `llm_outputs` (sent through the component's `execute`), then `result`
and `answer`, with their checks. The assets before them are in `builders.py`."""

import time
from collections.abc import Callable

import dagster as dg
import pandas as pd

from llm_assets.assets import checks
from llm_assets.assets.builders import (
    COMMON,
    ORDER,
    _arg,
    _calls,
    _ins,
    _options,
    _order_in,
    _partitions,
    _previous,
)
from llm_assets.assets.definition import QueryDefinition
from llm_assets.assets.tracking import log_llm_run
from llm_assets.pipeline.guard import guarded_plan
from llm_assets.pipeline.plan import first_prompt, relquery_id
from llm_assets.pipeline.quality import SIM_NOTE, quality_metrics, stage_quality
from llm_assets.pipeline.results import accounting, row_counts, run_answer, run_result
from llm_assets.pipeline.rows import INPUT, stage_input
from llm_assets.pipeline.send import StageSend, replica_counts
from llm_assets.query.parts import LLMCall

# ---- one LLM stage ------------------------------------------------------------------------


def send(context: dg.AssetExecutionContext, stage: StageSend):
    """The default `execute` of an LLM stage: `stage.send()` (`pipeline.send.send_stage`)."""
    return stage.send()


Execute = Callable[[dg.AssetExecutionContext, StageSend], tuple]
"""How `llm_outputs` sends its stage: (context, StageSend) -> (outputs, outcome)."""


def stage_assets(qdef: QueryDefinition, k: int, call: LLMCall, execute: Execute = send) -> list:
    """deduped + request_plan (one multi-asset: both come from one planning pass) and
    llm_outputs of LLM call k, with their checks. `llm_outputs` sends through `execute`
    (`LLMQueryComponent.execute`; by default `send`)."""
    s = qdef.stage_suffix(k)
    engine_key = qdef.engine_key
    # the last stage's answers are the ones compared with the label column, if any
    labelled = qdef.label_column is not None and k == len(qdef.query.llm_calls) - 1
    what = f"LLM stage {k + 1} (its call: {ORDER})" if qdef.reorders_filters else call.name

    @dg.multi_asset(
        name=f"{qdef.name}_plan{s}",
        outs={
            "deduped": dg.AssetOut(
                key=qdef.key(f"deduped{s}"),
                kinds={"pandas"},
                description=f"Rows for {what} with exact-dedup input ids.",
            ),
            "request_plan": dg.AssetOut(
                key=qdef.key(f"request_plan{s}"),
                kinds={"pandas"},
                description=f"Prompts for {what} in submission order (row/field reorder).",
            ),
        },
        ins=_ins(qdef, k),
        group_name=qdef.name,
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        # the response cache: the field-order guard's sample answers are stored there, so
        # llm_outputs reuses them
        required_resource_keys=COMMON | {engine_key, "response_cache"},
    )
    def plan(context: dg.AssetExecutionContext, **ins):
        options = _options(context, qdef)
        engine = getattr(context.resources, engine_key).engine
        rows = stage_input(ins["base"], qdef.query, _previous(qdef, k, ins), options.pushdown)
        started = time.perf_counter()
        cache = context.resources.response_cache.cache()
        call = _calls(qdef, ins)[k]
        deduped, planned, guard, _ = guarded_plan(
            qdef.query, call, rows, options, engine, cache=cache
        )
        if guard.verdict != "off":
            context.log.info(f"{relquery_id(qdef.query, call)}: field-order guard: {guard.reason}")
        live = deduped[deduped[INPUT] >= 0]
        yield dg.Output(
            deduped,
            output_name="deduped",
            metadata={
                "rows": len(deduped),
                "skipped": int(deduped["_skip"].notna().sum()),
                "distinct_inputs": len(planned),
                "dedup_ratio": len(planned) / len(live) if len(live) else 1.0,
            },
        )
        yield dg.Output(
            planned,
            output_name="request_plan",
            metadata={
                "n_requests": len(planned),
                "method": options.method,
                "reorder_s": round(time.perf_counter() - started, 4),
                "truncated": int(planned["truncated"].sum()),
                "too_long": int(planned["error"].notna().sum()),
                "prompt_style": options.prompt_style,
                "first_prompt": dg.MetadataValue.text(first_prompt(planned) or ""),
                "field_order_guard": dg.MetadataValue.json(guard.report()),
            },
        )

    @dg.asset(
        key=qdef.key(f"llm_outputs{s}"),
        ins={
            "plan": dg.AssetIn(qdef.key(f"request_plan{s}")),
            "deduped": dg.AssetIn(qdef.key(f"deduped{s}")),
            **_order_in(qdef),
        },
        group_name=qdef.name,
        kinds={qdef.engine_kind},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        required_resource_keys=COMMON | {engine_key, "response_cache", "tracker"},
        # one concurrency pool per engine: concurrent runs never send more LLM stages at once
        # than its limit (`dagster instance concurrency set llm_engine 2`)
        pool=engine_key,
        description=f"Answers of {what}, one row per distinct request.",
    )
    def llm_outputs(context: dg.AssetExecutionContext, plan: pd.DataFrame, deduped, **order):
        options = _options(context, qdef)
        engine_resource = getattr(context.resources, engine_key)
        this = _calls(qdef, order)[k]
        relquery = relquery_id(qdef.query, this)
        started = time.perf_counter()
        cache = context.resources.response_cache.cache()
        context.log.info(f"{relquery}: {int(plan['error'].isna().sum()):,} requests to send")

        def progress(done: int, total: int) -> None:
            context.log.info(f"{relquery}: {done:,}/{total:,} requests done")

        def report(outputs: pd.DataFrame, sent) -> None:
            """Metrics and the MLflow run, also for a stage that then fails its error guard
            (answered requests are in the response cache: a rerun sends the rest)."""
            live = deduped[deduped[INPUT] >= 0]
            quality = stage_quality(deduped, outputs, this.output, labelled)
            metrics = {
                "wall_time_s": time.perf_counter() - started,
                "rows_to_llm": len(live),
                "dedup_ratio": len(plan) / len(live) if len(live) else 1.0,
                "errors": int(outputs["error"].notna().sum()),
                "spec_violations": int(outputs["violation"].notna().sum()),
                "cache_hits": sent.cache_hits,
                "requests_sent": sent.sent,
                **row_counts(deduped, outputs),
                **quality_metrics(quality),
                **guard_metrics(context, qdef.key(f"request_plan{s}")),
            }
            data = qdef.data_label(_partitions(context))
            meta = log_llm_run(
                context, qdef, options, engine_resource, sent.stats, metrics, data=data
            )
            if sent.stats.engine == "sim":
                meta["quality_note"] = SIM_NOTE
            if replicas := replica_counts(outputs):
                meta["replica_answers"] = replicas
            if labelled:
                meta["label_column"] = qdef.label_column
            context.add_output_metadata(meta)

        stage = StageSend(
            engine_resource.engine,
            relquery,
            plan,
            this,
            options,
            cache=cache,
            progress=progress,
            report=report,
        )
        outputs, _ = execute(context, stage)
        # an Output, not the bare frame: a stage sent as a Ray job through Dagster Pipes
        # (`ray_submit="job"`) puts the step in Dagster's typed-event mode
        return dg.Output(outputs)

    return [plan, llm_outputs, *checks.stage_checks(qdef, k, call)]


def guard_metrics(context: dg.AssetExecutionContext, plan_key: dg.AssetKey) -> dict:
    """The field-order guard's figures (`pipeline.guard`) as `guard_*` metrics for the stage's
    MLflow run, read from this run's materialization of its request_plan (where the guard
    decided); {} when the guard was off. `guard_kept_planned_order` is 1 or 0."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=plan_key, storage_ids=None), limit=5
    ).records
    for record in records:
        if record.run_id != context.run.run_id:
            continue
        materialization = record.asset_materialization
        if context.has_partition_key and materialization.partition != context.partition_key:
            continue
        entry = materialization.metadata.get("field_order_guard")
        guard = entry.value if entry is not None else {}
        if guard.get("verdict") in (None, "off"):
            return {}
        numbers = ("agreement", "agreement_low", "requests", "prompt_tokens", "seconds",
                   "share_of_stage_chars")  # fmt: skip
        out = {f"guard_{k}": guard[k] for k in numbers if guard.get(k) is not None}
        out["guard_kept_planned_order"] = int(guard["verdict"] == "kept planned order")
        return out
    return {}


# ---- result and answer ------------------------------------------------------------------------


def result_assets(qdef: QueryDefinition) -> list:
    n = len(qdef.query.llm_calls)

    @dg.asset(
        key=qdef.key("result"),
        ins=_ins(qdef, n),
        group_name=qdef.name,
        kinds={"pandas"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        required_resource_keys=COMMON,
        description="Every row of the join with its answers, status (answered / skipped / "
        "failed) and reason.",
    )
    def result(context: dg.AssetExecutionContext, **ins):
        options = _options(context, qdef)
        out = run_result(ins["base"], qdef.query, _previous(qdef, n, ins), options.pushdown)
        context.add_output_metadata(accounting(out))
        return out

    # `SELECT *` reads the tables' columns by source row number
    by_alias = {s.alias: s.table for s in qdef.query.sources}
    stars = sorted({by_alias[a] for a in qdef.query.star_aliases})

    @dg.asset(
        key=qdef.key("answer"),
        ins={"result": dg.AssetIn(qdef.key("result"))}
        | {_arg(t): dg.AssetIn(qdef.source_key(t)) for t in stars},
        group_name=qdef.name,
        kinds={"pandas"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        description="The query's output: projected rows that passed, or the aggregate.",
    )
    def answer(context: dg.AssetExecutionContext, result: pd.DataFrame, **tables):
        try:
            out = run_answer(result, qdef.query, {t: tables[_arg(t)] for t in stars})
        except ValueError as exc:
            raise dg.Failure(str(exc)) from None
        preview = out.head(5).to_markdown(index=False)
        context.add_output_metadata({"rows": len(out), "preview": dg.MetadataValue.md(preview)})
        return out

    return [result, answer, checks.result_check(qdef)]
