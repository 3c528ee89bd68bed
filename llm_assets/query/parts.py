"""The parts of an LLM query, each a frozen dataclass (`llm_assets.query.model` puts them together
in `LLMQuery` and checks how they fit): a `Source` table, an inner equi-`Join` condition, a
non-LLM `Predicate`, an `LLMCall` stage, a `Retrieval`, a `SemanticJoin` (with its `TopK`
blocking), an `LLMFilter` on a call's answer and the `Aggregate` of `AggregateItem`s.

Each part checks itself at construction (ValueError naming the value and what is accepted):
names follow `llm_assets.sql.syntax`, columns are qualified `alias.column` (`split_column`), an
LLM call's template names its fields by their bare names, qualified where two share one
(`placeholder_names`), a predicate is one scalar expression re-rendered with quoted
identifiers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from llm_assets.optimizer.prompts import parse
from llm_assets.output_spec import OutputSpec
from llm_assets.sql.syntax import (
    alias_problem,
    check_name,
    column_node,
    identifier,
    output_problem,
    parse_condition,
    render,
    table_problem,
)

AGGREGATE_FUNCTIONS: tuple[str, ...] = ("AVG", "SUM", "COUNT", "MIN", "MAX")
FILTER_OPS: tuple[str, ...] = ("=", "!=")

AggregateFunction = Literal["AVG", "SUM", "COUNT", "MIN", "MAX"]


def split_column(qualified: str) -> tuple[str, str]:
    """`"r.review_content"` -> `("r", "review_content")`; ValueError if not `alias.column`
    with a valid alias and column name (`llm_assets.sql.syntax`; the column may contain '.').

    >>> split_column("m.movie_info")
    ('m', 'movie_info')
    """
    alias, dot, name = qualified.partition(".")
    if not dot or not alias or not name:
        raise ValueError(f"column {qualified!r:.120} is not qualified; write it as alias.column")
    check_name("alias", alias, alias_problem)
    return alias, check_name("column name", name)


def bare_name(field: str) -> str:
    """The column part of a field, or the field itself for an unqualified stage output (a
    retrieval). `bare_name("m.movie_info") == "movie_info"`."""
    return field.partition(".")[2] if "." in field else field


def placeholder_names(fields: Sequence[str]) -> tuple[str, ...]:
    """The placeholder naming each field of one LLM call, in argument order: its bare name,
    or, when another field of the call has the same bare name (a self-join's `a.title` and
    `b.title`), the field as written, qualified (`{a.title}`, `{b.title}`).

    >>> placeholder_names(["m.info", "a.title", "b.title", "context"])
    ('info', 'a.title', 'b.title', 'context')
    """
    bare = [bare_name(f) for f in fields]
    return tuple(f if bare.count(b) > 1 else b for f, b in zip(fields, bare, strict=True))


@dataclass(frozen=True)
class Source:
    """One table in FROM."""

    alias: str
    """How every column of this table is qualified (`r` in `r.review_content`)."""
    table: str
    """The table name as written in the query; the caller binds it to a DuckDB relation."""

    def __post_init__(self) -> None:
        check_name("source alias", self.alias, alias_problem)
        check_name("table name", self.table, table_problem)


@dataclass(frozen=True)
class Join:
    """An inner equi-join condition `left_alias.left_column = right_alias.right_column`."""

    left_alias: str
    """Alias of one side."""
    left_column: str
    """Column of the left side (bare name)."""
    right_alias: str
    """Alias of the other side; differs from `left_alias`."""
    right_column: str
    """Column of the right side (bare name)."""

    def __post_init__(self) -> None:
        split_column(f"{self.left_alias}.{self.left_column}")
        split_column(f"{self.right_alias}.{self.right_column}")
        if self.left_alias == self.right_alias:
            raise ValueError(
                f"join {self.left_alias}.{self.left_column} = {self.right_alias}."
                f"{self.right_column} compares a source with itself; join two different aliases"
            )

    @property
    def aliases(self) -> tuple[str, str]:
        return self.left_alias, self.right_alias

    def condition(self) -> exp.EQ:
        """The condition as a sqlglot tree over quoted identifiers."""
        return exp.EQ(
            this=column_node(self.left_alias, self.left_column),
            expression=column_node(self.right_alias, self.right_column),
        )

    def sql(self) -> str:
        return render(self.condition())


@dataclass(frozen=True)
class Predicate:
    """One non-LLM conjunct of WHERE, as DuckDB SQL over qualified columns.

    Invariants: `sql` is one scalar expression (no statement, subquery or table), rendered
    from its sqlglot tree with quoted identifiers (construction normalises it, so
    `Predicate("r.kind = 'F'", ...)` holds `"r"."kind" = 'F'`); the qualified columns it
    references are exactly `columns`.
    """

    sql: str
    """DuckDB boolean expression over `alias.column` references, e.g. `"r"."kind" = 'Fresh'`."""
    columns: tuple[str, ...]
    """The qualified columns `sql` reads, e.g. `("r.review_type",)`."""

    def __post_init__(self) -> None:
        found = []

        def requote(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column):
                return node
            if node.args.get("db") or node.args.get("catalog"):
                raise ValueError(
                    f"predicate {self.sql!r} reads {render(node)}; write columns as alias.column"
                )
            if not node.table:
                raise ValueError(
                    f"predicate {self.sql!r} reads unqualified column {node.name!r}; "
                    f"qualify it as alias.{node.name}"
                )
            found.append(f"{node.table}.{node.name}")
            return column_node(*split_column(found[-1]))

        tree = parse_condition(self.sql).transform(requote)
        if set(found) != set(self.columns):
            raise ValueError(
                f"predicate {self.sql!r} reads columns {sorted(set(found))}, "
                f"but declares {sorted(set(self.columns))}"
            )
        object.__setattr__(self, "sql", render(tree))

    def expression(self) -> exp.Expression:
        """The predicate as a sqlglot tree (a fresh copy)."""
        return parse_condition(self.sql)

    def rename(self, names: Mapping[str, str]) -> str:
        """The predicate as SQL over output names (`names`: qualified -> output name)."""

        def swap(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and node.table:
                return exp.column(identifier(names[f"{node.table}.{node.name}"]))
            return node

        return render(self.expression().transform(swap))


@dataclass(frozen=True)
class LLMCall:
    """One LLM stage: a prompt per row from `template` and the row's `fields`."""

    name: str
    """The output column it adds, e.g. `llm_1`; unique among the query's stage outputs."""
    template: str
    """The instruction; `{placeholder}`s name fields by bare name (`{movie_info}`)."""
    fields: tuple[str, ...]
    """Values passed, in argument order: qualified columns (`m.movie_info`) or the name of a
    retrieval output (`context`); each once. Placeholders name them (`placeholder_names`)."""
    output: OutputSpec
    """The shape of a valid answer."""
    max_tokens: int
    """Generation limit per request (> 0)."""

    def __post_init__(self) -> None:
        check_name("LLM call name", self.name, output_problem)
        if self.max_tokens <= 0:
            raise ValueError(
                f"LLM call {self.name!r}: max_tokens must be > 0, got {self.max_tokens}"
            )
        if not self.fields:
            raise ValueError(f"LLM call {self.name!r} passes no field")
        names = self.field_names
        dupes = sorted({b for b in names if names.count(b) > 1})
        if dupes:
            raise ValueError(
                f"LLM call {self.name!r} passes several fields named {dupes} "
                f"({list(self.fields)}); a placeholder could not tell them apart"
            )
        try:
            parse(self.template, names)
        except ValueError as exc:
            raise ValueError(f"LLM call {self.name!r}: {exc}") from exc

    @property
    def field_names(self) -> tuple[str, ...]:
        """The placeholder of each field, in argument order (`placeholder_names`)."""
        return placeholder_names(self.fields)

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Fields the template names, in order of first mention."""
        return tuple(parse(self.template, self.field_names).fields)


@dataclass(frozen=True)
class Retrieval:
    """`similarity_search(query_column, k => k)`: the k nearest corpus values of each row."""

    name: str
    """The output column it adds (used as an LLM field, e.g. `context`)."""
    query_column: str
    """Qualified column whose value is the search query, e.g. `s.question`."""
    k: int
    """How many nearest values to retrieve (> 0)."""
    corpus_column: str
    """Qualified column whose distinct values (over the whole source table, before any
    predicate) form the corpus, e.g. `s.context`; see `query.render.corpus_sql`."""

    def __post_init__(self) -> None:
        check_name("retrieval name", self.name, output_problem)
        if self.k <= 0:
            raise ValueError(f"retrieval {self.name!r}: k must be > 0, got {self.k}")
        split_column(self.query_column)
        split_column(self.corpus_column)


@dataclass(frozen=True)
class TopK:
    """`b.y IN similarity_search(a.x, k => n)` in a semantic join's ON: each row of `a` is a
    candidate pair only with the `k` rows of `b` whose `y` is nearest to its `x` (the retriever
    of similarity_search, over every row of `b` with a non-null `y`; ties by row order). A row
    whose `x` is null has no pair, as `NULL IN (...)` in SQL."""

    corpus_column: str
    """Qualified column searched (`b.y`, before IN): one corpus entry per row of its source."""
    query_column: str
    """Qualified column whose value is the search query (`a.x`)."""
    k: int
    """Rows of the corpus side per row of the query side (> 0)."""

    def __post_init__(self) -> None:
        if self.k <= 0:
            raise ValueError(f"similarity_search blocking: k must be > 0, got {self.k}")
        if split_column(self.corpus_column)[0] == split_column(self.query_column)[0]:
            raise ValueError(
                f"{self.corpus_column} IN similarity_search({self.query_column}) searches a "
                f"source for its own rows; compare columns of the two joined sources"
            )

    @property
    def corpus_alias(self) -> str:
        return split_column(self.corpus_column)[0]

    @property
    def query_alias(self) -> str:
        return split_column(self.query_column)[0]

    def show(self) -> str:
        return f"{self.corpus_column} IN similarity_search({self.query_column}, k => {self.k})"


@dataclass(frozen=True)
class SemanticJoin:
    """`JOIN b ON LLM('... {x} ... {y}', a.x, b.y) = 'yes'`: source `alias` is joined to the
    earlier sources by the answer of LLM call `call_name` (with its `LLMFilter`), after any
    equi-join conjuncts of the same ON. The candidate pairs are the join without it (a cross
    product, the equi-join, or the `top_k` blocking); the pairs the filter keeps are the
    join's rows."""

    alias: str
    """The source joined."""
    call_name: str
    """The LLM call deciding each pair."""
    top_k: TopK | None = None
    """Top-k blocking (`b.y IN similarity_search(a.x, k => n)` in the same ON), or None."""


@dataclass(frozen=True)
class LLMFilter:
    """`LLM(...) op value` in WHERE: keeps the rows whose answer of `call_name` satisfies it.
    Applies right after that call, before later calls."""

    call_name: str
    """The filtered LLM call."""
    op: str
    """One of `FILTER_OPS`: `=` keeps answers equal to `value`, `!=` the others."""
    value: str
    """The compared answer; one of the call's choice values."""

    def __post_init__(self) -> None:
        if self.op not in FILTER_OPS:
            raise ValueError(f"unknown LLM filter op {self.op!r}; expected one of {FILTER_OPS}")

    def keeps(self, answer: str) -> bool:
        """Whether a row with this (stripped) answer passes."""
        return (answer.strip() == self.value) == (self.op == "=")


@dataclass(frozen=True)
class AggregateItem:
    """One aggregated output column: `function(call_name) AS alias`, or `COUNT(*) AS alias`
    when `call_name` is None."""

    function: AggregateFunction
    """One of `AGGREGATE_FUNCTIONS`."""
    call_name: str | None
    """The LLM call whose answers are aggregated; None for `COUNT(*)` (rows per group)."""
    alias: str
    """The output column, e.g. `avg_score`."""

    def __post_init__(self) -> None:
        if self.function not in AGGREGATE_FUNCTIONS:
            raise ValueError(
                f"unknown aggregate {self.function!r}; expected one of {AGGREGATE_FUNCTIONS}"
            )
        if self.call_name is None and self.function != "COUNT":
            raise ValueError(f"{self.function}(*) is not an aggregate; only COUNT(*) is")
        check_name("aggregate alias", self.alias, output_problem)

    @property
    def numeric(self) -> bool:
        """Whether the call's answers are read as numbers (AVG/SUM/MIN/MAX); COUNT counts
        non-null answers as they are."""
        return self.function != "COUNT"

    def show(self) -> str:
        return f"{self.function}({self.call_name or '*'})"

    def expression(self) -> exp.Expression:
        """`FUNC("call_name") AS "alias"` (or `COUNT(*)`) over the staged relation."""
        arg = exp.Star() if self.call_name is None else exp.column(identifier(self.call_name))
        return exp.func(self.function, arg).as_(identifier(self.alias))


@dataclass(frozen=True)
class Aggregate:
    """`item, ... GROUP BY group_by`, run after every other stage over the rows that passed
    and were answered. Without `group_by` it is a global aggregate: exactly one output row,
    also over no rows (SQL semantics: COUNT 0, AVG/SUM/MIN/MAX null)."""

    group_by: tuple[str, ...]
    """Qualified grouping columns (may be empty: one group, one output row)."""
    items: tuple[AggregateItem, ...]
    """The aggregated output columns (at least one; aliases distinct)."""

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("an aggregate needs at least one item, e.g. COUNT(*)")
        aliases = [i.alias for i in self.items]
        dupes = sorted({a for a in aliases if aliases.count(a) > 1})
        if dupes:
            raise ValueError(f"aggregate output names {dupes} are used twice")
        for column in self.group_by:
            split_column(column)

    @classmethod
    def of(
        cls, group_by: tuple[str, ...], function: AggregateFunction, call_name: str, alias: str
    ) -> Aggregate:
        """The common case: one aggregate of one LLM call, `function(call_name) AS alias`."""
        return cls(group_by, (AggregateItem(function, call_name, alias),))

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(i.alias for i in self.items)

    @property
    def call_names(self) -> tuple[str, ...]:
        """The LLM calls whose answers are aggregated (each once)."""
        return tuple(dict.fromkeys(i.call_name for i in self.items if i.call_name is not None))
