"""What runs after the LLM calls and shapes the query's answer, as parts of the query model
(`llm_assets.query.model.LLMQuery.shape`): a SELECT alias per projected column, `SELECT *`,
DISTINCT, ORDER BY, LIMIT and OFFSET. `query.render.answer_select` renders them as one DuckDB
SELECT over the rows the WHERE keeps, with each LLM call's answers as a column (NULL where the
row was skipped or failed), so the relational part of a query is DuckDB's.

A projection item `*` stands for every column of every source, `r.*` for those of source `r`,
in table order (expanded when the answer is computed, from the tables it reads).

ORDER BY keys are DuckDB expressions over qualified base columns (`"r"."year"`) and output
names (an LLM call or aggregate alias, as an unqualified column: `"stars"`); `OrderKey.render`
swaps both for what sorts them in the relation the key runs over.

>>> from llm_assets.sql.syntax import column_node
>>> key = OrderKey('TRY_CAST("r"."rating" AS DOUBLE)', ("r.rating",), (), descending=True)
>>> key.render({"r.rating": column_node(None, "rating")})
'TRY_CAST("rating" AS DOUBLE) DESC'
>>> OrderKey('"stars"', (), ("stars",)).render({"stars": column_node("_a", "llm_1")})
'"_a"."llm_1" ASC'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from llm_assets.query.parts import split_column
from llm_assets.sql.syntax import check_name, output_problem, parse_condition, render

STAR = "*"
"""A projection item standing for every column of every source (`r.*`: of source `r`)."""


def star_alias(item: str) -> str | None:
    """The source alias of a star item (`r.*` -> `r`), `""` for `*`, None for any other item.

    >>> star_alias("*"), star_alias("r.*"), star_alias("r.id")
    ('', 'r', None)
    """
    if item == STAR:
        return ""
    alias, dot, rest = item.partition(".")
    return alias if dot and rest == STAR else None


@dataclass(frozen=True)
class OrderKey:
    """One ORDER BY key.

    Invariants: `sql` is one DuckDB expression (no statement, subquery, table, aggregate or
    window) whose qualified columns are exactly `columns` and whose unqualified columns are
    exactly `outputs`."""

    sql: str
    """The key, e.g. `"r"."year"`, `TRY_CAST("r"."rating" AS DOUBLE)` or `"stars"`."""
    columns: tuple[str, ...] = ()
    """The qualified base columns it reads (`r.year`)."""
    outputs: tuple[str, ...] = ()
    """The output names it reads: LLM calls and aggregate aliases (`stars`)."""
    descending: bool = False
    nulls_first: bool = False
    """DuckDB's default is nulls last, ascending or descending."""

    def __post_init__(self) -> None:
        tree = parse_condition(self.sql)
        bad = next((n for n in tree.walk() if isinstance(n, exp.AggFunc | exp.Window)), None)
        if bad is not None:
            raise ValueError(f"ORDER BY key {self.sql!r:.120} holds {render(bad)}")
        columns, outputs = set(), set()
        for node in tree.find_all(exp.Column):
            if node.args.get("db") or node.args.get("catalog"):
                raise ValueError(f"ORDER BY key {self.sql!r:.120} reads {render(node)}")
            if node.table:
                columns.add(f"{node.table}.{node.name}")
            else:
                outputs.add(check_name("ORDER BY output", node.name, output_problem))
        for column in self.columns:
            split_column(column)
        if columns != set(self.columns) or outputs != set(self.outputs):
            raise ValueError(
                f"ORDER BY key {self.sql!r:.120} reads {sorted(columns | outputs)}, but "
                f"declares {sorted(set(self.columns) | set(self.outputs))}"
            )

    def expression(self, refs: Mapping[str, exp.Expression]) -> exp.Expression:
        """The key as a sqlglot tree over another relation: each base column (`r.year`) and
        each output name (`stars`) as a copy of `refs[it]`."""

        def swap(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column):
                return node
            return refs[f"{node.table}.{node.name}" if node.table else node.name].copy()

        return parse_condition(self.sql).transform(swap)

    def ordered(self, refs: Mapping[str, exp.Expression]) -> exp.Ordered:
        """`expression` with its direction and null order, for an ORDER BY."""
        return exp.Ordered(
            this=self.expression(refs), desc=self.descending, nulls_first=self.nulls_first
        )

    def render(self, refs: Mapping[str, exp.Expression]) -> str:
        return render(self.ordered(refs))


@dataclass(frozen=True)
class Shape:
    """The clauses that shape the answer after the LLM calls (SQL's order of evaluation:
    projection, DISTINCT, ORDER BY, OFFSET, LIMIT)."""

    labels: tuple[str | None, ...] = ()
    """Per projection item, its SELECT alias (`SELECT m.id AS movie`: `movie`) or None (the
    item's own name); empty: no alias anywhere."""
    distinct: bool = False
    """SELECT DISTINCT: one answer row per distinct projected row (in order of first row)."""
    order_by: tuple[OrderKey, ...] = ()
    """ORDER BY keys; ties, and a query without ORDER BY, keep the rows' order (`_row`)."""
    limit: int | None = None
    """LIMIT n (>= 0), or None."""
    offset: int = 0
    """OFFSET m (>= 0): the first m rows of the ordered answer are left out."""

    def __post_init__(self) -> None:
        for label in self.labels:
            if label is not None:
                check_name("SELECT alias", label, output_problem)
        for name, value in (("LIMIT", self.limit), ("OFFSET", self.offset)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")

    @property
    def cuts(self) -> bool:
        """Whether LIMIT or OFFSET leaves rows out."""
        return self.limit is not None or self.offset > 0

    def show_limit(self) -> str:
        """`LIMIT 10 OFFSET 5` as the query wrote it (for a row's skip reason)."""
        parts = [f"LIMIT {self.limit}"] if self.limit is not None else []
        return " ".join(parts + ([f"OFFSET {self.offset}"] if self.offset else []))
