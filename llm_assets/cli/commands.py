"""The `llm-assets` command line. `reorder` and `run` print one JSON object on stdout, `plan` a
table (one JSON object with `--json`); a bad input prints one `error: ...` line on stderr and
exits with status 2 (no traceback).

This module holds the commands, their switches and the engine and response cache built from
them; the inputs are read and checked by `llm_assets.cli.inputs`, what is printed is shaped
by `llm_assets.cli.reports`."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import click

from llm_assets.cli.inputs import (
    answer_path,
    check_out,
    fail,
    label_option,
    limit_options,
    load_inputs,
    parse_fields,
    parse_tables,
    query_options,
    read_sql,
)
from llm_assets.cli.reports import (
    ProgressBar,
    pairs_report,
    plan_table,
    prefix_sides,
    quality_report,
    stage_report,
    stats_report,
)


@click.group()
@click.version_option(package_name="llm-assets")
def main() -> None:
    """LLM queries over tables as Dagster assets, made cheaper before any token is generated."""


@main.command()
@click.argument("input_path", metavar="INPUT.{csv,parquet}", type=click.Path(path_type=Path))
@click.option("--fields", help="Comma-separated fields to reorder (default: all columns).")
@click.option(
    "--method",
    type=click.Choice(["original", "column_stats", "ggr"]),
    default="ggr",
    show_default=True,
)
@click.option("--out", type=click.Path(path_type=Path), help="Write the schedule as JSON here.")
@limit_options
def reorder(input_path: Path, fields: str | None, method: str, out: Path | None, limits) -> None:
    """Reorder rows and fields for prefix-cache reuse; print hit rates and timing."""
    from llm_assets.data.tables import load_table
    from llm_assets.optimizer import encode
    from llm_assets.optimizer import reorder as run_reorder
    from llm_assets.optimizer.metrics import char_hit_rate, phc

    try:
        table = load_table(input_path, limits=limits or None)
    except ValueError as exc:
        fail(str(exc))
    chosen = parse_fields(table, fields)
    started = time.perf_counter()
    enc = encode(table, chosen)
    schedule = run_reorder(enc, method=method)
    seconds = time.perf_counter() - started
    result = {
        "rows": enc.num_rows,
        "fields": list(enc.fields),
        "method": method,
        "method_used": schedule.method_used or method,
        "char_hit_rate": round(char_hit_rate(enc, schedule), 6),
        "phc": phc(enc, schedule),
        "seconds": round(seconds, 4),
    }
    if out is not None:
        out.write_text(json.dumps({"schedule": schedule.to_pairs()}))
    click.echo(json.dumps(result))


# ---- run and plan ----------------------------------------------------------------------------

ENGINES = ("sim", "openai", "vllm", "llama_cpp", "ray")
SIM_MODEL = "llama-2-7b"


@dataclass(frozen=True)
class Switches:
    """The options `run` and `plan` share (see `engine_options`)."""

    engine: str
    gpu: str
    model: str | None
    policy: str
    no_prefix_cache: bool
    system_prompt: str | None
    max_tokens: int | None
    no_dedup: bool
    no_pushdown: bool
    no_field_reorder: bool
    field_order_guard: float | None
    null_policy: str | None
    context_policy: str | None
    prompt_style: str | None
    max_pairs: int | None
    shards: int | None

    def options(self, method: str):
        return query_options(
            method=method,
            dedup=not self.no_dedup,
            pushdown=not self.no_pushdown,
            reorder_fields=not self.no_field_reorder,
            field_order_guard=self.field_order_guard,
            system_prompt=self.system_prompt,
            max_tokens=self.max_tokens,
            null_policy=self.null_policy,
            context_policy=self.context_policy,
            prompt_style=self.prompt_style,
            max_pairs=self.max_pairs,
            num_plan_shards=self.shards,
        )

    def build_engine(self):
        return build_engine(
            self.engine, self.gpu, self.model, self.policy, not self.no_prefix_cache
        )


def build_engine(engine: str, gpu: str, model: str | None, policy: str, prefix_cache: bool):
    """An engine for the CLI, built the one way the code location builds it
    (`resources.environment.build_engine`, without Dagster): the simulated one from the
    switches, or a
    real one from `--model` and the environment (LLM_ASSETS_OPENAI_BASE_URL, _MODEL, _API_KEY
    and LLM_ASSETS_OPENAI_<OPTION>; LLM_ASSETS_VLLM_MODEL and LLM_ASSETS_VLLM_<OPTION>;
    LLM_ASSETS_LLAMA_CPP_<OPTION>). A missing or bad setting (a model or llama-server not
    installed) is that function's one-line error."""
    from resources.environment import build_engine as build

    fields: dict = {}
    if not prefix_cache and engine in ("sim", "vllm"):
        fields["enable_prefix_caching"] = False
    elif not prefix_cache and engine == "llama_cpp":
        fail("--no-prefix-cache: llama_cpp always reuses a slot's cached prefix")
    if engine == "sim":
        fields.update(gpu=gpu, model=model or SIM_MODEL, policy=policy)
    elif model is not None:
        fields["model"] = model
    try:
        return build(engine, fields)
    except ValueError as exc:
        fail(str(exc))


def engine_options(f):
    for option in reversed(
        [
            click.option("--engine", type=click.Choice(ENGINES), default="sim", show_default=True),
            click.option("--gpu", default="L4", show_default=True, help="Simulated GPU."),
            click.option(
                "--model",
                default=None,
                help=f"sim: the simulated model (default {SIM_MODEL}); llama_cpp: a bundled "
                "model (smollm2-135m, the default; gemma3-270m) or a GGUF file.",
            ),
            click.option("--policy", default="vllm-v1", show_default=True, help="Sim scheduler."),
            click.option("--no-prefix-cache", is_flag=True, help="Disable prefix caching."),
            click.option("--system-prompt", default=None, help="Sent before each instruction."),
            click.option("--max-tokens", type=int, default=None, help="Generation limit."),
            click.option("--no-dedup", is_flag=True, help="Send duplicate inputs again."),
            click.option("--no-pushdown", is_flag=True, help="Run predicates after the LLM."),
            click.option(
                "--no-field-reorder",
                is_flag=True,
                help="Keep every prompt's fields in the written order (rows still reordered).",
            ),
            click.option(
                "--field-order-guard",
                type=float,
                default=None,
                metavar="SHARE",
                help="Answer a sample in the written and the planned field order first; keep "
                "the planned one only if the 95% lower bound of their agreement >= SHARE.",
            ),
            click.option(
                "--null-policy", type=click.Choice(["skip", "empty", "fail"]), default=None
            ),
            click.option("--context-policy", type=click.Choice(["fail", "truncate"]), default=None),
            click.option(
                "--prompt-style",
                type=click.Choice(["named", "values", "inline"]),
                default=None,
                help="named (default): your template, then `name: value` lines; inline: "
                "values in the placeholders (rows reordered only).",
            ),
            click.option(
                "--max-pairs",
                type=int,
                default=None,
                help="A semantic join (LLM in JOIN ON) with more candidate pairs is refused "
                "(default 100,000).",
            ),
            click.option(
                "--shards",
                type=int,
                default=None,
                metavar="K",
                help="Plan each LLM stage in K shards cut on the field GGR puts first, as "
                "parallel Ray tasks (default 1: in this process; needs the ray extra).",
            ),
        ]
    ):
        f = option(f)
    return f


def response_cache(engine: str, cache: bool | None):
    """The response cache of a run: the assets' one (`$LLM_ASSETS_HOME/responses.duckdb`),
    on by default for the real engines and off for the simulated one (as jobs/resources.py)."""
    from resources.response_cache import ResponseCache

    enabled = engine != "sim" if cache is None else cache
    return ResponseCache() if enabled else ResponseCache.disabled()


@main.command("run")
@click.argument("query_path", metavar="QUERY.sql", type=click.Path(path_type=Path))
@click.option("--table", "tables", multiple=True, required=True, help="NAME=PATH (repeatable).")
@click.option(
    "--method",
    type=click.Choice(["original", "column_stats", "ggr"]),
    default="ggr",
    show_default=True,
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write every row with its status, and the query's answer beside it as X.answer.ext; "
    "the format follows the extension (.parquet, .csv, .tsv, .jsonl, .json), written atomically.",
)
@click.option(
    "--cache/--no-cache",
    default=None,
    help="Reuse and store answers in $LLM_ASSETS_HOME/responses.duckdb, so a rerun sends only "
    "what is missing [default: on for openai and vllm, off for sim].",
)
@click.option(
    "--chunk-size",
    type=int,
    default=None,
    help="Requests per chunk committed to the response cache (a kill loses at most one).",
)
@label_option
@limit_options
@engine_options
def run_command(
    query_path, tables, method, out, cache, chunk_size, label_column, limits, **switches
):
    """Run an LLM-SQL query over files: every row answered, skipped or failed, with a summary
    (rows, requests, token hit rate, engine time, cost) as one JSON object on stdout."""
    from llm_assets.data.writers import write_table
    from llm_assets.pipeline.results import answer_records
    from llm_assets.pipeline.run import run_query
    from llm_assets.pipeline.send import replica_counts
    from resources.llama_cpp.server import ServerStartError
    from resources.response_cache import CacheLockTimeout
    from resources.runner import TooManyErrors
    from resources.storage import StorageError

    started = time.perf_counter()
    switches = Switches(**switches)
    options = switches.options(method)
    if chunk_size is not None:
        options = query_options(**{**options.model_dump(), "chunk_size": chunk_size})
    sql = read_sql(query_path)
    named = parse_tables(tables)
    query, frames = load_inputs(sql, named, query_path.stem, label_column, limits)
    check_out(out, named, query_path, True)  # the result and, beside it, the answer
    responses = response_cache(switches.engine, cache)
    kept = (
        f"; answered requests are in the response cache {responses.path}, a rerun sends "
        "only the rest"
        if responses.enabled
        else ""
    )
    llm = switches.build_engine()
    try:
        run = run_query(
            query, frames, options, llm, cache=responses, progress=ProgressBar(), label=label_column
        )
    except (ValueError, CacheLockTimeout, ServerStartError, StorageError) as exc:
        fail(str(exc))
    except TooManyErrors as exc:
        fail(f"{exc}{kept}")
    finally:
        llm.close()
    if out is not None:
        try:
            write_table(run.result, out)
            write_table(run.answer, answer_path(out))
        except Exception as exc:  # noqa: BLE001 - any failure to write is one line
            reason = " ".join(str(exc).split()) or type(exc).__name__
            where = (
                f"the answers are in the response cache {responses.path}: fix the target and "
                "rerun (nothing is sent again)"
                if responses.enabled
                else "no response cache (--no-cache, or --engine sim without --cache): a rerun "
                "answers again"
            )
            fail(f"could not write --out {out}: {reason}; {out} was left as it was; {where}")
    report = {
        "rows": run.accounting,
        **stats_report(run.stats, llm, time.perf_counter() - started),
        "requests_sent": sum(s.sent for s in run.stages),
        "cache_hits": sum(s.cache_hits for s in run.stages),
        "replica_answers": dict(
            sum((Counter(replica_counts(s.outputs)) for s in run.stages), Counter())
        ),
        "response_cache": str(responses.path) if responses.enabled else None,
        "quality": quality_report(run.stages, label_column, run.stats.engine),
    }
    report["answer_rows"] = len(run.answer)
    report["answer"] = answer_records(run.answer)  # what the SELECT returns, first rows
    if run.filter_order is not None:
        report["llm_filter_order"] = run.filter_order.report()
    if out is not None:
        report["out"] = str(out)
        report["answer_out"] = str(answer_path(out))
    click.echo(json.dumps(report))


@main.command("plan")
@click.argument("query_path", metavar="QUERY.sql", type=click.Path(path_type=Path))
@click.option("--table", "tables", multiple=True, required=True, help="NAME=PATH (repeatable).")
@click.option(
    "--methods",
    default="original,column_stats,ggr",
    show_default=True,
    help="Comma-separated reorder methods to compare.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@limit_options
@engine_options
def plan_command(query_path, tables, methods, as_json, limits, **switches):
    """What-if before sending anything: every LLM stage of the query predicted per method
    (rows reaching it, requests, tokens, token hit rate, simulated engine time, cost) on the
    simulated engine, as a table or one JSON object with --json (each method's totals over
    all stages, its `stages` beside them). A later stage's rows are predicted from a seeded
    sample sent through the earlier LLM filters on the sim (`llm_assets.pipeline.predict`).
    Nothing reaches a real engine; `--engine` other than sim is refused."""
    from llm_assets.pipeline.plan import first_prompt
    from llm_assets.pipeline.predict import plan_query

    switches = Switches(**switches)
    if switches.engine != "sim":
        fail("plan sends nothing: it always uses the simulated engine (drop --engine)")
    query, frames = load_inputs(
        read_sql(query_path), parse_tables(tables), query_path.stem, limits=limits
    )
    report = {"query": query.name, "llm_calls": [c.name for c in query.llm_calls], "methods": {}}
    names = [m.strip() for m in methods.split(",") if m.strip()]
    for k, method in enumerate(names):
        options = switches.options(method)
        started = time.perf_counter()
        sim = switches.build_engine()
        try:
            planned = plan_query(
                query,
                frames,
                options,
                sim,
                sample_engine=switches.build_engine(),
                release_tables=k == len(names) - 1,  # the last method frees the tables
            )
        except ValueError as exc:
            fail(str(exc))
        if planned.filter_order is not None and "llm_filter_order" not in report:
            report["llm_filter_order"] = planned.filter_order.report()
        stage = planned.stages[0]
        if query.semantic_joins:
            report.setdefault("semantic_join", pairs_report(query, planned.base, options))
            report["semantic_join"]["prefix_side"][method] = prefix_sides(query, stage.plan)
        wall_s = time.perf_counter() - started
        report["methods"][method] = {
            "rows_to_first_llm": stage.rows_to_llm,
            **stats_report(planned.stats, sim, wall_s),
            "first_prompt": first_prompt(stage.plan),
            "stages": [stage_report(s, sim) for s in planned.stages],
            "reach_sample": {"rows": planned.sample_rows, "requests": planned.sample_requests},
        }
        del planned, stage, sim  # reported: free them before the next method plans
    click.echo(json.dumps(report) if as_json else plan_table(report))


@main.command()
@click.option("--tracking-uri", help="MLflow store (default: sqlite under $LLM_ASSETS_HOME).")
def summary(tracking_uri: str | None) -> None:
    """Per LLM stage of the latest Dagster run: rows, requests, hit rate, engine time, cost."""
    from mlflow.tracking import MlflowClient

    from resources.tracking import default_tracking_uri

    client = MlflowClient(tracking_uri or default_tracking_uri())
    ids = [e.experiment_id for e in client.search_experiments()]
    latest = client.search_runs(ids, order_by=["attributes.start_time DESC"], max_results=1)
    if not ids or not latest:
        fail("no MLflow run yet: run `make demo` or a query job first")
    run_id = latest[0].data.tags.get("dagster_run_id", "")
    runs = client.search_runs(ids, filter_string=f"tags.dagster_run_id = '{run_id}'")
    header = ["stage", "rows to LLM", "requests", "token hit rate", "engine s", "self-hosted $"]
    lines = [header]
    for run in sorted(runs, key=lambda r: r.data.tags.get("asset_key", "")):
        m = run.data.metrics
        lines.append(
            [
                run.data.tags.get("asset_key", "?"),
                f"{m.get('rows_to_llm', 0):,.0f}",
                f"{m.get('n_requests', 0):,.0f}",
                f"{m['token_hit_rate']:.1%}" if "token_hit_rate" in m else "unknown",
                f"{m.get('engine_time_s', 0):,.1f}",
                f"{m.get('cost_usd_self_hosted', 0):.4f}",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    click.echo(
        f"Dagster run {run_id} ({runs[0].data.params.get('engine', '?')} engine, "
        f"{runs[0].data.params.get('model', '?')} on {runs[0].data.params.get('hardware', '?')})"
    )
    for row in lines:
        click.echo(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
