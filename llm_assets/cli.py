"""The `llm-assets` command line. Each command prints one JSON object on stdout; a bad input
prints one `error: ...` line on stderr and exits with status 2 (no traceback)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from llm_assets.io import InputError, read_table


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
    from llm_assets.optimizer import encode
    from llm_assets.optimizer import reorder as run_reorder
    from llm_assets.optimizer.metrics import char_hit_rate, phc

    try:
        table = read_table(input_path)
    except InputError as exc:
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
        "char_hit_rate": round(char_hit_rate(enc, schedule), 6),
        "phc": phc(enc, schedule),
        "seconds": round(seconds, 4),
    }
    if out is not None:
        out.write_text(json.dumps({"schedule": schedule.to_pairs()}))
    click.echo(json.dumps(result))


class StderrProgress:
    """Progress lines on stderr, at most one per second, for runs that take a while."""

    def __init__(self, label: str):
        self.label = label
        self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= 1.0 or done == total:
            self.last = now
            click.echo(f"{self.label}: {done:,}/{total:,} requests", err=True)


@main.command()
@click.argument("input_path", metavar="INPUT.{csv,parquet}", type=click.Path(path_type=Path))
@click.option("--template", required=True, help="LLM template naming columns as {column}.")
@click.option(
    "--method",
    type=click.Choice(["original", "column_stats", "ggr"]),
    default="ggr",
    show_default=True,
)
@click.option("--dedup", is_flag=True, help="Send each distinct input once.")
@click.option("--no-prefix-cache", is_flag=True, help="Disable prefix caching (No Cache).")
@click.option("--gpu", default="L4", show_default=True)
@click.option("--model", default="llama-2-7b", show_default=True)
@click.option("--max-tokens", type=int, default=16, show_default=True)
@click.option("--policy", type=click.Choice(["vllm-v0", "vllm-v1"]), default="vllm-v1")
@click.option("--style", type=click.Choice(["named", "values"]), default="named")
@click.option("--choices", help="Comma-separated allowed answers (default: free text).")
def simulate(
    input_path: Path,
    template: str,
    method: str,
    dedup: bool,
    no_prefix_cache: bool,
    gpu: str,
    model: str,
    max_tokens: int,
    policy: str,
    style: str,
    choices: str | None,
) -> None:
    """Run an LLM template over a table on the simulated vLLM engine; print cost and speed."""
    from llm_assets.optimizer.cost import cost_usd
    from llm_assets.optimizer.prompts import plan_prompts
    from llm_assets.output_spec import OutputSpec
    from resources.engine import Request
    from resources.sim.engine import SimulatedEngine

    started = time.perf_counter()
    try:
        table = read_table(input_path)
    except InputError as exc:
        fail(str(exc))
    require_rows(table)
    if max_tokens < 1:
        fail(f"--max-tokens must be >= 1, got {max_tokens}")
    try:
        engine = SimulatedEngine(
            gpu=gpu, model=model, policy=policy, enable_prefix_caching=not no_prefix_cache
        )
        plan = plan_prompts(table, template, method=method, dedup=dedup, style=style)
    except (ValueError, KeyError) as exc:
        fail(str(exc).strip("'\""))
    spec = OutputSpec.choice(choices.split(",")) if choices else OutputSpec.text()
    requests = [
        Request(id=str(k), prompt=p, max_tokens=max_tokens, output=spec)
        for k, p in enumerate(plan.prompts)
    ]
    result = engine.run("simulate", requests, progress=StderrProgress("simulate"))
    stats = result.stats
    report = {
        "rows": len(plan.prompt_of_row),
        "n_requests": stats.n_requests,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "token_hit_rate": round(stats.token_hit_rate, 6),
        "output_tokens": stats.output_tokens,
        "errors": stats.errors,
        "engine": stats.engine,
        "gpu": gpu,
        "model": model,
        "engine_time_s": round(stats.engine_time_s, 3),
        "wall_s": round(time.perf_counter() - started, 3),
        "cost_usd": {
            k: round(v, 6)
            for k, v in cost_usd(
                stats.prompt_tokens,
                stats.cached_tokens,
                stats.output_tokens,
                stats.engine_time_s,
                gpu=gpu,
                n_gpus=engine.deployment.num_gpus,
            ).items()
        },
    }
    click.echo(json.dumps(report))


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
    header = ["stage", "rows in", "requests", "token hit rate", "engine s", "self-hosted $"]
    lines = [header]
    for run in sorted(runs, key=lambda r: r.data.tags.get("asset_key", "")):
        m = run.data.metrics
        lines.append(
            [
                run.data.tags.get("asset_key", "?"),
                f"{m.get('rows_in', 0):,.0f}",
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
