"""Whether a query's non-LLM predicates can run on its tables, checked before anything is
sent: at definition load (`dg check defs`, `dg dev`), in `llm-assets plan` and `run`
(`run_query`) and in the `filtered` asset.

Files are read as text exactly as written (`llm_assets.data.tables`). A column that only
predicates read is typed for SQL when every value reads as one type (`predicate_types`:
`rating > 3` compares numbers); any other column the predicates read stays text (VARCHAR),
so do columns with a value of another kind (`3/5`, one `N/A`) and columns the query also
returns, prompts with or joins on (`predicate_only_columns`: those keep the file's text).
DuckDB refuses to compare text with a number, and guessing that `3/5` means 3 or 0.6, or
that `N/A` means "drop the row", would change the answer without saying so. So a predicate
that cannot run on the types it reads is refused with one line: the column, its type, a
value that is not of the type the predicate needs, and the predicate rewritten with
`TRY_CAST` (a value that does not cast becomes NULL; its row is `skipped` with the predicate
as the reason, never dropped), with the rows it is true on. For a number, the rewrite that
reads the most values is suggested: `TRY_CAST(split_part(r.rating, '/', 1) AS DOUBLE)` where
scores are written `3/5`, naming what the plain cast would be true on:

>>> import pyarrow as pa
>>> from llm_assets.sql.compiler import compile_sql
>>> sql = "SELECT r.id, LLM('Positive? {review}', r.review) FROM reviews r WHERE r.rating >= 2"
>>> reviews = pa.table({"id": ["1", "2"], "review": ["good", "bad"], "rating": ["4", "N/A"]})
>>> try:
...     check_predicates(compile_sql(sql), {"reviews": reviews})
... except PredicateTypeError as exc:
...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
predicate r.rating >= 2 reads r.rating as a number, but r.rating is VARCHAR (text as
written: 1 of 2 values are not numbers, e.g. 'N/A'); write TRY_CAST(r.rating AS DOUBLE) >= 2
instead: true on 1 of 2 rows (a value that is not a number becomes NULL and its row is
skipped, with the predicate as the reason)

The check runs each predicate in DuckDB over the join of the sources with the columns typed
as the run types them, so what it refuses would have failed in the run (where a source is
not given yet, an upstream asset at definition load, a predicate over one given source runs
over that table and the rest waits for the run), and the fix it names is verified to run.
Its SQL is built from sqlglot trees (user text never reaches SQL by formatting).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import duckdb
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from llm_assets.data.sql_types import predicate_types
from llm_assets.pipeline.connection import as_arrow, locked_connection
from llm_assets.pipeline.filtering import predicate_only_columns
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import Predicate
from llm_assets.query.render import pre_llm_select
from llm_assets.sql.compiler import check_columns
from llm_assets.sql.syntax import DIALECT, column_node, identifier, render, table

FIX_TYPES = ("DOUBLE", "DATE", "TIMESTAMP", "BOOLEAN")
"""Types a text column is cast to in a suggested fix, tried in this order after the type the
DuckDB error names (numbers as DOUBLE: `3.5` is a rating too)."""
_KIND = {
    "DOUBLE": ("a number", "numbers"),
    "DATE": ("a date", "dates"),
    "TIMESTAMP": ("a timestamp", "timestamps"),
    "BOOLEAN": ("a boolean", "booleans"),
}
_HINTS = (
    (re.compile(r"\bTIMESTAMP"), "TIMESTAMP"),
    (re.compile(r"\bDATE\b"), "DATE"),
    (re.compile(r"\bBOOL(EAN)?\b"), "BOOLEAN"),
    (
        re.compile(
            r"\b(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?\d*|INTEGER_LITERAL|DECIMAL|NUMERIC|DOUBLE"
            r"|FLOAT\d*|REAL)\b"
        ),
        "DOUBLE",
    ),
)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROW = "_typecheck_row"


class PredicateTypeError(ValueError):
    """A predicate that cannot run on the types of the columns it reads, in one line."""


def check_predicates(query: LLMQuery, tables: Mapping[str, pa.Table | pd.DataFrame]) -> None:
    """Raise `PredicateTypeError` (one line) for the first non-LLM predicate of `query` that
    DuckDB cannot run on `tables` (table name -> table) as the run types them; `SQLError`
    for a column the query reads that its table lacks (`check_known_columns`).

    With every source given, each predicate runs over the join of the sources, as in the run.
    With some missing (an upstream asset at definition load), or a semantic join blocked by
    top-k (its pairs exist only once retrieved, in the run), a predicate over one given
    source runs over that table and the others are left for the run."""
    check_known_columns(query, {t: as_arrow(frame).column_names for t, frame in tables.items()})
    by_alias = {s.alias: s.table for s in query.sources}
    blocked = any(j.top_k is not None for j in query.semantic_joins)
    complete = all(t in tables for t in by_alias.values()) and not blocked

    def runnable(p: Predicate) -> bool:
        read = {c.split(".", 1)[0] for c in p.columns}  # aliases: a self-join reads one table
        return complete or (len(read) == 1 and by_alias[read.pop()] in tables)

    predicates = [p for p in query.predicates if runnable(p)]
    if not predicates:
        return
    typed = predicate_only_columns(query)
    con = locked_connection()
    try:
        views, raws, types = _register(con, query, tables, typed)

        def error(condition: exp.Expression, columns: Sequence[str]) -> str | None:
            return _error(con, query, views, complete, condition, columns)

        def true_on(condition: exp.Expression, columns: Sequence[str]) -> tuple[int, int]:
            """(rows `condition` is true on, rows it reads), as the run sees them."""
            select = _counted(query, views, complete, columns)
            total = con.execute(render(select)).fetchone()[0]
            return con.execute(render(select.where(condition))).fetchone()[0], total

        for predicate in predicates:
            problem = error(predicate.expression(), predicate.columns)
            if problem is not None:
                message = _explain(con, error, true_on, predicate, raws, types, typed, problem)
                raise PredicateTypeError(message)
    finally:
        con.close()


def check_known_columns(query: LLMQuery, tables: Mapping[str, Sequence[str]]) -> None:
    """`check_columns` for the tables in `tables` (table -> column names): `SQLError` naming
    the first column the query reads that its table lacks. A table not in `tables` (an
    upstream asset at definition load) is checked by the run."""
    by_alias = {s.alias: s.table for s in query.sources}
    used = [*query.columns_needed(), *(r.corpus_column for r in query.retrievals)]
    for j in query.joins:
        used += [f"{j.left_alias}.{j.left_column}", f"{j.right_alias}.{j.right_column}"]
    assumed: dict[str, list[str]] = {}
    for column in used:
        alias, name = column.split(".", 1)
        if by_alias[alias] not in tables:
            assumed.setdefault(by_alias[alias], []).append(name)
    check_columns(query, {**assumed, **tables})


def _register(con, query: LLMQuery, tables, typed):
    """Per given table, its rows as `_raw_<n>` (with the row number, for sample values) and
    the view `_typed_<n>` that types them as `run_filtered` does (the columns only predicates
    read, by the first alias of the table, where every value reads as one type). Returns
    table -> view, alias -> raw rows, and each qualified column's DuckDB type in its view."""
    views: dict[str, str] = {}
    raw_of: dict[str, str] = {}
    types: dict[str, str] = {}
    for number, source in enumerate(query.sources):
        if source.table in views or source.table not in tables:
            continue
        frame = as_arrow(tables[source.table])
        names = [c for c in typed.get(source.alias, ()) if c in frame.column_names]
        cast = {c: t for c, t in predicate_types(frame, names).items() if t != "VARCHAR"}
        raw, view = f"_raw_{number}", f"_typed_{number}"
        rows = pa.array(range(len(frame)), pa.int64())
        con.register(raw, frame.select(frame.column_names).append_column(_ROW, rows))
        star = exp.Star(
            replace=[
                exp.TryCast(this=exp.column(identifier(c)), to=exp.DataType.build(t)).as_(
                    identifier(c)
                )
                for c, t in cast.items()
            ]
            or None,
            except_=[exp.column(identifier(_ROW))],
        )
        select = exp.select(star).from_(table(raw))
        con.execute(render(exp.Create(this=table(view), kind="VIEW", expression=select)))
        views[source.table], raw_of[source.table] = view, raw
    raws = {}  # alias -> its table's raw rows
    for source in query.sources:
        if source.table not in views:
            continue
        raws[source.alias] = raw_of[source.table]
        columns = con.execute(
            "DESCRIBE " + render(exp.select("*").from_(table(views[source.table])))
        )
        for column, column_type, *_ in columns.fetchall():
            types[f"{source.alias}.{column}"] = str(column_type)
    return views, raws, types


def _counted(query: LLMQuery, views, complete: bool, columns) -> exp.Select:
    """`SELECT COUNT(*)` over every row a predicate reading `columns` sees in the run (the
    join of the typed sources; one typed table when not every source is given)."""
    count = exp.func("COUNT", exp.Star())
    if complete:
        select = pre_llm_select(query, False, tables=views)
        select.set("expressions", [count])
        return select
    alias = columns[0].split(".", 1)[0]
    source = next(s for s in query.sources if s.alias == alias)
    return exp.select(count).from_(table(views[source.table], alias))


def _error(con, query: LLMQuery, views, complete: bool, condition, columns) -> str | None:
    """DuckDB's error (first line) running `condition` over every row it would see in the
    run (`_counted`), or None when it runs."""
    kept = exp.func("COALESCE", exp.paren(condition), exp.false())
    try:
        con.execute(render(_counted(query, views, complete, columns).where(kept))).fetchall()
    except duckdb.Error as exc:
        return " ".join(str(exc).split("\n")[0].split())
    return None


def _explain(con, error, true_on, predicate: Predicate, raws, types, typed, problem: str) -> str:
    shown = friendly(predicate.expression())
    text = [c for c in predicate.columns if types.get(c) == "VARCHAR"]
    hinted = [t for pattern, t in _HINTS if pattern.search(problem)]
    for column in text:
        for target in dict.fromkeys([*hinted, *FIX_TYPES]):
            fixes = []  # (condition, type, split): a number may also be read before a '/'
            for split in (False, True) if target == "DOUBLE" else (False,):
                fixed = with_try_cast(predicate.expression(), column, target, split)
                if fixed is not None and error(fixed[0], predicate.columns) is None:
                    fixes.append((*fixed, split))
            if fixes:
                counted = lambda c: true_on(c, predicate.columns)  # noqa: E731
                return _message(con, shown, column, fixes, raws, typed, counted)
    kinds = ", ".join(f"{c} {types.get(c, '?')}" for c in predicate.columns)
    return f"predicate {shown} cannot run on the columns it reads ({kinds}): {problem}"


def _message(con, shown, column, fixes, raws, typed, true_on) -> str:
    """The refusal with the fix among `fixes` (condition, type, split) that reads the most
    values of `column` (the first on a tie), the rows it is true on, and how many each other
    fix that reads a different number of values would be true on."""
    alias, name = column.split(".", 1)
    raw = raws[alias]
    value = exp.column(identifier(name))
    present = value.copy().is_(exp.null()).not_()
    to = fixes[0][1]

    def unread(cast_to: str, split: bool) -> exp.Expression:
        return exp.and_(present.copy(), read_as(value.copy(), cast_to, split).is_(exp.null()))

    bad = unread(to, False)
    each = [exp.CountIf(this=unread(t, split)) for _, t, split in fixes]
    counts = exp.select(exp.func("COUNT", value.copy()), exp.CountIf(this=bad.copy()), *each)
    n_present, n_bad, *n_unread = con.execute(render(counts.from_(table(raw)))).fetchone()
    best = n_unread.index(min(n_unread))
    condition = fixes[best][0]
    kept, total = true_on(condition)
    others = [
        f"{friendly(c)} would be true on {true_on(c)[0]:,}"
        for i, (c, _, _) in enumerate(fixes)
        if n_unread[i] != n_unread[best]
    ]
    order = exp.Ordered(this=exp.column(identifier(_ROW)))
    first = exp.select(value.copy()).from_(table(raw)).where(bad if n_bad else present)
    sample = con.execute(render(first.order_by(order).limit(1))).fetchone()
    family = next((t for pattern, t in _HINTS if pattern.search(to.upper())), None)
    kind, plural = _KIND.get(family or "", (to, f"{to} values"))
    shown_column = friendly(column_node(alias, name))
    if n_bad:
        why = f"text as written: {n_bad:,} of {n_present:,} values are not {plural}"
        why += f", e.g. {sample[0]!r}"
    elif sample is None:
        why = "no value: every cell is empty"
    elif name not in typed.get(alias, ()):
        why = (
            "the query also returns it, prompts with it or joins on it, and those keep the "
            f"text as written, e.g. {sample[0]!r}"
        )
    else:
        why = f"text as written, e.g. {sample[0]!r}"
    then = (
        f"every value would be NULL and every row skipped: take the {kind[2:]} out of the "
        "text first, e.g. with split_part or regexp_extract"
        if n_present and n_unread[best] == n_present
        else f"a value that is not {kind} becomes NULL and its row is skipped, with the "
        "predicate as the reason"
    )
    where = f", where {' and '.join(others)}" if others else ""
    return (
        f"predicate {shown} reads {shown_column} as {kind}, but {shown_column} is VARCHAR "
        f"({why}); write {friendly(condition)} instead: true on {kept:,} of {total:,} "
        f"rows{where} ({then})"
    )


def read_as(value: exp.Expression, to: str | exp.DataType, split: bool = False) -> exp.Expression:
    """`TRY_CAST(value AS to)`; with `split`, of the text before the first '/' (a score
    written `3/5` reads as 3, as the README's `split_part` form does)."""
    if split:
        value = exp.func("split_part", value, exp.Literal.string("/"), exp.Literal.number(1))
    return exp.TryCast(this=value, to=exp.DataType.build(to))


def with_try_cast(
    condition: exp.Expression, column: str, to: str, split: bool = False
) -> tuple[exp.Expression, str] | None:
    """`condition` with every read of `column` (`alias.name`) cast with TRY_CAST to `to`
    (a `CAST(column AS T)` becomes `TRY_CAST(column AS T)`, keeping T), each of the text
    before its first '/' with `split` (`read_as`), and the type it casts to; None if the
    column is only read through TRY_CAST already.

    >>> from llm_assets.sql.syntax import parse_condition
    >>> fixed, to = with_try_cast(parse_condition("r.rating >= 2 AND r.x = 1"), "r.rating", "DATE")
    >>> friendly(fixed), to
    ('TRY_CAST(r.rating AS DATE) >= 2 AND r.x = 1', 'DATE')
    >>> friendly(with_try_cast(parse_condition("CAST(r.n AS INT) > 1"), "r.n", "DOUBLE")[0])
    'TRY_CAST(r.n AS INT) > 1'
    """
    alias, name = column.split(".", 1)
    tree = condition.copy()
    changed, cast_to = False, to
    for col in list(tree.find_all(exp.Column)):
        if col.table != alias or col.name != name:
            continue
        parent = col.parent
        if isinstance(parent, exp.TryCast):
            continue
        if type(parent) is exp.Cast and parent.this is col:
            cast_to = parent.args["to"].sql(dialect=DIALECT)
            parent.replace(read_as(col.copy(), parent.args["to"].copy(), split))
        else:
            col.replace(read_as(col.copy(), to, split))
        changed = True
    return (tree, cast_to) if changed else None


def friendly(node: exp.Expression) -> str:
    """`node` as DuckDB SQL with identifiers quoted only where they must be, as a user would
    write it (`TRY_CAST(r.rating AS DOUBLE) >= 2`; `r."review score"` keeps its quotes)."""
    from sqlglot.dialects.duckdb import DuckDB

    keywords = {k.upper() for k in DuckDB.Tokenizer.KEYWORDS}
    tree = node.copy()
    for ident in tree.find_all(exp.Identifier):
        plain = _PLAIN_NAME.fullmatch(ident.name) and ident.name.upper() not in keywords
        ident.set("quoted", not plain)
    return render(tree)
