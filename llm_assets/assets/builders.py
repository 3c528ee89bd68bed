"""Small builders, one per stage, that the factory assembles into a query lineage:

    <sources>  ->  filtered  [-> retrieved | -> pairs]  [-> llm_filter_order]  ->  deduped
      -> request_plan -> llm_outputs  [-> deduped_2 -> request_plan_2 -> llm_outputs_2 ...]
      ->  result -> answer

This module builds the assets up to the LLM stages; `stage_assets.py` the LLM stages, `result`
and `answer`. Each asset is a thin wrapper over `llm_assets.pipeline` functions; checks are
in `checks.py`.
Resources are looked up by key (`options`, `gx`, `tracker`, `response_cache` and the query's
engine key), so one code location can run queries on different engines.
"""

import dagster as dg
import pandas as pd

from llm_assets.assets import checks
from llm_assets.assets.definition import QueryDefinition, partitions_label
from llm_assets.pipeline.filtering import pair_sides, run_filtered
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.quality import with_labels
from llm_assets.pipeline.results import check_answer
from llm_assets.pipeline.retrieval import retrieve
from llm_assets.pipeline.rows import SKIP
from llm_assets.pipeline.typecheck import check_predicates
from llm_assets.query.parts import LLMCall
from llm_assets.query.render import pre_llm_sql

COMMON = {"options", "gx"}


def _options(context, qdef: QueryDefinition) -> QueryOptions:
    return context.resources.options.apply(qdef.options)


def _partitions(context) -> list[str]:
    """The landed files (partition keys) this run covers, in partition order: one, or a range
    when a backfill or the landing sensor packs several files into one run."""
    partitioned = context.has_partition_key or context.has_partition_key_range
    return list(context.partition_keys) if partitioned else []


def _failure(context, qdef: QueryDefinition, error: Exception) -> dg.Failure:
    """A step's one-line failure; in a landed file's run it names the file(s) first."""
    keys = _partitions(context) if qdef.landing is not None else []
    if not keys:
        return dg.Failure(str(error))
    files = "file" if len(keys) == 1 else "files"
    where = f"landed {files} {partitions_label(keys)} in {qdef.landing.folder}"
    return dg.Failure(f"{where}: {error}")


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
            labelled = qdef.label_column is not None
            out = run_filtered(
                qdef.query,
                by_table,
                options.pushdown,
                options.max_pairs,
                options.retriever,
                source_rows=labelled or bool(qdef.query.star_aliases),  # `*`: read by row
            )
            if labelled:  # each row's label, by source row: never an LLM field
                out = with_labels(qdef.query, by_table, out, qdef.label_column)
            check_answer(qdef.query, out, by_table)  # the SQL after the LLM binds
        except ValueError as exc:
            raise _failure(context, qdef, exc) from None
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


def pairs_asset(qdef: QueryDefinition) -> dg.AssetsDefinition:
    """A semantic join's candidate pairs (the rows of `filtered`), each asked once: counted
    and bounded by `max_pairs` before anything was materialised (`run_filtered`), checked
    here for the bound and for duplicates, with each side's size in the metadata."""
    query = qdef.query
    key = qdef.key("pairs")
    specs = [dg.AssetCheckSpec(n, asset=key, blocking=True) for n in checks.PAIR_CHECKS]

    @dg.asset(
        key=key,
        ins={"filtered": dg.AssetIn(qdef.key("filtered"))},
        group_name=qdef.name,
        kinds={"pandas"},
        partitions_def=qdef.partitions_def,
        backfill_policy=qdef.backfill_policy,
        check_specs=specs + checks.fields_check_specs(qdef, "pairs"),
        required_resource_keys=COMMON,
        description="Candidate pairs of the semantic join (an LLM predicate in JOIN ON), "
        "each asked once; bounded by max_pairs.",
    )
    def pairs(context: dg.AssetExecutionContext, filtered: pd.DataFrame):
        options = _options(context, qdef)
        sides = pair_sides(query, filtered)
        yield dg.Output(
            filtered,
            metadata={
                "candidate_pairs": len(filtered),
                "max_pairs": options.max_pairs,
                **{f"rows_of_{alias}": n for alias, n in sides.items()},
            },
        )
        problems = checks.pair_problems(filtered, query, options.max_pairs)
        for name in checks.PAIR_CHECKS:
            yield dg.AssetCheckResult(
                check_name=name,
                passed=not problems[name],
                metadata={"problems": "; ".join(problems[name]) or "none"},
            )
        yield checks.fields_check(qdef, filtered, options, context.resources.gx)

    return pairs


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
