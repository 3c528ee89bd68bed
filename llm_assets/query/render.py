"""The DuckDB SQL of an `LLMQuery` (`llm_assets.query.model` holds the model and its validation;
this module only renders it). Every statement is built as a sqlglot tree, every identifier
quoted; nothing here formats user text into SQL.

>>> from llm_assets.sql.compiler import compile_sql
>>> q = compile_sql(
...     "SELECT m.title FROM reviews r JOIN movies m ON r.link = m.link "
...     "WHERE r.kind = 'Fresh' AND LLM('Kids? {info} {text}', m.info, r.text, "
...     "output => 'choice(Yes,No)') = 'Yes'")
>>> print(pre_llm_sql(q, pushdown=True))
SELECT
  "m"."title" AS "title",
  "m"."info" AS "info",
  "r"."text" AS "text",
  "r"."kind" AS "kind"
FROM "reviews" AS "r"
JOIN "movies" AS "m"
  ON "r"."link" = "m"."link"
WHERE
  "r"."kind" = 'Fresh'
>>> print(*post_llm_predicates(q, pushdown=False))
"kind" = 'Fresh'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

from llm_assets.query.answer import star_alias
from llm_assets.query.model import SOURCE_ROW, LLMQuery
from llm_assets.query.parts import Source, split_column
from llm_assets.sql.syntax import check_name, column_node, identifier, output_problem, render, table

__all__ = [
    "aggregate_select",
    "aggregate_sql",
    "answer_select",
    "corpus_sql",
    "from_sql",
    "limit_select",
    "post_llm_predicates",
    "pre_llm_select",
    "pre_llm_sql",
    "top_k_relation",
]


def _table(source: Source, tables: Mapping[str, str] | None) -> exp.Table:
    return table((tables or {}).get(source.table, source.table), source.alias)


TOP_K_QUERY, TOP_K_CORPUS = "query_row", "corpus_row"
"""The columns of a top-k blocking's pair relation: a query-side and a corpus-side
`SOURCE_ROW` (`pipeline.retrieval.nearest_pairs` builds it)."""


def top_k_relation(alias: str) -> str:
    """The default name of the pair relation blocking the semantic join of `alias`."""
    return f"_top_k_{alias}"


def _from_clauses(
    query: LLMQuery, tables: Mapping[str, str] | None, pairs: Mapping[str, str] | None = None
) -> list[exp.Expression]:
    """`FROM first AS a` and one `JOIN ... ON ...` per later source (`CROSS JOIN` for a source
    joined only by an LLM predicate: its candidate pairs; for one blocked by top-k, a join
    through its pair relation, `pairs[alias]` or `top_k_relation(alias)`), as sqlglot nodes."""
    clauses: list[exp.Expression] = [exp.From(this=_table(query.sources[0], tables))]
    blocks = {j.alias: j.top_k for j in query.semantic_joins if j.top_k is not None}
    for i, source in enumerate(query.sources[1:], start=1):
        conditions = [j.condition() for j in query.joins_for(i)]
        block = blocks.get(source.alias)
        if block is not None:
            via = f"{source.alias} top-k"  # not an alias a query can name
            role = {block.query_alias: TOP_K_QUERY, block.corpus_alias: TOP_K_CORPUS}
            other = next(a for a in role if a != source.alias)
            relation = (pairs or {}).get(source.alias, top_k_relation(source.alias))
            for alias, this in (
                (other, table(relation, via)),
                (source.alias, _table(source, tables)),
            ):
                on = exp.EQ(
                    this=column_node(via, role[alias]), expression=column_node(alias, SOURCE_ROW)
                )
                clauses.append(exp.Join(this=this, on=on))
        elif conditions:
            clauses.append(exp.Join(this=_table(source, tables), on=exp.and_(*conditions)))
        else:  # a semantic join without an equi-key: every pair is a candidate
            clauses.append(exp.Join(this=_table(source, tables), kind="CROSS"))
    return clauses


def from_sql(query: LLMQuery, tables: Mapping[str, str] | None = None) -> str:
    """`FROM a AS x` then one `JOIN b AS y ON ...` line per later source; `tables` maps a
    table name to a DuckDB relation name."""
    return "\n".join(render(clause) for clause in _from_clauses(query, tables))


def pre_llm_select(
    query: LLMQuery,
    pushdown: bool,
    tables: Mapping[str, str] | None = None,
    source_row_columns: Mapping[str, str] | None = None,
    pairs: Mapping[str, str] | None = None,
) -> exp.Select:
    """The sqlglot tree of `pre_llm_sql` (same arguments)."""
    names = query.output_names()
    items = [
        column_node(*split_column(c)).as_(identifier(names[c])) for c in query.columns_needed()
    ]
    aliases = [s.alias for s in query.sources]
    for alias, name in (source_row_columns or {}).items():
        if alias not in aliases:
            raise ValueError(f"source_row_columns names unknown alias {alias!r}: {aliases}")
        check_name("source row column", name, output_problem)
        items.append(column_node(alias, SOURCE_ROW).as_(identifier(name)))
    first, *joins = _from_clauses(query, tables, pairs)
    select = exp.Select(expressions=items, joins=joins)
    select.set("from_", first)
    if pushdown and query.predicates:
        select = select.where(exp.and_(*(p.expression() for p in query.predicates)))
    return select


def pre_llm_sql(
    query: LLMQuery,
    pushdown: bool,
    tables: Mapping[str, str] | None = None,
    source_row_columns: Mapping[str, str] | None = None,
    pairs: Mapping[str, str] | None = None,
) -> str:
    """The DuckDB SELECT producing the relation the first stage runs over.

    It joins the sources and selects `columns_needed()` under `output_names()`; with
    `pushdown` every predicate is in WHERE, without it none is (run
    `post_llm_predicates(query, False)` after the LLM stages). Table names are used as written
    unless `tables` maps them to other DuckDB relation names. `source_row_columns`
    (alias -> output name) also selects each named source's `SOURCE_ROW` column (its
    row number, which the caller adds to the relation) under that name. Rendered from
    the sqlglot tree, every identifier quoted. Row order is unspecified. A semantic join
    blocked by top-k joins through the relation `pairs` names for its alias (default
    `top_k_relation(alias)`): `TOP_K_QUERY` and `TOP_K_CORPUS` hold each candidate pair's
    `SOURCE_ROW`s (the caller adds `SOURCE_ROW` to the sources then).
    """
    return render(pre_llm_select(query, pushdown, tables, source_row_columns, pairs), pretty=True)


def post_llm_predicates(query: LLMQuery, pushdown: bool) -> tuple[str, ...]:
    """The predicates still to run after the LLM stages (and before the aggregate), as
    DuckDB SQL over output names: none with `pushdown`, all of them without."""
    if pushdown:
        return ()
    names = query.output_names()
    return tuple(p.rename(names) for p in query.predicates)


def aggregate_select(query: LLMQuery, relation: str) -> exp.Select:
    """The sqlglot tree of `aggregate_sql` (same arguments)."""
    agg = query.aggregate
    if agg is None:
        raise ValueError(f"query {query.name!r} has no aggregate")
    names = query.output_names()
    by_alias = {a.alias: a for a in agg.items}
    labels = query.shape.labels or (None,) * len(query.projection)
    items = [
        by_alias[p].expression()
        if p in by_alias
        else column_node(None, names[p]).as_(identifier(label or names[p]))
        for p, label in zip(query.projection, labels, strict=True)
    ]
    select = exp.select(*items).from_(table(relation))
    refs = {g: column_node(None, names[g]) for g in agg.group_by}
    refs |= {a.alias: a.expression().this for a in agg.items}
    keys = [k.ordered(refs) for k in query.shape.order_by]
    if agg.group_by:
        groups = [exp.column(identifier(names[g])) for g in agg.group_by]
        select = select.group_by(*groups)
        keys += [exp.Ordered(this=g.copy(), nulls_first=False) for g in groups]
    return _cut(select.order_by(*keys) if keys else select, query)


def _cut(select: exp.Select, query: LLMQuery) -> exp.Select:
    """`select` with the query's LIMIT and OFFSET."""
    if query.shape.limit is not None:
        select = select.limit(query.shape.limit)
    return select.offset(query.shape.offset) if query.shape.offset else select


ANSWER_ROWS = "_answer rows"
"""How the answer's SQL names the relation of the kept rows (no source alias can: a space)."""


def answer_select(
    query: LLMQuery,
    relation: str,
    order_column: str | None = None,
    stars: Mapping[str, tuple[str, Sequence[str], str]] | None = None,
) -> exp.Select:
    """The DuckDB SELECT of the query's answer over `relation`: the rows the WHERE keeps, with
    base columns under `output_names()` and each LLM call's answers under its name (NULL
    where skipped or failed). With an aggregate, `aggregate_select` (the calls aggregated by
    AVG/SUM/MIN/MAX as numbers). Else the projection under `answer_names()`, DISTINCT, ORDER
    BY, OFFSET and LIMIT; ties (and a query without ORDER BY) keep the order of
    `order_column` (DISTINCT: of each distinct row's first row). `stars` gives, per source
    alias a star item returns, (the relation holding that source's table with its row number
    in `SOURCE_ROW`, its columns, the column of `relation` numbering its rows): a star's
    columns are read there, as the table has them.

    >>> from llm_assets.sql.compiler import compile_sql
    >>> q = compile_sql("SELECT m.id AS movie, LLM('Stars for {plot}', m.plot) AS stars "
    ...                 "FROM movies m ORDER BY stars DESC LIMIT 3")
    >>> print(render(answer_select(q, "_rows", "_row")))  # doctest: +NORMALIZE_WHITESPACE
    SELECT "_answer rows"."id" AS "movie", "_answer rows"."stars" AS "stars"
    FROM "_rows" AS "_answer rows"
    ORDER BY "_answer rows"."stars" DESC, "_answer rows"."_row" LIMIT 3
    """
    if query.aggregate is not None:
        return aggregate_select(query, relation)
    names = query.output_names()
    refs = {q: column_node(ANSWER_ROWS, n) for q, n in names.items()}
    refs |= {c.name: column_node(ANSWER_ROWS, c.name) for c in query.llm_calls}
    items: list[exp.Expression] = []
    joined = []
    every = [s.alias for s in query.sources]
    for item, name in zip(query.projection, query.answer_names(), strict=True):
        star = star_alias(item)
        if star is None:
            items.append(column_node(ANSWER_ROWS, names.get(item, item)).as_(identifier(name)))
            continue
        for alias in [star] if star else every:
            if stars is None or alias not in stars:
                raise ValueError(f"query {query.name!r}: no table for {alias}.* in the answer")
            if alias not in joined:
                joined.append(alias)
            items += [column_node(alias, column) for column in stars[alias][1]]
    select = exp.select(*items).from_(table(relation, ANSWER_ROWS))
    for alias in joined:
        source, _, rows = stars[alias]
        on = exp.EQ(this=column_node(alias, SOURCE_ROW), expression=column_node(ANSWER_ROWS, rows))
        select = select.join(table(source, alias), on=on)
    keys = [k.ordered(refs) for k in query.shape.order_by]
    last = column_node(ANSWER_ROWS, order_column) if order_column else None
    if query.shape.distinct:
        select = select.group_by(*(i.this if isinstance(i, exp.Alias) else i for i in items))
        last = exp.func("MIN", last) if last is not None else None
    keys += [exp.Ordered(this=last)] if last is not None else []
    return _cut(select.order_by(*keys) if keys else select, query)


def limit_select(query: LLMQuery, relation: str, order_column: str) -> exp.Select:
    """`SELECT order_column FROM relation ORDER BY <keys>, order_column LIMIT n OFFSET m`:
    the rows the query's LIMIT keeps, from rows holding the base columns its ORDER BY reads
    (`LLMQuery.limit_pushdown`: no key reads an LLM output) under `output_names()`. Ties are
    broken as `answer_select` breaks them, so both keep the same rows."""
    names = query.output_names()
    refs = {q: column_node(None, n) for q, n in names.items()}
    keys = [k.ordered(refs) for k in query.shape.order_by]
    keys.append(exp.Ordered(this=column_node(None, order_column)))
    select = exp.select(column_node(None, order_column)).from_(table(relation)).order_by(*keys)
    return _cut(select, query)


def aggregate_sql(query: LLMQuery, relation: str) -> str:
    """The DuckDB SELECT computing the aggregate over `relation`, a table of the rows that
    reach it with the group-by columns under `output_names()` and each aggregated call's
    answers under the call's name (as numbers for AVG/SUM/MIN/MAX: `AggregateItem.numeric`).

    It selects the projection in order; with GROUP BY, one row per group, ordered by the
    group-by columns (nulls last, null keys forming one group); without GROUP BY, exactly
    one row, also when `relation` is empty. Rendered from the sqlglot tree.

    >>> from llm_assets.output_spec import OutputSpec
    >>> from llm_assets.query.parts import Aggregate, AggregateItem, LLMCall, Source
    >>> q = LLMQuery(
    ...     name="q", sources=(Source("r", "reviews"),),
    ...     llm_calls=(LLMCall("llm_1", "Stars {review}", ("r.review",),
    ...                        OutputSpec.number(1, 5), max_tokens=3),),
    ...     projection=("n", "avg_llm_1"),
    ...     aggregate=Aggregate((), (AggregateItem("COUNT", None, "n"),
    ...                              AggregateItem("AVG", "llm_1", "avg_llm_1"))))
    >>> print(aggregate_sql(q, "_rows"))
    SELECT COUNT(*) AS "n", AVG("llm_1") AS "avg_llm_1" FROM "_rows"
    """
    return render(aggregate_select(query, relation))


def corpus_sql(query: LLMQuery, retrieval: str, tables: Mapping[str, str] | None = None) -> str:
    """The DuckDB SELECT of a retrieval's corpus: the distinct non-null values of its corpus
    column over the whole source table (predicates do not shrink the corpus), as `value`."""
    by_name = {r.name: r for r in query.retrievals}
    if retrieval not in by_name:
        raise ValueError(f"unknown retrieval {retrieval!r}; known: {list(by_name)}")
    alias, name = split_column(by_name[retrieval].corpus_column)
    source = next(s for s in query.sources if s.alias == alias)
    value = column_node(alias, name)
    select = (
        exp.select(value.as_(identifier("value")))
        .distinct()
        .from_(_table(source, tables))
        .where(exp.Not(this=exp.Is(this=value.copy(), expression=exp.null())))
        .order_by(exp.column(identifier("value")))
    )
    return render(select)
