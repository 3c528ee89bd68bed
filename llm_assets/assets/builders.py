"""Small builders, one per stage, that the factory assembles into a query lineage:

    <sources>  ->  filtered  [-> embeddings, retrieved]  ->  deduped -> request_plan
      -> llm_outputs  [-> deduped_2 -> request_plan_2 -> llm_outputs_2 ...]  ->  result -> answer

Each asset is a thin wrapper over `llm_assets.pipeline` functions; checks are in `checks.py`.
Resources are looked up by key (`options`, `gx`, `tracker`, `response_cache` and the query's
engine key), so one code location can run queries on different engines.
"""

import time
from collections.abc import Callable

import dagster as dg
import pandas as pd

from llm_assets.assets import checks
from llm_assets.assets.definition import QueryDefinition
from llm_assets.assets.tracking import log_llm_run
from llm_assets.pipeline.filtering import run_filtered
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import first_prompt, plan_stage, relquery_id
from llm_assets.pipeline.results import accounting, row_counts, run_answer, run_result
from llm_assets.pipeline.retrieval import retrieve
from llm_assets.pipeline.rows import INPUT, SKIP, stage_input
from llm_assets.pipeline.send import StageSend
from llm_assets.pipeline.typecheck import check_predicates
from llm_assets.query_parts import LLMCall
from llm_assets.query_sql import pre_llm_sql

COMMON = {"options", "gx"}


def _options(context, qdef: QueryDefinition) -> QueryOptions:
    return context.resources.options.apply(qdef.options)


def _partitions(context) -> list[str]:
    """The landed files (partition keys) this run covers, in partition order: one, or a range
    when a backfill or the landing sensor packs several files into one run."""
    partitioned = context.has_partition_key or context.has_partition_key_range
    return list(context.partition_keys) if partitioned else []


ORDER = checks.ORDER


def _order_in(qdef: QueryDefinition) -> dict[str, dg.AssetIn]:
    return {"filter_order": dg.AssetIn(qdef.key(ORDER))} if qdef.reorders_filters else {}


def _calls(qdef: QueryDefinition, ins: dict) -> tuple[LLMCall, ...]:
    """The LLM calls in the order the stages run them (`QueryDefinition.run_order`)."""
    return qdef.run_order(ins.get("filter_order"))


def _ins(qdef: QueryDefinition, k: int) -> dict[str, dg.AssetIn]:
    """Inputs of stage k (and of `result` with k = number of calls): the base relation,
    every earlier stage's deduped rows and outputs, and the run's call order if it has one."""
    ins = {"base": dg.AssetIn(qdef.key(qdef.base)), **_order_in(qdef)}
    for j in range(k):
        s = qdef.stage_suffix(j)
        ins[f"deduped_{j}"] = dg.AssetIn(qdef.key(f"deduped{s}"))
        ins[f"outputs_{j}"] = dg.AssetIn(qdef.key(f"llm_outputs{s}"))
    return ins


def _previous(qdef: QueryDefinition, k: int, ins: dict) -> list[tuple]:
    calls = _calls(qdef, ins)
    return [(calls[j], ins[f"deduped_{j}"], ins[f"outputs_{j}"]) for j in range(k)]


def _arg(name: str) -> str:
    """A Python parameter name for a table name (table names are identifiers already)."""
    return f"t_{name}"


# ---- sources ----------------------------------------------------------------------------


def source_asset(qdef: QueryDefinition, table: str) -> dg.AssetsDefinition:
    """The table read from its file or DuckDB table by the one loader (a landed file when the
    table is the landing table: the run's partition key names it)."""
    spec = qdef.sources[table]
    landed = table == qdef.landed_table

    @dg.asset(
        key=qdef.source_key(table),
        group_name=qdef.name,
        kinds={"duckdb" if spec.duckdb_table else "file"},
        partitions_def=qdef.partitions_def if landed else None,
        backfill_policy=qdef.backfill_policy if landed else None,
        description=f"Table {table!r} of query {qdef.name}: "
        + ("each landed file" if landed else spec.label),
    )
    def source(context: dg.AssetExecutionContext):
        paths = None
        if landed:
            from llm_assets.assets.landing import landed_path

            if not _partitions(context):
                raise dg.Failure(
                    f"{context.asset_key.to_user_string()} reads one landed file per partition: "
                    f"launch it with a partition (dg launch --partition <file name>, or a range "
                    f"with --partition-range), or turn on the sensor {qdef.name}_landing"
                )
            # every file of the run's partition range, concatenated: one table to plan; only
            # files inside the landing folder (no `../x.csv`, absolute path or link out)
            try:
                paths = [str(landed_path(qdef.landing.folder, k)) for k in _partitions(context)]
            except ValueError as error:
                raise dg.Failure(f"{context.asset_key.to_user_string()}: {error}") from None
        frame = spec.read(paths)
        context.add_output_metadata(
            {
                "rows": frame.num_rows,
                "columns": ", ".join(frame.column_names),
                "data": qdef.data_label(_partitions(context)) if landed else spec.label,
                **({"files": len(paths)} if landed else {}),
            }
        )
        return frame

    return source


# ---- filtered and retrieval -------------------------------------------------------------


def filtered_asset(qdef: QueryDefinition) -> dg.AssetsDefinition:
    tables = sorted({s.table for s in qdef.query.sources})

    @dg.asset(
        key=qdef.key("filtered"),
        ins={_arg(t): dg.AssetIn(qdef.source_key(t)) for t in tables},
        group_name=qdef.name,
        kinds={"duckdb"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        check_specs=checks.fields_check_specs(qdef, "filtered"),
        required_resource_keys=COMMON,
        description="Join of the sources; rows a pushed-down predicate removes are marked "
        "skipped with the reason (DuckDB, locked connection).",
    )
    def filtered(context: dg.AssetExecutionContext, **frames):
        options = _options(context, qdef)
        by_table = {t: frames[_arg(t)] for t in tables}
        try:  # a landed file or an asset: checked here, one line
            check_predicates(qdef.query, by_table)
            out = run_filtered(qdef.query, by_table, options.pushdown)
        except ValueError as exc:
            raise dg.Failure(str(exc)) from None
        sql = pre_llm_sql(qdef.query, options.pushdown)
        kept = int(out[SKIP].isna().sum())
        yield dg.Output(
            out,
            metadata={
                "rows_joined": len(out),
                "rows": kept,
                "rows_removed_by_predicate": len(out) - kept,
                "pushdown": options.pushdown,
                "data": qdef.data_label(_partitions(context)),
                "sql": dg.MetadataValue.md(f"```sql\n{sql}\n```"),
            },
        )
        if qdef.base == "filtered":
            yield checks.fields_check(qdef, out, options, context.resources.gx)

    return filtered


def retrieved_asset(qdef: QueryDefinition) -> dg.AssetsDefinition:
    """The k nearest corpus values per row (the index is rebuilt from the corpus each run:
    TF-IDF over distinct values is cheap and nothing stale can be read)."""
    query = qdef.query
    tables = sorted({s.table for s in query.sources})
    ks = ", ".join(f"{r.name}: k={r.k}" for r in query.retrievals)

    @dg.asset(
        key=qdef.key("retrieved"),
        ins={
            "filtered": dg.AssetIn(qdef.key("filtered")),
            **{_arg(t): dg.AssetIn(qdef.source_key(t)) for t in tables},
        },
        group_name=qdef.name,
        kinds={"scikitlearn"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        check_specs=checks.fields_check_specs(qdef, "retrieved"),
        required_resource_keys=COMMON,
        description=f"The nearest corpus values per row as separate fields ({ks}).",
    )
    def retrieved(context: dg.AssetExecutionContext, filtered: pd.DataFrame, **frames):
        options = _options(context, qdef)
        by_table = {t: frames[_arg(t)] for t in tables}
        out = retrieve(query, by_table, filtered, options.retriever)
        yield dg.Output(out, metadata={"rows": len(out), "retriever": options.retriever})
        yield checks.fields_check(qdef, out, options, context.resources.gx)

    return retrieved


# ---- LLM filter order ----------------------------------------------------------------------


def filter_order_asset(qdef: QueryDefinition) -> dg.AssetsDefinition:
    """Several LLM filters run cheapest first: each is sent a seeded sample of the rows, and
    they are ordered by tokens per row / (1 - share kept) (`llm_assets.planning`)."""
    from llm_assets.pipeline.filter_order import estimate_filter_order

    @dg.asset(
        key=qdef.key(ORDER),
        ins={"base": dg.AssetIn(qdef.key(qdef.base))},
        group_name=qdef.name,
        kinds={"pandas"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        required_resource_keys=COMMON | {qdef.engine_key},
        pool=qdef.engine_key,
        description="The order the LLM filters run in: cheapest first by cost / (1 - "
        "selectivity), selectivity from a seeded sample of rows sent first.",
    )
    def llm_filter_order(context: dg.AssetExecutionContext, base: pd.DataFrame):
        options = _options(context, qdef)
        engine = getattr(context.resources, qdef.engine_key).engine
        order = estimate_filter_order(qdef.query, base, options, engine)
        report = order.report()
        context.add_output_metadata(
            {
                "written_order": ", ".join(order.written),
                "chosen_order": ", ".join(order.chosen),
                "expected_tokens_per_row_written": report["expected_tokens_per_row_written"],
                "expected_tokens_per_row_chosen": report["expected_tokens_per_row_chosen"],
                "sample_requests": order.sample_requests,
            }
        )
        return pd.DataFrame(
            {
                "call": list(order.chosen),
                "tokens_per_row": [order.estimates[c][0] for c in order.chosen],
                "selectivity": [order.estimates[c][1] for c in order.chosen],
            }
        )

    return llm_filter_order


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
        required_resource_keys=COMMON | {engine_key},
    )
    def plan(context: dg.AssetExecutionContext, **ins):
        options = _options(context, qdef)
        engine = getattr(context.resources, engine_key).engine
        rows = stage_input(ins["base"], qdef.query, _previous(qdef, k, ins))
        started = time.perf_counter()
        deduped, planned = plan_stage(qdef.query, _calls(qdef, ins)[k], rows, options, engine)
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
            metrics = {
                "wall_time_s": time.perf_counter() - started,
                "rows_to_llm": len(live),
                "dedup_ratio": len(plan) / len(live) if len(live) else 1.0,
                "errors": int(outputs["error"].notna().sum()),
                "spec_violations": int(outputs["violation"].notna().sum()),
                "cache_hits": sent.cache_hits,
                "requests_sent": sent.sent,
                **row_counts(deduped, outputs),
            }
            data = qdef.data_label(_partitions(context))
            meta = log_llm_run(
                context, qdef, options, engine_resource, sent.stats, metrics, data=data
            )
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
        return outputs

    return [plan, llm_outputs, *checks.stage_checks(qdef, k, call)]


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

    @dg.asset(
        key=qdef.key("answer"),
        ins={"result": dg.AssetIn(qdef.key("result"))},
        group_name=qdef.name,
        kinds={"pandas"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        description="The query's output: projected rows that passed, or the aggregate.",
    )
    def answer(context: dg.AssetExecutionContext, result: pd.DataFrame):
        out = run_answer(result, qdef.query)
        preview = out.head(5).to_markdown(index=False)
        context.add_output_metadata({"rows": len(out), "preview": dg.MetadataValue.md(preview)})
        return out

    return [result, answer, checks.result_check(qdef)]
