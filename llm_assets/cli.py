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


def parse_fields(table, fields: str | None) -> list[str] | None:
    from llm_assets.optimizer.table import column_names, num_rows

    columns = column_names(table)
    if num_rows(table) == 0:
        fail(f"the table has no rows (columns: {', '.join(columns)})")
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


if __name__ == "__main__":
    main()
