"""The LLM query model: sources, an inner equi-join, non-LLM predicates, LLM stages, post-ops.

An `LLMQuery` is pure data (frozen dataclasses, no Dagster, no I/O) that the asset layer runs
stage by stage (DESIGN.md sections 1 and 4, "Filter pushdown"); `llm_assets.query.render`
renders its SQL. Its parts (`Source`, `Join`, `Predicate`, `LLMCall`, `Retrieval`,
`LLMFilter`, `Aggregate`) live in `llm_assets.query.parts`, each checking itself; this module
puts them together and checks how they fit (`LLMQuery`'s invariants).

The stages, in order:

1. **pre-LLM relation** (`query.render.pre_llm_sql`): the join of the sources in DuckDB,
   selecting every base column a later stage reads (`columns_needed`) under an unambiguous
   output name (`output_names`); with `pushdown=True` every non-LLM predicate runs here, in WHERE.
2. **retrievals**: each `Retrieval` adds a column holding the k nearest values of its corpus
   column (`query.render.corpus_sql`) to the row's query column.
3. **LLM calls**, in the order of `llm_calls`; every `LLMFilter` on a call applies right after
   that call, before any later call runs (so later calls see only the rows that passed).
4. **post-LLM predicates** (`query.render.post_llm_predicates`): with `pushdown=False` the
   non-LLM predicates run here instead, as SQL over the output names. Predicates and LLM
   filters are a conjunction, so the final rows are the same either way; only the number of
   LLM calls differs.
5. **answer**, last, in DuckDB over the rows the WHERE keeps (`query.render.answer_select`),
   each LLM call's answers a column, NULL where the row was skipped (a null LLM input) or
   failed: the `projection` (with its SELECT aliases and `*`), or the `aggregate` (without
   GROUP BY one row), then the `shape`'s DISTINCT, ORDER BY, OFFSET and LIMIT
   (`llm_assets.query.answer`). A LIMIT without an ORDER BY on LLM outputs is pushed down: the
   LLM calls after the last LLM filter are sent only the rows the LIMIT keeps
   (`limit_pushdown`).

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

from dataclasses import dataclass

from llm_assets.query.answer import Shape, star_alias
from llm_assets.query.parts import (
    Aggregate,
    Join,
    LLMCall,
    LLMFilter,
    Predicate,
    Retrieval,
    SemanticJoin,
    Source,
    split_column,
)

SOURCE_ROW = "_src_row"
"""The row-number column a caller adds to each source relation (see `query.render.pre_llm_sql`)."""
NAME_SEPARATOR = "__"
"""Joins alias and column in an output name when the bare column name is ambiguous (`m__title`)."""


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
    semantic_joins: tuple[SemanticJoin, ...] = ()
    """Sources joined by an LLM predicate in ON (their calls run first, on candidate pairs)."""
    shape: Shape = Shape()
    """SELECT aliases, DISTINCT, ORDER BY, LIMIT and OFFSET: the answer's shape."""

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
        self._check_shape(aliases)

    # ---- validation helpers -------------------------------------------------------------

    def _check_joins(self, aliases: list[str]) -> None:
        for j in self.joins:
            for alias in j.aliases:
                if alias not in aliases:
                    raise ValueError(
                        f"join {j.sql()} names unknown alias {alias!r}; sources: {aliases}"
                    )
        semantic = {s.alias: s for s in self.semantic_joins}
        for i, alias in enumerate(aliases[1:], start=1):
            if not self.joins_for(i) and alias not in semantic:
                raise ValueError(
                    f"source {alias!r} is not joined to any of {aliases[:i]}; add a join "
                    f"condition (a.x = b.y, or an LLM predicate in ON for a semantic join; "
                    f"plain cross joins are not supported)"
                )
        if self.semantic_joins and self.retrievals:
            raise ValueError(
                f"query {self.name!r}: a semantic join (an LLM predicate in JOIN ON) with "
                f"similarity_search as an LLM argument is not supported; block the join with "
                f"b.y IN similarity_search(a.x, k => n) in its ON, or run two queries"
            )
        calls = {c.name: c for c in self.llm_calls}
        filtered = {f.call_name for f in self.llm_filters}
        for join in self.semantic_joins:
            if join.alias not in aliases[1:]:
                raise ValueError(
                    f"semantic join names {join.alias!r}, not a joined source: {aliases[1:]}"
                )
            if join.call_name not in calls or join.call_name not in filtered:
                raise ValueError(
                    f"semantic join of {join.alias!r}: LLM call {join.call_name!r} is not a "
                    f"filtered LLM call of the query"
                )
            read = {f.split(".", 1)[0] for f in calls[join.call_name].fields if "." in f}
            earlier = set(aliases[: aliases.index(join.alias)])
            if join.alias not in read or not read & earlier:
                raise ValueError(
                    f"the LLM condition joining {join.alias!r} must read a column of "
                    f"{join.alias!r} and one of {sorted(earlier)}; it reads {sorted(read)}"
                )
            if join.top_k is not None:
                self._check_top_k(join, earlier)

    def _check_top_k(self, join: SemanticJoin, earlier: set[str]) -> None:
        block = join.top_k
        sides = {block.corpus_alias, block.query_alias}
        if join.alias not in sides or not sides - {join.alias} <= earlier:
            raise ValueError(
                f"the blocking {block.show()} of {join.alias!r} must compare a column of "
                f"{join.alias!r} with one of {sorted(earlier)}"
            )
        if self.joins_for([s.alias for s in self.sources].index(join.alias)):
            raise ValueError(
                f"the join of {join.alias!r} has both an equi-key and {block.show()}: top-k "
                f"blocking with an equi-key in the same ON is not supported; keep one of them"
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
            star = star_alias(item)
            if star:
                self._check_alias(f"{star}.x", aliases)
            if star is not None or "." in item:
                continue  # base column, alias already checked
            if item not in calls and item not in retrievals:
                raise ValueError(
                    f"projection {item!r} is not a qualified column, an LLM call or a retrieval; "
                    f"calls: {calls}, retrievals: {sorted(retrievals)}"
                )

    def _check_shape(self, aliases: list[str]) -> None:
        shape = self.shape
        if shape.labels and len(shape.labels) != len(self.projection):
            raise ValueError(
                f"query {self.name!r}: {len(shape.labels)} SELECT aliases for "
                f"{len(self.projection)} projection items"
            )
        names = self.answer_names()
        dupes = sorted({n for n in names if n is not None and names.count(n) > 1})
        if dupes:
            raise ValueError(f"query {self.name!r}: answer columns {dupes} are named twice")
        agg = self.aggregate
        outputs = set(agg.aliases) if agg is not None else {c.name for c in self.llm_calls}
        if agg is not None and any(star_alias(p) is not None for p in self.projection):
            raise ValueError(f"query {self.name!r}: SELECT * with an aggregate")
        for key in shape.order_by:
            for column in key.columns:
                self._check_alias(column, aliases)
            unknown = [o for o in key.outputs if o not in outputs]
            if unknown:
                raise ValueError(
                    f"ORDER BY {key.sql} reads {unknown[0]!r}, not an output of the query; "
                    f"outputs: {sorted(outputs)}"
                )
            grouped = set(agg.group_by) if agg is not None else None
            loose = [c for c in key.columns if grouped is not None and c not in grouped]
            if loose:
                raise ValueError(
                    f"ORDER BY {key.sql} reads {loose[0]}, which is not grouped; with GROUP BY "
                    f"order by a grouped column or an aggregate's alias"
                )
            shown = set(self.projection)
            hidden = [c for c in (*key.columns, *key.outputs) if shape.distinct and c not in shown]
            if hidden and not any(star_alias(p) is not None for p in self.projection):
                raise ValueError(
                    f"ORDER BY {key.sql} reads {hidden[0]}, which SELECT DISTINCT does not "
                    f"return; order by a selected column"
                )

    def answer_names(self) -> list[str | None]:
        """Each projection item's answer column: its SELECT alias, else its output name
        (None for a star item: its columns are named by the tables)."""
        labels = self.shape.labels or (None,) * len(self.projection)
        names = self.projection_columns()
        return [
            label or (None if star_alias(item) is not None else name)
            for item, label, name in zip(self.projection, labels, names, strict=True)
        ]

    def limit_pushdown(self) -> bool:
        """Whether the LLM calls after the last LLM filter need only the rows the LIMIT and
        OFFSET keep: a LIMIT or OFFSET, no aggregate, no DISTINCT, and an ORDER BY (if any)
        on base columns only (the rows it keeps are known before those calls)."""
        shape = self.shape
        return (
            shape.cuts
            and self.aggregate is None
            and not shape.distinct
            and not any(k.outputs for k in shape.order_by)
        )

    # ---- columns -----------------------------------------------------------------------

    def _base_columns(self) -> list[str]:
        """Every qualified column any stage reads, with repeats, in order of first mention:
        projection, group-by, retrieval queries, top-k blocking columns, LLM fields,
        predicates, ORDER BY keys."""
        out = [p for p in self.projection if "." in p and star_alias(p) is None]
        if self.aggregate is not None:
            out += list(self.aggregate.group_by)
        out += [r.query_column for r in self.retrievals]
        blocks = [j.top_k for j in self.semantic_joins if j.top_k is not None]
        out += [c for b in blocks for c in (b.query_column, b.corpus_column)]
        out += [f for c in self.llm_calls for f in c.fields if "." in f]
        out += [c for p in self.predicates for c in p.columns]
        out += [c for k in self.shape.order_by for c in k.columns]
        return out

    def columns_needed(self) -> tuple[str, ...]:
        """Every qualified base column a stage reads per row (each once, in order of first
        mention: projection, group-by, retrieval queries, top-k blocking columns, LLM fields,
        predicates, ORDER BY keys). Retrieval corpus columns are not per-row inputs: read them with
        `query.render.corpus_sql`."""
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
        """For one LLM call: placeholder (`LLMCall.field_names`) -> column of the staged
        relation holding its value (an output name, or the retrieval's name)."""
        by_name = {c.name: c for c in self.llm_calls}
        if call_name not in by_name:
            raise ValueError(f"unknown LLM call {call_name!r}; known calls: {list(by_name)}")
        names = self.output_names()
        call = by_name[call_name]
        return {p: names.get(f, f) for p, f in zip(call.field_names, call.fields, strict=True)}

    def projection_columns(self) -> tuple[str, ...]:
        """The projection as column names of the staged relation (output names for base columns;
        LLM call, retrieval and aggregate names as they are)."""
        names = self.output_names()
        return tuple(names.get(p, p) for p in self.projection)

    @property
    def star_aliases(self) -> tuple[str, ...]:
        """The sources whose every column the projection returns (`*`: all), in order."""
        every = [s.alias for s in self.sources]
        out = [a for p in self.projection if (a := star_alias(p)) is not None]
        return tuple(dict.fromkeys(x for a in out for x in ([a] if a else every)))

    def filters_for(self, call_name: str) -> tuple[LLMFilter, ...]:
        """The LLM filters that apply right after `call_name`."""
        return tuple(f for f in self.llm_filters if f.call_name == call_name)
