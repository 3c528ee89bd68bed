"""The LLM query model: sources, an inner equi-join, non-LLM predicates, LLM stages, post-ops.

An `LLMQuery` is pure data (frozen dataclasses, no Dagster, no I/O) that the asset layer runs
stage by stage (DESIGN.md sections 1 and 4, "Filter pushdown"); `llm_assets.query_sql`
renders its SQL:

1. **pre-LLM relation** (`query_sql.pre_llm_sql`): the join of the sources in DuckDB,
   selecting every base column a later stage reads (`columns_needed`) under an unambiguous
   output name (`output_names`); with `pushdown=True` every non-LLM predicate runs here, in WHERE.
2. **retrievals**: each `Retrieval` adds a column holding the k nearest values of its corpus
   column (`query_sql.corpus_sql`) to the row's query column.
3. **LLM calls**, in the order of `llm_calls`; every `LLMFilter` on a call applies right after
   that call, before any later call runs (so later calls see only the rows that passed).
4. **post-LLM predicates** (`query_sql.post_llm_predicates`): with `pushdown=False` the
   non-LLM predicates run here instead, as SQL over the output names. Predicates and LLM
   filters are a conjunction, so the final rows are the same either way; only the number of
   LLM calls differs.
5. **aggregate** (if any), last, over the rows that passed and were answered; without GROUP
   BY it is one row (`query_sql.aggregate_sql`). Then the `projection`.

Columns are written qualified, `alias.column` (e.g. `r.review_content`); LLM calls, retrievals
and the aggregate are named by their output column (`llm_1`, `context`, `avg_score`).

>>> from llm_assets.output_spec import OutputSpec
>>> kids = LLMCall("llm_1", "Kids? {info} {text}", ("m.info", "r.text"),
...                OutputSpec.choice(["Yes", "No"]), max_tokens=2)
>>> q = LLMQuery(
...     name="q2",
...     sources=(Source("r", "reviews"), Source("m", "movies")),
...     joins=(Join("r", "link", "m", "link"),),
...     predicates=(Predicate("r.kind = 'Fresh'", ("r.kind",)),),
...     llm_calls=(kids,),
...     llm_filters=(LLMFilter("llm_1", "=", "Yes"),),
...     projection=("m.title",),
... )
>>> q.columns_needed()
('m.title', 'm.info', 'r.text', 'r.kind')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from llm_assets.optimizer.prompts import parse
from llm_assets.output_spec import OutputSpec
from llm_assets.sql_ast import (
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
SOURCE_ROW = "_src_row"
"""The row-number column a caller adds to each source relation (see `query_sql.pre_llm_sql`)."""
NAME_SEPARATOR = "__"
"""Joins alias and column in an output name when the bare column name is ambiguous (`m__title`)."""

AggregateFunction = Literal["AVG", "SUM", "COUNT", "MIN", "MAX"]


def split_column(qualified: str) -> tuple[str, str]:
    """`"r.review_content"` -> `("r", "review_content")`; ValueError if not `alias.column`
    with a valid alias and column name (`llm_assets.sql_ast`; the column may contain '.').

    >>> split_column("m.movie_info")
    ('m', 'movie_info')
    """
    alias, dot, name = qualified.partition(".")
    if not dot or not alias or not name:
        raise ValueError(f"column {qualified!r:.120} is not qualified; write it as alias.column")
    check_name("alias", alias, alias_problem)
    return alias, check_name("column name", name)


def bare_name(field: str) -> str:
    """The name a template placeholder uses for a field: the column part, or the field itself
    for an unqualified stage output (a retrieval). `bare_name("m.movie_info") == "movie_info"`."""
    return field.partition(".")[2] if "." in field else field


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
    retrieval output (`context`). Bare names are unique within a call."""
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
        bare = [bare_name(f) for f in self.fields]
        dupes = sorted({b for b in bare if bare.count(b) > 1})
        if dupes:
            raise ValueError(
                f"LLM call {self.name!r} passes several fields named {dupes} "
                f"({list(self.fields)}); a placeholder could not tell them apart"
            )
        try:
            parse(self.template, bare)
        except ValueError as exc:
            raise ValueError(f"LLM call {self.name!r}: {exc}") from exc

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Fields the template names, in order of first mention."""
        return tuple(parse(self.template, [bare_name(f) for f in self.fields]).fields)


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
    predicate) form the corpus, e.g. `s.context`; see `query_sql.corpus_sql`."""

    def __post_init__(self) -> None:
        check_name("retrieval name", self.name, output_problem)
        if self.k <= 0:
            raise ValueError(f"retrieval {self.name!r}: k must be > 0, got {self.k}")
        split_column(self.query_column)
        split_column(self.corpus_column)


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


@dataclass(frozen=True)
class LLMQuery:
    """A query whose expensive operators are LLM calls; see the module docstring for stages.

    Invariants (checked at construction, ValueError naming the value and the accepted ones):
    source aliases are unique and every source after the first is joined to an earlier one;
    every qualified column names a known alias; stage outputs (LLM calls, retrievals, the
    aggregate aliases) have unique names; every LLM field is a qualified column or a retrieval;
    filters and the aggregate name known calls; a filtered call answers a choice holding the
    compared value; with an aggregate, the projection holds only group-by columns and the
    aggregate aliases.
    """

    name: str
    """Query name (`q1`...), used for asset names."""
    sources: tuple[Source, ...]
    """Tables in FROM, in join order."""
    joins: tuple[Join, ...] = ()
    """Inner equi-join conditions connecting the sources."""
    predicates: tuple[Predicate, ...] = ()
    """Non-LLM conjuncts of WHERE (pushed below the LLM calls when `pushdown`)."""
    retrievals: tuple[Retrieval, ...] = ()
    """Retrieval stages, run before the LLM calls."""
    llm_calls: tuple[LLMCall, ...] = ()
    """LLM stages, in execution order."""
    llm_filters: tuple[LLMFilter, ...] = ()
    """LLM conjuncts of WHERE; each applies right after its call."""
    projection: tuple[str, ...] = ()
    """Output columns: qualified base columns, LLM call or retrieval names, aggregate aliases."""
    aggregate: Aggregate | None = None
    """The final aggregation, if any."""

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError(f"query {self.name!r} has no source")
        aliases = [s.alias for s in self.sources]
        lowered = [a.lower() for a in aliases]
        dupes = sorted({a for a in aliases if lowered.count(a.lower()) > 1})
        if dupes:
            raise ValueError(
                f"query {self.name!r}: source aliases {dupes} are used twice "
                f"(aliases are compared case-insensitively, as DuckDB does)"
            )
        self._check_joins(aliases)
        calls = [c.name for c in self.llm_calls]
        stage_outputs = calls + [r.name for r in self.retrievals]
        if self.aggregate is not None:
            stage_outputs += self.aggregate.aliases
        dupes = sorted({n for n in stage_outputs if stage_outputs.count(n) > 1})
        if dupes:
            raise ValueError(f"query {self.name!r}: stage output names {dupes} are used twice")
        retrievals = {r.name for r in self.retrievals}
        for column in self._base_columns():
            self._check_alias(column, aliases)
        for r in self.retrievals:
            self._check_alias(r.corpus_column, aliases)
        for call in self.llm_calls:
            for field in call.fields:
                if "." not in field and field not in retrievals:
                    raise ValueError(
                        f"LLM call {call.name!r} field {field!r} is neither a qualified column "
                        f"nor a retrieval; retrievals: {sorted(retrievals)}"
                    )
        by_name = {c.name: c for c in self.llm_calls}
        for f in self.llm_filters:
            call = by_name.get(f.call_name)
            if call is None:
                raise ValueError(
                    f"LLM filter on unknown call {f.call_name!r}; known calls: {calls}"
                )
            if call.output.kind != "choice" or f.value not in call.output.values:
                raise ValueError(
                    f"LLM filter {f.call_name} {f.op} {f.value!r}: the call must answer a choice "
                    f"holding {f.value!r}, its output is {call.output}"
                )
        self._check_projection(aliases, calls, retrievals)

    # ---- validation helpers -------------------------------------------------------------

    def _check_joins(self, aliases: list[str]) -> None:
        for j in self.joins:
            for alias in j.aliases:
                if alias not in aliases:
                    raise ValueError(
                        f"join {j.sql()} names unknown alias {alias!r}; sources: {aliases}"
                    )
        for i, alias in enumerate(aliases[1:], start=1):
            if not self.joins_for(i):
                raise ValueError(
                    f"source {alias!r} is not joined to any of {aliases[:i]}; "
                    f"add a join condition (cross joins are not supported)"
                )

    def joins_for(self, i: int) -> list[Join]:
        """The join conditions that attach source i to sources 0..i-1."""
        alias = self.sources[i].alias
        earlier = {s.alias for s in self.sources[:i]}
        return [
            j for j in self.joins if alias in j.aliases and (set(j.aliases) - {alias}) <= earlier
        ]

    def _check_alias(self, column: str, aliases: list[str]) -> None:
        alias, _ = split_column(column)
        if alias not in aliases:
            raise ValueError(f"column {column!r} names unknown alias {alias!r}; sources: {aliases}")

    def _check_projection(self, aliases: list[str], calls: list[str], retrievals: set[str]) -> None:
        if not self.projection:
            raise ValueError(f"query {self.name!r} projects no column")
        agg = self.aggregate
        if agg is not None:
            for a in agg.items:
                if a.call_name is not None and a.call_name not in calls:
                    raise ValueError(
                        f"aggregate {a.show()} names unknown call {a.call_name!r}; "
                        f"known calls: {calls}"
                    )
            allowed = [*agg.group_by, *agg.aliases]
            for item in self.projection:
                if item in allowed:
                    continue
                if agg.group_by:
                    raise ValueError(
                        f"projection {item!r} is neither grouped nor aggregated; "
                        f"with GROUP BY the projection may hold {allowed}"
                    )
                fix = f"add GROUP BY {item}" if "." in item else "aggregate it"
                raise ValueError(
                    f"projection {item!r} is not aggregated; without GROUP BY the projection "
                    f"may hold only the aggregates {allowed} (one answer row): {fix}"
                )
            return
        for item in self.projection:
            if "." in item:
                continue  # base column, alias already checked
            if item not in calls and item not in retrievals:
                raise ValueError(
                    f"projection {item!r} is not a qualified column, an LLM call or a retrieval; "
                    f"calls: {calls}, retrievals: {sorted(retrievals)}"
                )

    # ---- columns -----------------------------------------------------------------------

    def _base_columns(self) -> list[str]:
        """Every qualified column any stage reads, with repeats, in order of first mention:
        projection, group-by, retrieval queries, LLM fields, predicates."""
        out = [p for p in self.projection if "." in p]
        if self.aggregate is not None:
            out += list(self.aggregate.group_by)
        out += [r.query_column for r in self.retrievals]
        out += [f for c in self.llm_calls for f in c.fields if "." in f]
        out += [c for p in self.predicates for c in p.columns]
        return out

    def columns_needed(self) -> tuple[str, ...]:
        """Every qualified base column a stage reads per row (each once, in order of first
        mention: projection, group-by, retrieval queries, LLM fields, predicates). Corpus
        columns are not per-row inputs: read them with `query_sql.corpus_sql`."""
        return tuple(dict.fromkeys(self._base_columns()))

    def stage_outputs(self) -> tuple[str, ...]:
        """Names of the columns the stages add: retrievals, LLM calls, the aggregate aliases."""
        names = [r.name for r in self.retrievals] + [c.name for c in self.llm_calls]
        if self.aggregate is not None:
            names += self.aggregate.aliases
        return tuple(names)

    def output_names(self) -> dict[str, str]:
        """Qualified column -> its column name in the pre-LLM relation.

        Rule: the bare column name (`movie_info`) when no other needed column has the same bare
        name and no stage output is called that (compared case-insensitively, as DuckDB does);
        otherwise `alias__column` (`m__title`, `s__context`). Names are unique.
        """
        needed = self.columns_needed()
        taken = {n.lower() for n in self.stage_outputs()}
        bare = [split_column(c)[1].lower() for c in needed]
        names: dict[str, str] = {}
        for column, low in zip(needed, bare, strict=True):
            alias, col = split_column(column)
            clash = bare.count(low) > 1 or low in taken
            names[column] = f"{alias}{NAME_SEPARATOR}{col}" if clash else col
        lowered = [n.lower() for n in names.values()] + sorted(taken)
        dupes = sorted({n for n in lowered if lowered.count(n) > 1})
        if dupes:
            raise ValueError(f"query {self.name!r}: output names {dupes} collide; rename a column")
        return names

    def field_columns(self, call_name: str) -> dict[str, str]:
        """For one LLM call: placeholder (bare field name) -> column of the staged relation
        holding its value (an output name, or the retrieval's name)."""
        by_name = {c.name: c for c in self.llm_calls}
        if call_name not in by_name:
            raise ValueError(f"unknown LLM call {call_name!r}; known calls: {list(by_name)}")
        names = self.output_names()
        return {bare_name(f): names.get(f, f) for f in by_name[call_name].fields}

    def projection_columns(self) -> tuple[str, ...]:
        """The projection as column names of the staged relation (output names for base columns;
        LLM call, retrieval and aggregate names as they are)."""
        names = self.output_names()
        return tuple(names.get(p, p) for p in self.projection)

    def filters_for(self, call_name: str) -> tuple[LLMFilter, ...]:
        """The LLM filters that apply right after `call_name`."""
        return tuple(f for f in self.llm_filters if f.call_name == call_name)
