"""The clauses of LLM-SQL that run after the LLM calls, compiled into the query's `Shape`
(`llm_assets.query.answer`): SELECT aliases, DISTINCT, ORDER BY, LIMIT and OFFSET
(`llm_assets.sql.compiler` documents the language; `sql.clauses.Compiler` the other clauses).

An ORDER BY key is a column (`r.year`), a SELECT alias (of a column, an LLM call or an
aggregate), a position (`ORDER BY 2`) or a DuckDB expression over those
(`TRY_CAST(stars AS DOUBLE) DESC`), with ASC/DESC and NULLS FIRST/LAST.

>>> from llm_assets.sql.compiler import compile_sql
>>> q = compile_sql("SELECT m.id AS movie, LLM('Stars for {plot}', m.plot) AS stars FROM movies m "
...                 "ORDER BY TRY_CAST(stars AS DOUBLE) DESC, movie LIMIT 3 OFFSET 1")
>>> [k.sql for k in q.shape.order_by], q.shape.labels, q.shape.limit, q.shape.offset
(['TRY_CAST("stars" AS DOUBLE)', '"m"."id"'], ('movie', None), 3, 1)
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from llm_assets.query.answer import OrderKey, Shape, star_alias
from llm_assets.query.parts import Aggregate
from llm_assets.sql.clauses import Compiler
from llm_assets.sql.nodes import SQLError, has_llm, show
from llm_assets.sql.syntax import column_node, render

REFUSED = {
    "with_": "WITH is not supported; write one SELECT over the tables",
    "having": "HAVING is not supported; put row conditions in WHERE",
    "qualify": "QUALIFY and window functions are not supported",
    "windows": "window functions are not supported",
    "sample": "USING SAMPLE is not supported; use LIMIT n (the first n rows)",
}
"""A clause that stays refused -> the line saying so and what to write instead."""


def compile_shape(
    c: Compiler,
    select: exp.Select,
    projection: Sequence[str],
    labels: Sequence[str | None],
    aggregate: Aggregate | None,
) -> Shape:
    """The `Shape` of a parsed SELECT whose other clauses `c` compiled."""
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        raise SQLError(
            f"unsupported DISTINCT ON: {show(distinct)} (write SELECT DISTINCT over the columns)"
        )
    order = select.args.get("order")
    keys = [
        order_key(c, node, projection, labels, aggregate)
        for node in (order.expressions if order is not None else [])
    ]
    return Shape(
        labels=tuple(labels) if any(labels) else (),
        distinct=distinct is not None,
        order_by=tuple(keys),
        limit=count(select.args.get("limit"), "LIMIT"),
        offset=count(select.args.get("offset"), "OFFSET") or 0,
    )


def count(node: exp.Expression | None, clause: str) -> int | None:
    """The whole number of `LIMIT n` / `OFFSET m`, None without the clause."""
    if node is None:
        return None
    if isinstance(node, exp.Fetch):
        raise SQLError(f"unsupported {show(node)} (write LIMIT n)")
    options = node.args.get("limit_options")
    value = node.args.get("expression")
    if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
        value = None
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
        raise SQLError(
            f"unsupported {show(node).strip()} ({clause} takes a whole number >= 0, e.g. "
            f"{clause} 10)"
        )
    return int(value.this)


def order_key(
    c: Compiler,
    node: exp.Ordered,
    projection: Sequence[str],
    labels: Sequence[str | None],
    aggregate: Aggregate | None,
) -> OrderKey:
    """One ORDER BY key: columns qualified, SELECT aliases of columns resolved to the
    column, aliases of LLM calls and aggregates kept as output names."""
    ctx = f"in ORDER BY: {show(node)}"
    if has_llm(node):
        raise SQLError(
            f"unsupported LLM(...) {ctx} (name the call in SELECT, LLM(...) AS x, and ORDER BY x)"
        )
    bad = next(
        (n for n in node.this.walk() if isinstance(n, exp.AggFunc | exp.Window | exp.Query)),
        None,
    )
    if bad is not None:
        raise SQLError(
            f"unsupported {show(bad)} {ctx} (name an aggregate in SELECT, COUNT(*) AS n, and "
            f"ORDER BY n; window functions and subqueries are not supported)"
        )
    unknown = next((n for n in node.this.walk() if isinstance(n, exp.Anonymous)), None)
    if unknown is not None:
        raise SQLError(f"unknown function {unknown.name}(...) {ctx}; use DuckDB's built-ins")
    outputs = set(aggregate.aliases) if aggregate is not None else {x.name for x in c.calls}
    named = {label: p for p, label in zip(projection, labels, strict=True) if label}
    columns: list[str] = []
    read: list[str] = []

    def ref(item: str) -> exp.Column:
        """A column for a projection item or output name."""
        if item in outputs:
            read.append(item)
            return column_node(None, item)
        columns.append(item)
        return column_node(*item.split(".", 1))

    def resolve(col: exp.Expression) -> exp.Expression:
        if isinstance(col, exp.Literal) and col is tree and not col.is_string:
            k = int(col.this) if col.this.isdigit() else 0
            if not 1 <= k <= len(projection) or star_alias(projection[k - 1]) is not None:
                raise SQLError(
                    f"ORDER BY position {col.this} {ctx} is not a column of the SELECT list "
                    f"(1 to {len(projection)}, not *)"
                )
            return ref(projection[k - 1])
        if not isinstance(col, exp.Column):
            return col
        if not col.table and col.name in named:
            return ref(named[col.name])
        if not col.table and col.name in outputs:
            return ref(col.name)
        return ref(c.qualify(col, "ORDER BY", node))

    tree = node.this.copy()
    tree = tree.transform(resolve, copy=False)
    try:
        return OrderKey(
            render(tree),
            tuple(dict.fromkeys(columns)),
            tuple(dict.fromkeys(read)),
            descending=bool(node.args.get("desc")),
            nulls_first=bool(node.args.get("nulls_first")),
        )
    except ValueError as exc:
        raise SQLError(f"{exc} {ctx}") from exc
