"""Asset factories: one Dagster lineage per benchmark query and dataset (DESIGN.md section 1).

    <dataset>/<table>  ->  <group>/filtered  [-> embeddings, retrieved]  ->  deduped
      -> request_plan -> llm_outputs  [-> deduped_2 -> request_plan_2 -> llm_outputs_2]
      -> result -> answer

Each asset is a thin wrapper over a pure function of `llm_assets.assets.stages`; checks sit
beside their assets. Tables live in DuckDB through the `io_manager` resource; the retriever
(`embeddings`) is pickled by `pickle_io_manager`.
"""

import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from llm_assets.assets import stages
from llm_assets.assets.options import QueryOptions
from llm_assets.assets.retrieval import build_retriever
from llm_assets.assets.tracking import log_llm_run
from llm_assets.data import (
    generate,
    load_amazon,
    load_movies_joined,
    load_rotten_tomatoes,
    load_squad_csv,
    load_squad_json,
)
from llm_assets.optimizer.schedule import validate_schedule
from llm_assets.queries import SYSTEM_PROMPTS, compile_query
from llm_assets.query import LLMCall, LLMQuery
from resources.expectations import Expect, GXValidator
from resources.llm_resources import LLMEngineResource, ResponseCacheResource
from resources.runner import run_requests
from resources.tracking import MLflowTracker

DATASET_TABLES: dict[str, tuple[str, ...]] = {
    "movies": ("reviews", "movies"),
    "products": ("reviews", "metadata"),
    "squad": ("squad",),
}


# ---- sources ------------------------------------------------------------------------------


class SourceConfig(dg.Config):
    """Where a dataset comes from: the seeded generator, or real files."""

    size: int | None = Field(default=None, description="Rows to generate (None: the paper's size).")
    seed: int = Field(default=0, description="Generator seed.")
    paths: list[str] = Field(
        default_factory=list,
        description="Real files instead of generated data: movies: one joined CSV (like "
        "movies_small.csv) or [movies.csv, critic_reviews.csv]; products: [reviews.jsonl, "
        "metadata.jsonl]; squad: a SQuAD JSON or a flattened CSV.",
    )


def load_dataset(dataset: str, config: SourceConfig) -> dict[str, pd.DataFrame]:
    """Generated tables, or the loader matching the given paths (ValueError otherwise)."""
    paths = config.paths
    if not paths:
        return generate(dataset, config.size, config.seed)
    if dataset == "movies" and len(paths) == 1:
        return load_movies_joined(paths[0])
    if dataset == "movies" and len(paths) == 2:
        return load_rotten_tomatoes(*paths)
    if dataset == "products" and len(paths) == 2:
        return load_amazon(*paths)
    if dataset == "squad" and len(paths) == 1:
        loader = load_squad_json if paths[0].endswith(".json") else load_squad_csv
        return loader(paths[0])
    raise ValueError(
        f"cannot load {dataset} from {paths}: movies takes 1 joined CSV or 2 Kaggle CSVs, "
        "products 2 JSON-lines files, squad 1 JSON or CSV"
    )


def source_assets(dataset: str) -> dg.AssetsDefinition:
    tables = DATASET_TABLES[dataset]

    @dg.multi_asset(
        name=f"{dataset}_source",
        outs={
            t: dg.AssetOut(key=[dataset, t], description=f"The {dataset} {t} table.")
            for t in tables
        },
        group_name="sources",
        can_subset=False,
    )
    def _source(context: dg.AssetExecutionContext, config: SourceConfig):
        frames = load_dataset(dataset, config)
        label = Path(config.paths[0]).stem if config.paths else dataset
        for t in tables:
            frame = frames[t].reset_index(drop=True)
            if frame.empty:
                origin = f"from {config.paths}" if config.paths else f"size={config.size}"
                raise ValueError(f"{dataset} table {t!r} has no rows ({origin}): nothing to query")
            meta = {"rows": len(frame), "dataset": label, "columns": ", ".join(frame.columns)}
            yield dg.Output(frame, output_name=t, metadata=meta)

    return _source


# ---- query lineages ---------------------------------------------------------------------


@dataclass(frozen=True)
class QuerySpec:
    """One lineage: `group` names its asset group and key prefix (`q1`, `q1_products`)."""

    group: str
    query_name: str
    dataset: str

    @cached_property
    def query(self) -> LLMQuery:
        return compile_query(self.query_name, self.dataset)

    def key(self, name: str) -> dg.AssetKey:
        return dg.AssetKey([self.group, name])

    def stage_suffix(self, k: int) -> str:
        return "" if k == 0 else f"_{k + 1}"

    @property
    def base(self) -> str:
        """The relation stage 1 reads: `retrieved` for retrieval queries, else `filtered`."""
        return "retrieved" if self.query.retrievals else "filtered"


def _latest_metadata(context, key: dg.AssetKey) -> dict:
    event = context.instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        return {}
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def _context_limit(engine, options: QueryOptions, call: LLMCall):
    """(prompt token limit or None, token counter): the engine's context window minus the
    call's output budget, unless `options.max_prompt_tokens` says otherwise."""
    count_tokens = getattr(engine, "count_tokens", None)
    if count_tokens is None:
        from resources.sim.tokenizer import ApproxTokenizer

        count_tokens = ApproxTokenizer().count
    limit = options.max_prompt_tokens
    if limit is None:
        deployment = getattr(engine, "deployment", None)
        window = deployment.model.max_model_len if deployment else None
        window = window or getattr(engine, "max_model_len", None)
        limit = window - call.max_tokens if window else None
    return limit, count_tokens


def _stage_ins(spec: QuerySpec, k: int) -> dict[str, dg.AssetIn]:
    ins = {"base": dg.AssetIn(spec.key(spec.base))}
    for j in range(k):
        s = spec.stage_suffix(j)
        ins[f"deduped_{j}"] = dg.AssetIn(spec.key(f"deduped{s}"))
        ins[f"outputs_{j}"] = dg.AssetIn(spec.key(f"llm_outputs{s}"))
    return ins


def _previous(
    spec: QuerySpec, k: int, ins: dict
) -> list[tuple[LLMCall, pd.DataFrame, pd.DataFrame]]:
    calls = spec.query.llm_calls
    return [(calls[j], ins[f"deduped_{j}"], ins[f"outputs_{j}"]) for j in range(k)]


def query_assets(spec: QuerySpec) -> list:
    """Every asset and check of one query lineage."""
    query = spec.query
    defs: list = [_filtered(spec)]
    if query.retrievals:
        defs += _retrieval(spec)
    for k, call in enumerate(query.llm_calls):
        defs += _llm_stage(spec, k, call)
    defs += _result(spec)
    return defs


def _filtered(spec: QuerySpec) -> dg.AssetsDefinition:
    tables = sorted({s.table for s in spec.query.sources})

    @dg.asset(
        key=spec.key("filtered"),
        ins={t: dg.AssetIn([spec.dataset, t]) for t in tables},
        group_name=spec.group,
        kinds={"duckdb"},
        check_specs=_fields_check_spec(spec, "filtered"),
        description="Join of the sources with the non-LLM predicates pushed down (DuckDB).",
    )
    def filtered(
        context: dg.AssetExecutionContext, options: QueryOptions, gx: GXValidator, **frames
    ):
        options.check()
        out = stages.run_filtered(spec.query, frames, options.pushdown)
        sql = spec.query.pre_llm_sql(options.pushdown)
        yield dg.Output(
            out.frame,
            metadata={
                "rows_joined": out.rows_joined,
                "rows": len(out.frame),
                "pushdown": options.pushdown,
                "sql": dg.MetadataValue.md(f"```sql\n{sql}\n```"),
            },
        )
        if spec.base == "filtered":
            yield _fields_check(spec, out.frame, options, gx)

    return filtered


def _retrieval(spec: QuerySpec) -> list:
    query = spec.query
    if len(query.retrievals) != 1:
        raise ValueError(f"{spec.group}: one similarity_search per query is supported")
    retrieval = query.retrievals[0]
    corpus_table = next(
        s.table for s in query.sources if s.alias == retrieval.corpus_column.split(".")[0]
    )

    @dg.asset(
        key=spec.key("embeddings"),
        ins={"source": dg.AssetIn([spec.dataset, corpus_table])},
        group_name=spec.group,
        io_manager_key="pickle_io_manager",
        kinds={"scikitlearn"},
        description="Search index over the distinct corpus values (TF-IDF by default).",
    )
    def embeddings(context: dg.AssetExecutionContext, options: QueryOptions, source):
        import duckdb

        con = duckdb.connect()
        con.register(corpus_table, source)
        corpus = [v for (v,) in con.execute(query.corpus_sql(retrieval.name)).fetchall()]
        con.close()
        index = build_retriever(options.retriever, corpus)
        context.add_output_metadata({"corpus_size": len(corpus), "retriever": options.retriever})
        return index

    @dg.asset(
        key=spec.key("retrieved"),
        ins={
            "filtered": dg.AssetIn(spec.key("filtered")),
            "index": dg.AssetIn(spec.key("embeddings")),
        },
        group_name=spec.group,
        kinds={"duckdb"},
        check_specs=_fields_check_spec(spec, "retrieved"),
        description=f"The k={retrieval.k} nearest corpus values per row, as separate fields.",
    )
    def retrieved(
        context: dg.AssetExecutionContext,
        options: QueryOptions,
        gx: GXValidator,
        filtered: pd.DataFrame,
        index,
    ):
        column = query.output_names()[retrieval.query_column]
        hits = index.search(filtered[column].fillna("").tolist(), retrieval.k)
        out = filtered.copy()
        for j in range(hits.shape[1]):
            out[f"{retrieval.name}_{j + 1}"] = [index.corpus[i] for i in hits[:, j]]
        yield dg.Output(out, metadata={"rows": len(out), "k": retrieval.k})
        yield _fields_check(spec, out, options, gx)

    return [embeddings, retrieved]


def _llm_stage(spec: QuerySpec, k: int, call: LLMCall) -> list:
    s = spec.stage_suffix(k)
    relquery = f"{spec.group}:{call.name}"

    @dg.asset(
        key=spec.key(f"deduped{s}"),
        ins=_stage_ins(spec, k),
        group_name=spec.group,
        kinds={"pandas"},
        description=f"Rows for LLM call {call.name} with exact-dedup input ids.",
    )
    def deduped(context: dg.AssetExecutionContext, options: QueryOptions, **ins):
        rows = stages.stage_input(ins["base"], spec.query, _previous(spec, k, ins))
        fields = stages.llm_field_columns(spec.query, call, rows)
        out = stages.run_dedup(rows, fields, options.dedup, options.null_policy)
        live = out[out[stages.INPUT] >= 0]
        distinct = int(live[stages.INPUT].nunique())
        context.add_output_metadata(
            {
                "rows": len(out),
                "skipped": int(out["_skip"].notna().sum()),
                "distinct_inputs": distinct,
                "dedup_ratio": distinct / len(live) if len(live) else 1.0,
                "fields": ", ".join(fields),
            }
        )
        return out

    @dg.asset(
        key=spec.key(f"request_plan{s}"),
        ins={"deduped": dg.AssetIn(spec.key(f"deduped{s}"))},
        group_name=spec.group,
        kinds={"pandas"},
        description=f"Prompts for {call.name} in submission order (GGR row/field reordering).",
    )
    def request_plan(
        context: dg.AssetExecutionContext,
        options: QueryOptions,
        llm_engine: LLMEngineResource,
        deduped,
    ):
        fields = stages.llm_field_columns(spec.query, call, deduped)
        started = time.perf_counter()
        system = options.system_prompt
        if system is None:
            system = SYSTEM_PROMPTS.get(spec.query_name, {}).get(spec.dataset, "")
        limit, count_tokens = _context_limit(llm_engine.engine, options, call)
        plan = stages.run_plan(
            deduped,
            call,
            fields,
            options.method,
            options.prompt_style,
            relquery,
            system,
            max_prompt_tokens=limit,
            count_tokens=count_tokens,
            context_policy=options.context_policy,
        )
        context.add_output_metadata(
            {
                "n_requests": len(plan),
                "method": options.method,
                "reorder_s": round(time.perf_counter() - started, 4),
                "max_prompt_tokens": limit or "unchecked",
                "truncated": int(plan["truncated"].sum()),
                "too_long": int(plan["error"].notna().sum()),
                "first_prompt": dg.MetadataValue.text(plan["prompt"].iloc[0] if len(plan) else ""),
            }
        )
        return plan

    @dg.asset(
        key=spec.key(f"llm_outputs{s}"),
        ins={
            "plan": dg.AssetIn(spec.key(f"request_plan{s}")),
            "deduped": dg.AssetIn(spec.key(f"deduped{s}")),
        },
        group_name=spec.group,
        kinds={"vllm"},
        description=f"Answers of LLM call {call.name}, one row per distinct request.",
    )
    def llm_outputs(
        context: dg.AssetExecutionContext,
        options: QueryOptions,
        llm_engine: LLMEngineResource,
        response_cache: ResponseCacheResource,
        tracker: MLflowTracker,
        plan,
        deduped,
    ):
        requests = stages.requests_from_plan(plan, call)
        started = time.perf_counter()
        cache = response_cache.cache()
        # Chunks exist to commit progress to the cache; without one, one batch keeps the
        # engine's batches full (chunk boundaries drain the engine).
        chunk = options.chunk_size if cache.enabled else max(1, len(requests))
        context.log.info(f"{relquery}: {len(requests):,} requests (chunks of {chunk:,})")

        def progress(done: int, total: int) -> None:
            context.log.info(f"{relquery}: {done:,}/{total:,} requests done")

        result = run_requests(
            llm_engine.engine,
            relquery,
            requests,
            cache=cache,
            chunk_size=chunk,
            progress=progress,
        )
        latency = time.perf_counter() - started
        outputs = stages.outputs_frame(plan, result.responses, call)
        filtered_meta = _latest_metadata(context, spec.key("filtered"))
        live = deduped[deduped[stages.INPUT] >= 0]
        metrics = {
            "latency_s": latency,
            "rows_in": filtered_meta.get("rows_joined", len(deduped)),
            "rows_after_filter": filtered_meta.get("rows", len(deduped)),
            "rows_to_llm": len(live),
            "dedup_ratio": len(plan) / len(live) if len(live) else 1.0,
            "errors": int(outputs["error"].notna().sum()),
            "spec_violations": int(outputs["violation"].notna().sum()),
            "cache_hits": result.cache_hits,
            "requests_sent": result.sent,
            **stages.row_counts(deduped, outputs),
        }
        meta = log_llm_run(context, spec, options, llm_engine, tracker, result.stats, metrics)
        context.add_output_metadata(meta)
        failed, total = metrics["errors"], len(outputs)
        if total and failed / total > options.max_error_rate:
            first = outputs["error"].dropna().head(3).tolist()
            raise RuntimeError(
                f"{relquery}: {failed} of {total} requests failed "
                f"({failed / total:.1%} > max_error_rate {options.max_error_rate:.1%}); "
                f"answered ones are kept in the response cache, a rerun resends only the rest; "
                f"first errors: {first}"
            )
        return outputs

    @dg.asset_check(
        asset=spec.key(f"request_plan{s}"),
        blocking=True,
        additional_ins={"deduped": dg.AssetIn(spec.key(f"deduped{s}"))},
    )
    def plan_is_a_permutation(request_plan: pd.DataFrame, deduped: pd.DataFrame):
        """Every distinct input is planned exactly once, in positions 0..n-1."""
        expected = sorted(set(deduped.loc[deduped[stages.INPUT] >= 0, stages.INPUT]))
        problems = []
        if sorted(request_plan["position"]) != list(range(len(request_plan))):
            problems.append("positions are not 0..n-1")
        if sorted(request_plan[stages.INPUT]) != expected:
            problems.append("planned inputs differ from the distinct inputs")
        fields = [f.split(",") for f in request_plan["field_order"]]
        try:
            if fields:
                validate_schedule(
                    list(zip(range(len(fields)), fields, strict=True)), len(fields), fields[0]
                )
        except ValueError as exc:
            problems.append(str(exc))
        return dg.AssetCheckResult(
            passed=not problems, metadata={"problems": "; ".join(problems) or "none"}
        )

    @dg.asset_check(
        asset=spec.key(f"llm_outputs{s}"),
        blocking=True,
        additional_ins={"plan": dg.AssetIn(spec.key(f"request_plan{s}"))},
    )
    def one_response_per_request(llm_outputs: pd.DataFrame, plan: pd.DataFrame, gx: GXValidator):
        """Every distinct request has exactly one response or error row."""
        validation = gx.validate(
            f"{spec.group}_outputs{s}",
            llm_outputs,
            [
                Expect("ExpectTableRowCountToEqual", {"value": len(plan)}),
                Expect("ExpectColumnValuesToBeUnique", {"column": "request_id"}),
                Expect(
                    "ExpectColumnValuesToBeInSet",
                    {"column": "request_id", "value_set": list(plan["request_id"])},
                ),
            ],
        )
        answered = llm_outputs["answer"].notna() | llm_outputs["error"].notna()
        passed = validation.success and bool(answered.all())
        return dg.AssetCheckResult(passed=passed, metadata=validation.metadata())

    @dg.asset_check(asset=spec.key(f"llm_outputs{s}"), blocking=False)
    def answers_obey_output_spec(llm_outputs: pd.DataFrame, gx: GXValidator):
        """Answers are valid for the call's OutputSpec; violations are recorded, not coerced."""
        ok = llm_outputs[llm_outputs["error"].isna()]
        expectations = [Expect("ExpectColumnValuesToBeNull", {"column": "violation"})]
        if call.output.kind == "choice":
            expectations.append(
                Expect(
                    "ExpectColumnValuesToBeInSet",
                    {"column": "answer", "value_set": list(call.output.values)},
                )
            )
        validation = gx.validate(f"{spec.group}_spec{s}", ok, expectations)
        return dg.AssetCheckResult(
            passed=validation.success,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={**validation.metadata(), "output_spec": str(call.output)},
        )

    return [
        deduped,
        request_plan,
        llm_outputs,
        plan_is_a_permutation,
        one_response_per_request,
        answers_obey_output_spec,
    ]


def _result(spec: QuerySpec) -> list:
    n = len(spec.query.llm_calls)

    @dg.asset(
        key=spec.key("result"),
        ins=_stage_ins(spec, n),
        group_name=spec.group,
        kinds={"pandas"},
        description="Every row with its answers, status (answered/skipped/failed) and reason.",
    )
    def result(context: dg.AssetExecutionContext, options: QueryOptions, **ins):
        out = stages.run_result(ins["base"], spec.query, _previous(spec, n, ins), options.pushdown)
        rows_joined = _latest_metadata(context, spec.key("filtered")).get("rows_joined", len(out))
        counts = stages.accounting(out, int(rows_joined))
        context.add_output_metadata(counts)
        return out

    @dg.asset(
        key=spec.key("answer"),
        ins={"result": dg.AssetIn(spec.key("result"))},
        group_name=spec.group,
        kinds={"pandas"},
        description="The query's output: projected rows that passed, or the aggregate.",
    )
    def answer(context: dg.AssetExecutionContext, result: pd.DataFrame):
        out = stages.run_answer(result, spec.query)
        context.add_output_metadata(
            {"rows": len(out), "preview": dg.MetadataValue.md(out.head(5).to_markdown(index=False))}
        )
        return out

    @dg.asset_check(
        asset=spec.key("result"),
        blocking=True,
        additional_ins={"base": dg.AssetIn(spec.key(spec.base))},
    )
    def every_row_accounted_for(
        context: dg.AssetCheckExecutionContext, result: pd.DataFrame, base: pd.DataFrame
    ):
        """answered + skipped + failed == rows in, and result reconciles with its input."""
        rows_joined = _latest_metadata(context, spec.key("filtered")).get("rows_joined", len(base))
        counts = stages.accounting(result, int(rows_joined))
        total = counts["answered"] + counts["skipped"] + counts["failed"]
        passed = (
            total == counts["rows_in"]
            and len(result) == len(base)
            and set(result[stages.ROW]) == set(base[stages.ROW])
        )
        return dg.AssetCheckResult(
            passed=passed, metadata={**counts, "result_rows": len(result), "input_rows": len(base)}
        )

    return [result, answer, every_row_accounted_for]


FIELDS_CHECK = "llm_fields_present"


def _fields_check_spec(spec: QuerySpec, name: str) -> list[dg.AssetCheckSpec]:
    if spec.base != name:
        return []
    return [dg.AssetCheckSpec(FIELDS_CHECK, asset=spec.key(name), blocking=True)]


def _fields_check(spec: QuerySpec, frame: pd.DataFrame, options: QueryOptions, gx: GXValidator):
    """Every column an LLM template reads exists; nulls are refused unless the null policy
    handles them (skip or empty)."""
    columns: list[str] = []
    for call in spec.query.llm_calls:
        for column in spec.query.field_columns(call.name).values():
            expanded = sorted(c for c in frame.columns if c.startswith(f"{column}_"))
            columns += [column] if column in frame.columns or not expanded else expanded
    columns = list(dict.fromkeys(columns))
    expectations = [Expect("ExpectColumnToExist", {"column": c}) for c in columns]
    if options.null_policy == "fail":
        expectations += [
            Expect("ExpectColumnValuesToNotBeNull", {"column": c})
            for c in columns
            if c in frame.columns
        ]
    nulls = {c: int(frame[c].isna().sum()) for c in columns if c in frame.columns}
    validation = gx.validate(f"{spec.group}_fields", frame, expectations)
    return dg.AssetCheckResult(
        check_name=FIELDS_CHECK,
        passed=validation.success,
        metadata={
            **validation.metadata(),
            "null_counts": str(nulls),
            "null_policy": options.null_policy,
        },
    )
