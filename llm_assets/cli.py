"""The `llm-assets` command line. `reorder` and `run` print one JSON object on stdout, `plan` a
table (one JSON object with `--json`); a bad input prints one `error: ...` line on stderr and
exits with status 2 (no traceback)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click


def fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def require_rows(table) -> list[str]:
    """The table's columns; fails (exit 2) on a table without rows."""
    from llm_assets.optimizer.table import column_names, num_rows

    columns = column_names(table)
    if num_rows(table) == 0:
        fail(f"the table has no rows (columns: {', '.join(columns)})")
    return columns


def parse_fields(table, fields: str | None) -> list[str] | None:
    columns = require_rows(table)
    if fields is None:
        return None
    chosen = [f.strip() for f in fields.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in columns]
    if unknown or not chosen:
        what = f"unknown field(s) {', '.join(unknown)}" if unknown else "no fields given"
        fail(f"{what}; available columns: {', '.join(columns)}")
    if len(set(chosen)) != len(chosen):
        fail(f"a field is listed twice in --fields {fields!r}")
    return chosen


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
def reorder(input_path: Path, fields: str | None, method: str, out: Path | None) -> None:
    """Reorder rows and fields for prefix-cache reuse; print hit rates and timing."""
    from llm_assets.data.tables import load_table
    from llm_assets.optimizer import encode
    from llm_assets.optimizer import reorder as run_reorder
    from llm_assets.optimizer.metrics import char_hit_rate, phc

    try:
        table = load_table(input_path)
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

ENGINES = ("sim", "openai", "vllm")


def read_sql(query_path: Path) -> str:
    if not query_path.exists():
        fail(f"query file not found: {query_path}")
    return query_path.read_text(encoding="utf-8")


def parse_tables(tables: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in tables:
        name, eq, path = item.partition("=")
        if not eq or not name or not path:
            fail(f"--table {item!r}: write it as NAME=PATH (e.g. reviews=reviews.tsv)")
        if name in out:
            fail(f"--table {name} is given twice")
        out[name] = path
    return out


@dataclass(frozen=True)
class Switches:
    """The options `run` and `plan` share (see `engine_options`)."""

    engine: str
    gpu: str
    model: str
    policy: str
    no_prefix_cache: bool
    system_prompt: str | None
    max_tokens: int | None
    no_dedup: bool
    no_pushdown: bool
    null_policy: str | None
    context_policy: str | None
    prompt_style: str | None

    def options(self, method: str):
        return query_options(
            method=method,
            dedup=not self.no_dedup,
            pushdown=not self.no_pushdown,
            system_prompt=self.system_prompt,
            max_tokens=self.max_tokens,
            null_policy=self.null_policy,
            context_policy=self.context_policy,
            prompt_style=self.prompt_style,
        )

    def build_engine(self):
        return build_engine(
            self.engine, self.gpu, self.model, self.policy, not self.no_prefix_cache
        )


def build_engine(engine: str, gpu: str, model: str, policy: str, prefix_cache: bool):
    """An engine for the CLI, built the one way the code location builds it
    (`resources.llm_resources.engine_resource`): the simulated one from the switches, or a
    real one from the environment (LLM_ASSETS_OPENAI_BASE_URL, _MODEL, _API_KEY and
    LLM_ASSETS_OPENAI_<OPTION>; LLM_ASSETS_VLLM_MODEL and LLM_ASSETS_VLLM_<OPTION>). A
    missing or bad setting is that function's one-line error."""
    from resources.llm_resources import engine_resource

    fields: dict = {} if prefix_cache or engine == "openai" else {"enable_prefix_caching": False}
    if engine == "sim":
        fields.update(gpu=gpu, model=model, policy=policy)
    try:
        return engine_resource(engine, **fields).build_engine()
    except ValueError as exc:
        fail(str(exc))


class ProgressBar:
    """A tqdm bar per LLM stage on stderr (`progress(label)(done, total)`)."""

    def __init__(self):
        self.bars = {}

    def __call__(self, label: str):
        from tqdm import tqdm

        def update(done: int, total: int) -> None:
            bar = self.bars.get(label)
            if bar is None:
                bar = self.bars[label] = tqdm(total=total, desc=label, unit="req", file=sys.stderr)
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return update


def query_options(**values):
    from pydantic import ValidationError

    from llm_assets.pipeline.options import QueryOptions

    try:
        return QueryOptions(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        fail(f"option {'.'.join(map(str, error['loc']))}: {error['msg']}")


def load_inputs(sql: str, tables: dict[str, str], name: str):
    """The compiled query and its tables, read by the one loader (one-line errors)."""
    from llm_assets.data.tables import load_table
    from llm_assets.sql import compile_sql

    try:
        query = compile_sql(sql, name=name)
    except ValueError as exc:
        fail(str(exc))
    needed = sorted({s.table for s in query.sources})
    missing = [t for t in needed if t not in tables]
    if missing:
        fail(f"the query reads table(s) {missing}: give each with --table NAME=PATH")
    try:
        frames = {t: load_table(tables[t]) for t in needed}
    except ValueError as exc:
        fail(str(exc))
    return query, frames


def engine_options(f):
    for option in reversed(
        [
            click.option("--engine", type=click.Choice(ENGINES), default="sim", show_default=True),
            click.option("--gpu", default="L4", show_default=True, help="Simulated GPU."),
            click.option("--model", default="llama-2-7b", show_default=True, help="Sim model."),
            click.option("--policy", default="vllm-v1", show_default=True, help="Sim scheduler."),
            click.option("--no-prefix-cache", is_flag=True, help="Disable prefix caching."),
            click.option("--system-prompt", default=None, help="Sent before each instruction."),
            click.option("--max-tokens", type=int, default=None, help="Generation limit."),
            click.option("--no-dedup", is_flag=True, help="Send duplicate inputs again."),
            click.option("--no-pushdown", is_flag=True, help="Run predicates after the LLM."),
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
        ]
    ):
        f = option(f)
    return f


def stats_report(stats, engine, wall_s: float) -> dict:
    """Requests, tokens, hit rate, engine time (simulated seconds on the sim), wall time and
    cost per pricing model: what `run` and `plan` print."""
    from llm_assets.assets.tracking import engine_costs

    costs = engine_costs(engine, stats)
    return {
        "n_requests": stats.n_requests,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "token_hit_rate": round(stats.token_hit_rate, 6),
        "output_tokens": stats.output_tokens,
        "errors": stats.errors,
        "engine": stats.engine,
        "model": stats.model,
        "hardware": stats.hardware,
        "engine_time_s": round(stats.engine_time_s, 3),
        "wall_time_s": round(wall_s, 3),
        "cost_usd": {k.removeprefix("cost_usd_"): round(v, 6) for k, v in costs.items()},
    }


def answer_path(out: Path) -> Path:
    """Where `--out X.ext` puts an aggregating query's answer: `X.answer.ext`."""
    return out.with_name(f"{out.stem}.answer{out.suffix}")


def check_out(out: Path | None, tables: dict[str, str], query_path: Path, aggregates: bool):
    """Refuse an `--out` (and, for an aggregate, its answer file) that cannot take the
    result, before anything is sent."""
    from llm_assets.data.writers import check_target

    if out is None:
        return
    for target in (out, answer_path(out)) if aggregates else (out,):
        problem = check_target(target, [*tables.values(), query_path])
        if problem:
            fail(problem)


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
    help="Write every row with its status; the format follows the extension "
    "(.parquet, .csv, .tsv, .jsonl, .json), written atomically.",
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
@engine_options
def run_command(query_path, tables, method, out, cache, chunk_size, **switches):
    """Run an LLM-SQL query over files: every row answered, skipped or failed, with a summary
    (rows, requests, token hit rate, engine time, cost) as one JSON object on stdout."""
    from llm_assets.data.writers import write_table
    from llm_assets.pipeline.results import answer_records
    from llm_assets.pipeline.run import run_query
    from resources.response_cache import CacheLockTimeout
    from resources.runner import TooManyErrors

    started = time.perf_counter()
    switches = Switches(**switches)
    options = switches.options(method)
    if chunk_size is not None:
        options = query_options(**{**options.model_dump(), "chunk_size": chunk_size})
    sql = read_sql(query_path)
    named = parse_tables(tables)
    query, frames = load_inputs(sql, named, query_path.stem)
    aggregates = query.aggregate is not None
    check_out(out, named, query_path, aggregates)
    responses = response_cache(switches.engine, cache)
    kept = (
        f"; answered requests are in the response cache {responses.path}, a rerun sends "
        "only the rest"
        if responses.enabled
        else ""
    )
    llm = switches.build_engine()
    try:
        run = run_query(query, frames, options, llm, cache=responses, progress=ProgressBar())
    except (ValueError, CacheLockTimeout) as exc:
        fail(str(exc))
    except TooManyErrors as exc:
        fail(f"{exc}{kept}")
    finally:
        llm.close()
    if out is not None:
        try:
            write_table(run.result, out)
            if aggregates:
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
        "response_cache": str(responses.path) if responses.enabled else None,
    }
    report["answer_rows"] = len(run.answer)
    if aggregates:  # the aggregate itself: one row without GROUP BY
        report["answer"] = answer_records(run.answer)
    if run.filter_order is not None:
        report["llm_filter_order"] = run.filter_order.report()
    if out is not None:
        report["out"] = str(out)
        if aggregates:
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
@engine_options
def plan_command(query_path, tables, methods, as_json, **switches):
    """What-if before sending anything: each method's first-LLM-stage prompts on the simulated
    engine (tokens, token hit rate, simulated engine time, cost), as a table (one row per
    method) or one JSON object with --json. Nothing reaches a real engine; `--engine` other
    than sim is refused."""
    from llm_assets.pipeline.plan import first_prompt
    from llm_assets.pipeline.rows import INPUT
    from llm_assets.pipeline.run import run_query
    from llm_assets.pipeline.send import requests_from_plan

    switches = Switches(**switches)
    if switches.engine != "sim":
        fail("plan sends nothing: it always uses the simulated engine (drop --engine)")
    query, frames = load_inputs(read_sql(query_path), parse_tables(tables), query_path.stem)
    report = {"query": query.name, "llm_calls": [c.name for c in query.llm_calls], "methods": {}}
    for method in [m.strip() for m in methods.split(",") if m.strip()]:
        options = switches.options(method)
        started = time.perf_counter()
        sim = switches.build_engine()
        try:
            planned = run_query(query, frames, options, sim, send=False)
        except ValueError as exc:
            fail(str(exc))
        if planned.filter_order is not None and "llm_filter_order" not in report:
            report["llm_filter_order"] = planned.filter_order.report()
        stage = planned.stages[0]
        requests = requests_from_plan(stage.plan, stage.call, options.max_tokens)
        result = sim.run(f"{query.name}:plan", requests)
        report["methods"][method] = {
            "rows_to_first_llm": int((stage.deduped[INPUT] >= 0).sum()),
            **stats_report(result.stats, sim, time.perf_counter() - started),
            "first_prompt": first_prompt(stage.plan),
        }
    click.echo(json.dumps(report) if as_json else plan_table(report))


def money(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:.6f}" if value else "0"


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the others right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]


def plan_table(report: dict) -> str:
    """`plan`'s default output: one row per method, then the cost per pricing model."""
    methods = report["methods"]
    first = next(iter(methods.values()), None)
    calls = report["llm_calls"]
    order = report.get("llm_filter_order")
    stage = order["chosen_order"][0] if order else calls[0]
    priced = (
        f"its LLM stage {stage}"
        if len(calls) == 1
        else f"its first LLM stage {stage} of {', '.join(calls)} (later stages not priced)"
    )
    engine = f"the simulated {first['model']} on {first['hardware']}" if first else "the sim"
    lines = [f"plan of {report['query']}, nothing sent: {priced}, on {engine}", ""]
    header = ["method", "rows", "requests", "prompt tokens", "cached tokens", "hit rate",
              "output tokens", "engine s", "self-hosted $"]  # fmt: skip
    rows = [
        [
            name,
            f"{m['rows_to_first_llm']:,}",
            f"{m['n_requests']:,}",
            f"{m['prompt_tokens']:,}",
            f"{m['cached_tokens']:,}",
            f"{m['token_hit_rate']:.1%}",
            f"{m['output_tokens']:,}",
            f"{m['engine_time_s']:,.2f}",
            money(m["cost_usd"].get("self_hosted", 0.0)),
        ]
        for name, m in methods.items()
    ]
    lines += table_lines(header, rows)
    pricings = [k for k in (first or {}).get("cost_usd", {}) if k != "self_hosted"]
    if pricings:
        lines += ["", "predicted cost in USD per pricing model (llm_assets/optimizer/cost.py):"]
        lines += table_lines(
            ["method", *pricings],
            [[n, *(money(m["cost_usd"][p]) for p in pricings)] for n, m in methods.items()],
        )
    if order:
        lines += [
            "",
            f"LLM filters: written {', '.join(order['written_order'])} -> run "
            f"{', '.join(order['chosen_order'])} (expected tokens per row "
            f"{order['expected_tokens_per_row_written']:,} -> "
            f"{order['expected_tokens_per_row_chosen']:,}; the order sample costs "
            f"{order['sample_requests']} requests)",
        ]
    shown = next(reversed(methods), None)
    if shown and methods[shown]["first_prompt"] is not None:
        lines += ["", f"the first prompt {shown} sends, exactly as the model receives it:"]
        lines += ["  | " + line for line in methods[shown]["first_prompt"].split("\n")]
    lines += ["", "rows: rows reaching the first LLM stage; engine s: simulated seconds; "
              "--json prints every figure"]  # fmt: skip
    return "\n".join(lines)


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


if __name__ == "__main__":
    main()
