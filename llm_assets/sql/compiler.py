"""LLM-SQL front end: SQL text with `LLM('template', col, ...)` calls -> `LLMQuery`.

This module parses the statement, rejects what lies outside the language at its top level
(`compile_sql`) and checks the columns against the tables (`check_columns`); the clauses are
compiled by `llm_assets.sql.clauses`.

The supported language is one SELECT (DuckDB dialect, parsed with sqlglot):

    SELECT [DISTINCT] item, ... FROM t [AS] a [JOIN u [AS] b ON a.x = b.y [AND ...]] ...
    [WHERE conjunct AND ...] [GROUP BY column, ...] [ORDER BY key, ...] [LIMIT n] [OFFSET m]

- a SELECT item is a column `[AS name]`, `*` or `a.*`, `LLM(...) [AS name]`,
  `AVG|SUM|COUNT|MIN|MAX(LLM(...)) [AS name]` (at most one per query) or `COUNT(*) [AS name]`;
  with an aggregate, GROUP BY columns and the aggregates are the only items. Without GROUP BY
  the answer is exactly one row (also when no row reaches it: COUNT 0, the others null). The
  aggregates read every row the WHERE keeps: a row skipped (a null LLM input) or failed
  contributes NULL to the LLM aggregate, which ignores it as SQL does, and `COUNT(*)` counts
  it; AVG/SUM/MIN/MAX read each answer as a number;
- DISTINCT, ORDER BY, LIMIT and OFFSET run in DuckDB over the answer (`llm_assets.sql.shape`);
  a LIMIT without an ORDER BY on an LLM output is pushed below the LLM calls of SELECT
  (`LLMQuery.limit_pushdown`); LLM filters in WHERE see every row the other conjuncts keep;
- `LLM('template', arg, ...)`: the template is a string literal whose `{placeholders}` are the
  bare names of its column arguments (`{movie_info}` for `m.movie_info`); an argument is a
  column or `similarity_search(col, k => 3 [, corpus => a.c])`, a `Retrieval` named after the
  (next) template placeholder that no column argument binds; the corpus defaults to the column
  of that name in the query column's source (`s.context` in Q5); k defaults to 3;
- a WHERE conjunct (top-level AND) without an LLM call becomes a `Predicate` (pushed below the
  LLM calls); `LLM(...) = 'literal'` (or `!=`/`<>`) becomes an `LLMFilter`;
- a semantic join: `JOIN b ON LLM(...) = 'literal'` (a `SemanticJoin`, its call first among
  the stages), beside equi-keys `a.x = b.y`, other conjuncts (`a.id < b.id`: predicates, as
  in WHERE) and at most one top-k blocking `b.y IN similarity_search(a.x, k => n)` (`TopK`:
  each row of `a` paired only with the n rows of `b` whose `y` is nearest to its `x`; not
  with an equi-key). Placeholders name columns by their bare name, or `{a.title}` and
  `{b.title}` where two arguments share one (a self-join).

Stages: LLM calls of WHERE come first (in conjunct order), then those of SELECT (in item
order), so a filter runs before the projection it guards (Q3). A call is named by its SELECT
alias when it has one, else `llm_<stage number>` (1-based); an aggregate without alias is
`<function>_<call>` (`avg_llm_1`), `COUNT(*)` without alias `count_star`.

>>> q = compile_sql("SELECT COUNT(*) AS n, AVG(LLM('Stars for {review}', r.review,"
...                 " output => 'number(1,5)')) AS stars FROM reviews r")
>>> q.projection, q.aggregate.group_by, [i.show() for i in q.aggregate.items]
(('n', 'stars'), (), ['COUNT(*)', 'AVG(llm_1)'])

Output specs and generation limits (`llm_assets.sql.outputs`):
- a filtered call answers `OutputSpec.choice([literal, other])`: other is the opposite of
  Yes/No, True/False, Positive/Negative (case kept as written), else `"Other"`;
  `max_tokens` is `MAX_TOKENS_CHOICE_SHORT` (2) when every choice has <= 4 characters, else
  `MAX_TOKENS_CHOICE` (3);
- a call under AVG/SUM/MIN/MAX answers `OutputSpec.number(lo, hi)` with lo and hi read from
  "between <lo> ... and <hi>" in the template, else `DEFAULT_NUMBER_RANGE` (0..10);
  `max_tokens` `MAX_TOKENS_NUMBER` (3);
- any other call (a projection, or under COUNT) answers `OutputSpec.text()`, `MAX_TOKENS_TEXT`
  (16, vLLM's default `max_tokens`, as in the paper's harness).

Explicit output and limit: options after the arguments, `LLM('...', col, output => 'form',
max_tokens => n)`, where form is `text`, `json`, `choice(a,b,...)`, `number(lo,hi)` or
`regex(pattern)` (`OutputSpec.parse`). An answer that breaks the spec is recorded as a
violation (json must parse, a regex must match the whole answer). An explicit output must
agree with what the call's place implies (a filter on 'x': a choice holding 'x';
AVG/SUM/MIN/MAX: a number), else `SQLError` naming both. Without `max_tokens` the limit
follows the output as above (`default_max_tokens`).

>>> def out(sql):
...     call = compile_sql(sql).llm_calls[0]
...     return call.output.form, call.max_tokens
>>> out("SELECT LLM('Sentiment of {review}', r.review, output => 'choice(pos,neg)') FROM t r")
('choice(pos,neg)', 2)
>>> out("SELECT AVG(LLM('Stars for {review}', r.review, output => 'number(0,5)')) FROM t r")
('number(0,5)', 3)
>>> out("SELECT LLM('Facts of {review} as JSON', r.review, output => 'json', max_tokens => 64)"
...     " FROM t r")
('json', 64)
>>> out("SELECT LLM('Airport code in {review}', r.review, output => 'regex(^[A-Z]{3}$)') FROM t r")
('regex(^[A-Z]{3}$)', 16)
>>> out("SELECT r.id FROM t r WHERE LLM('Tone of {review}', r.review,"
...     " output => 'choice(pos,neg,mixed)') = 'pos'")
('choice(pos,neg,mixed)', 3)
>>> try:
...     compile_sql("SELECT r.id FROM t r WHERE"
...                 " LLM('Stars of {review}', r.review, output => 'number(0,5)') = 'Yes'")
... except SQLError as exc:
...     print(str(exc).split(" in WHERE")[0])
explicit output => 'number(0,5)' conflicts with the choice(Yes,No) implied by LLM(...) = 'Yes'

Identifiers are restricted to what a name can be (`llm_assets.sql.syntax`): table names and
aliases `[A-Za-z_][A-Za-z0-9_]*` (tables optionally schema-qualified), column names printable
text without `"`, `;` or backslash, at most 128 characters; the model renders every SQL string
from the sqlglot tree with quoted identifiers.

Everything else raises `SQLError` naming the offending clause, with LLM calls shown as
`LLM(...)`. Rejections come from the parsed tree, never from matching the raw text.

>>> q = compile_sql("SELECT LLM('Summarize {review_content}', r.review_content) FROM reviews r")
>>> q.llm_calls[0].name, q.llm_calls[0].fields, q.llm_calls[0].output.kind
('llm_1', ('r.review_content',), 'text')
>>> try:
...     compile_sql("SELECT a.x FROM t a WHERE LLM('Is {y} ok?', a.y) = 'Yes' OR a.z > 1")
... except SQLError as exc:
...     print(str(exc).split(" (")[0])
unsupported in WHERE: LLM(...) = 'Yes' OR a.z > 1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp

from llm_assets.query.model import LLMQuery
from llm_assets.sql.clauses import Compiler
from llm_assets.sql.nodes import SQLError, show
from llm_assets.sql.shape import REFUSED, compile_shape
from llm_assets.sql.syntax import case_twin, parse_error

SUPPORTED_CLAUSES = (
    "expressions", "from_", "joins", "where", "group", "order", "limit", "offset", "distinct"
)  # fmt: skip


def _statement(sql: str) -> exp.Select:
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise SQLError(f"cannot parse SQL{parse_error(exc)}") from exc
    if len(statements) != 1:
        shown = "; ".join(show(s)[:60] for s in statements)
        raise SQLError(f"expected exactly one SELECT statement, got {len(statements)}: {shown}")
    stmt = statements[0]
    if not isinstance(stmt, exp.Select):
        raise SQLError(
            f"unsupported statement {type(stmt).__name__.upper()}: {show(stmt)[:80]} (only SELECT)"
        )
    for key, value in stmt.args.items():
        if value and key not in SUPPORTED_CLAUSES:
            text = show(value) if isinstance(value, exp.Expression) else str(value)
            hint = f"{REFUSED[key]}; " if key in REFUSED else ""
            raise SQLError(
                f"unsupported clause {key.rstrip('_').upper()}: {text[:80]} ({hint}supported: "
                f"SELECT [DISTINCT], FROM, JOIN ... ON, WHERE, GROUP BY, ORDER BY, LIMIT, OFFSET)"
            )
    for node in stmt.walk():
        if node is not stmt and isinstance(node, exp.Subquery | exp.Select | exp.SetOperation):
            raise SQLError(
                f"unsupported subquery: {show(node)} (write one SELECT over the tables; join "
                f"them with INNER JOIN ... ON)"
            )
    if stmt.args.get("from_") is None:
        raise SQLError(f"SELECT without FROM: {show(stmt)}")
    return stmt


def check_columns(query: LLMQuery, tables: Mapping[str, Sequence[str]]) -> None:
    """Raise `SQLError` naming the first column the query reads that its table lacks, or that
    its table holds twice as DuckDB sees names (`review` and `Review`: `sql.syntax.case_twin`)."""
    by_alias = {s.alias: s.table for s in query.sources}
    used = list(query.columns_needed()) + [r.corpus_column for r in query.retrievals]
    for j in query.joins:
        used += [f"{j.left_alias}.{j.left_column}", f"{j.right_alias}.{j.right_column}"]
    for column in used:
        alias, name = column.split(".", 1)
        table = by_alias[alias]
        if table not in tables:
            raise SQLError(f"unknown table {table!r}; known tables: {sorted(tables)}")
        if name not in tables[table]:
            raise SQLError(
                f"unknown column {column}: table {table!r} has columns {list(tables[table])}"
            )
        twins = case_twin(tables[table], name)
        if twins is not None:
            raise SQLError(
                f"ambiguous column {column}: table {table!r} has columns {twins[0]!r} and "
                f"{twins[1]!r}, which DuckDB cannot tell apart (it compares column names "
                "case-insensitively); rename one of them"
            )


def compile_sql(
    sql: str, name: str = "query", tables: Mapping[str, Sequence[str]] | None = None
) -> LLMQuery:
    """Compile one LLM-SQL SELECT into an `LLMQuery` named `name` (see the module docstring
    for the language); raises `SQLError` naming the clause it cannot compile. With `tables`
    (table -> columns), every column the query reads must exist."""
    stmt = _statement(sql)
    c = Compiler(name)
    c.sources.append(c.source(stmt.args["from_"].this, "FROM"))
    joins = c.joins(stmt)
    predicates, filters = c.where(stmt)
    projection, aggregate, labels = c.select(stmt)
    shape = compile_shape(c, stmt, projection, labels, aggregate)
    try:
        query = LLMQuery(
            name=name,
            sources=tuple(c.sources),
            joins=tuple(joins),
            predicates=tuple(c.join_predicates + predicates),
            retrievals=tuple(c.retrievals.values()),
            llm_calls=tuple(c.calls),
            llm_filters=tuple(c.join_filters + filters),
            projection=tuple(projection),
            aggregate=aggregate,
            semantic_joins=tuple(c.semantic_joins),
            shape=shape,
        )
    except ValueError as exc:
        raise SQLError(f"{exc} in: {show(stmt)}") from exc
    if tables is not None:
        check_columns(query, tables)
    return query
