"""The inputs of the `llm-assets` commands, read and checked before anything is sent: the
query file, `--table NAME=PATH`, `--fields`, the query options, the compiled query with its
tables, and the `--out` targets. A bad input is one `error: ...` line on stderr and exit
status 2 (`fail`), never a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
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


def query_options(**values):
    from pydantic import ValidationError

    from llm_assets.pipeline.options import QueryOptions

    try:
        return QueryOptions(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        fail(f"option {'.'.join(map(str, error['loc']))}: {error['msg']}")


LIMIT_FIELDS = ("max_bytes", "max_rows", "max_columns", "max_cell_bytes")
"""`llm_assets.data.limits.InputLimits`' fields, each a flag (`--max-bytes N`, ...)."""


def limit_options(f):
    """The input-limit flags of a command that reads tables: they reach it as one `limits`
    mapping of the flags given (the others keep `InputLimits`' defaults)."""

    @functools.wraps(f)
    def command(*args, **kwargs):
        given = {k: v for k in LIMIT_FIELDS if (v := kwargs.pop(k)) is not None}
        return f(*args, limits=given, **kwargs)

    for field in reversed(LIMIT_FIELDS):
        flag = "--" + field.replace("_", "-")
        what = field.removeprefix("max_").replace("_", " ")
        help_text = f"Refuse a table over this many {what} (default: InputLimits')."
        option = click.option(flag, field, type=click.IntRange(min=1), help=help_text)
        command = option(command)
    return command


def load_inputs(
    sql: str,
    tables: dict[str, str],
    name: str,
    label: str | None = None,
    limits: Mapping[str, int] | None = None,
):
    """The compiled query and its tables, read by the one loader within `limits` (one-line
    errors); a `label` column none of them has is refused (`check_label`)."""
    from llm_assets.data.tables import load_table
    from llm_assets.sql.compiler import compile_sql

    try:
        query = compile_sql(sql, name=name)
    except ValueError as exc:
        fail(str(exc))
    needed = sorted({s.table for s in query.sources})
    missing = [t for t in needed if t not in tables]
    if missing:
        fail(f"the query reads table(s) {missing}: give each with --table NAME=PATH")
    try:
        frames = {t: load_table(tables[t], limits=limits or None) for t in needed}
    except ValueError as exc:
        fail(str(exc))
    check_label(query, frames, label)
    return query, frames


def answer_path(out: Path) -> Path:
    """Where `--out X.ext` puts the query's answer (what its SELECT returns): `X.answer.ext`."""
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


label_option = click.option(
    "--label-column",
    default=None,
    help="A column of a source holding each row's expected answer (alias.column where several "
    "sources have it): the summary's `quality` adds the last LLM stage's accuracy against it. "
    "Never sent to the model.",
)


def check_label(query, frames, label: str | None) -> None:
    """Refuse a `--label-column` no source of the query has (one line naming the column and
    the tables' columns), before the engine is built or anything is sent."""
    from llm_assets.optimizer.table import column_names
    from llm_assets.pipeline.quality import resolve_label

    if label is None:
        return
    try:
        resolve_label(query, {t: column_names(f) for t, f in frames.items()}, label)
    except ValueError as exc:
        fail(str(exc))
