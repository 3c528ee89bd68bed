"""LLM-SQL front end: SQL text with `LLM('template', col, ...)` calls -> `LLMQuery`.

The supported language is one SELECT (DuckDB dialect, parsed with sqlglot):

    SELECT item, ... FROM t [AS] a [JOIN u [AS] b ON a.x = b.y [AND ...]] ...
    [WHERE conjunct AND ...] [GROUP BY column, ...]

- a SELECT item is a column, `LLM(...) [AS name]`, `AVG|SUM|COUNT|MIN|MAX(LLM(...)) [AS name]`
  (at most one per query) or `COUNT(*) [AS name]`; with an aggregate, GROUP BY columns and the
  aggregates are the only items. Without GROUP BY the answer is exactly one row (also when no
  row reaches it: COUNT 0, the others null). The aggregates read the rows that passed and were
  answered (`COUNT(*)` counts them); AVG/SUM/MIN/MAX read each answer as a number;
- `LLM('template', arg, ...)`: the template is a string literal whose `{placeholders}` are the
  bare names of its column arguments (`{movie_info}` for `m.movie_info`); an argument is a
  column or `similarity_search(col, k => 3 [, corpus => a.c])`, a `Retrieval` named after the
  (next) template placeholder that no column argument binds; the corpus defaults to the column
  of that name in the query column's source (`s.context` in Q5); k defaults to 3;
- a WHERE conjunct (top-level AND) without an LLM call becomes a `Predicate` (pushed below the
  LLM calls); `LLM(...) = 'literal'` (or `!=`/`<>`) becomes an `LLMFilter`.

Stages: LLM calls of WHERE come first (in conjunct order), then those of SELECT (in item
order), so a filter runs before the projection it guards (Q3). A call is named by its SELECT
alias when it has one, else `llm_<stage number>` (1-based); an aggregate without alias is
`<function>_<call>` (`avg_llm_1`), `COUNT(*)` without alias `count_star`.

>>> q = compile_sql("SELECT COUNT(*) AS n, AVG(LLM('Stars for {review}', r.review,"
...                 " output => 'number(1,5)')) AS stars FROM reviews r")
>>> q.projection, q.aggregate.group_by, [i.show() for i in q.aggregate.items]
(('n', 'stars'), (), ['COUNT(*)', 'AVG(llm_1)'])

Output specs and generation limits (`llm_assets.sql_outputs`):
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

Identifiers are restricted to what a name can be (`llm_assets.sql_ast`): table names and
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

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from llm_assets.query import (
    Aggregate,
    AggregateItem,
    Join,
    LLMCall,
    LLMFilter,
    LLMQuery,
    Predicate,
    Retrieval,
    Source,
)
from llm_assets.sql_ast import (
    alias_problem,
    case_twin,
    check_name,
    column_problem,
    parse_error,
    table_problem,
)
from llm_assets.sql_outputs import Implied, resolve, split_options

DEFAULT_K = 3
"""`similarity_search` k when not given."""

LLM_FUNCTION = "LLM"
SEARCH_FUNCTION = "SIMILARITY_SEARCH"
AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Avg: "AVG",
    exp.Sum: "SUM",
    exp.Count: "COUNT",
    exp.Min: "MIN",
    exp.Max: "MAX",
}
SUPPORTED_CLAUSES = ("expressions", "from_", "joins", "where", "group")
ACCEPTED_AGGREGATES = (
    "AVG/SUM/COUNT/MIN/MAX(LLM(...)) and COUNT(*) are supported, with or without GROUP BY"
)


class SQLError(ValueError):
    """LLM-SQL that cannot be compiled; the message names the offending clause."""


def _is_call(node: exp.Expression, name: str) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.name).upper() == name


def _is_llm(node: exp.Expression) -> bool:
    return _is_call(node, LLM_FUNCTION)


def _has_llm(node: exp.Expression) -> bool:
    return any(_is_llm(n) for n in node.walk())


def _name(kind: str, value: str, problem, clause: str) -> str:
    """`value` if it is an acceptable name of this kind, else SQLError naming it."""
    try:
        return check_name(kind, value, problem)
    except ValueError as exc:
        raise SQLError(f"{exc} (in {clause})") from exc


def show(node: exp.Expression) -> str:
    """The clause as DuckDB SQL, each LLM call inside it shortened to `LLM(...)` (a clause that
    is itself one LLM call is shown whole)."""
    copy = node.copy()
    for n in list(copy.find_all(exp.Anonymous)):
        if _is_llm(n):
            n.replace(exp.Anonymous(this=LLM_FUNCTION, expressions=[exp.var("...")]))
    return copy.sql(dialect="duckdb")


@dataclass
class _Compiler:
    name: str
    sources: list[Source] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    retrievals: dict[str, Retrieval] = field(default_factory=dict)

    # ---- columns ------------------------------------------------------------------------

    def aliases(self) -> list[str]:
        return [s.alias for s in self.sources]

    def qualify(self, col: exp.Column, clause: str, where: exp.Expression) -> str:
        """`alias.column` for a column reference, resolving an unqualified one when the query
        has a single source."""
        if col.args.get("db") or col.args.get("catalog"):
            raise SQLError(f"unsupported column {col.sql()} in {clause}: {show(where)}")
        _name("column name", col.name, column_problem, clause)
        if col.table:
            if col.table not in self.aliases():
                raise SQLError(
                    f"unknown alias {col.table!r} in {clause}: {show(where)}; "
                    f"sources: {self.aliases()}"
                )
            return f"{col.table}.{col.name}"
        if len(self.sources) == 1:
            return f"{self.sources[0].alias}.{col.name}"
        raise SQLError(
            f"unqualified column {col.name!r} in {clause}: {show(where)}; "
            f"qualify it with one of {self.aliases()}"
        )

    # ---- FROM / JOIN ----------------------------------------------------------------------

    def source(self, node: exp.Expression, clause: str) -> Source:
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise SQLError(f"unsupported in {clause}: {show(node)} (only table names)")
        table = ".".join(p for p in (node.catalog, node.db, node.name) if p)
        alias = node.args.get("alias")
        if alias is not None and alias.columns:
            raise SQLError(f"unsupported in {clause}: {show(node)} (column aliases on a table)")
        _name("table name", table, table_problem, clause)
        return Source(_name("source alias", node.alias_or_name, alias_problem, clause), table)

    def joins(self, select: exp.Select) -> list[Join]:
        out: list[Join] = []
        for j in select.args.get("joins") or []:
            if j.side or j.kind not in ("", "INNER") or j.args.get("using") or not j.args.get("on"):
                raise SQLError(
                    f"unsupported in JOIN: {show(j).strip()} (only INNER JOIN ... ON a.x = b.y)"
                )
            self.sources.append(self.source(j.this, "JOIN"))
            on = j.args["on"]
            for cond in _conjuncts(on):
                if _has_llm(cond):
                    raise SQLError(
                        f"unsupported in JOIN ON: {show(cond)} (LLM calls are not allowed "
                        f"in join conditions; move them to WHERE)"
                    )
                if not (
                    isinstance(cond, exp.EQ)
                    and isinstance(cond.this, exp.Column)
                    and isinstance(cond.expression, exp.Column)
                ):
                    raise SQLError(
                        f"unsupported in JOIN ON: {show(cond)} (only equalities of two "
                        f"columns, alias.x = alias.y, joined by AND)"
                    )
                left = self.qualify(cond.this, "JOIN ON", cond).split(".", 1)
                right = self.qualify(cond.expression, "JOIN ON", cond).split(".", 1)
                try:
                    out.append(Join(left[0], left[1], right[0], right[1]))
                except ValueError as exc:
                    raise SQLError(f"unsupported in JOIN ON: {show(cond)} ({exc})") from exc
        return out

    # ---- LLM calls -------------------------------------------------------------------------

    def llm_call(
        self,
        node: exp.Anonymous,
        clause: str,
        where: exp.Expression,
        name: str | None,
        implied: Implied,
    ) -> LLMCall:
        """Compile one `LLM(...)` whose place in the query implies `implied`."""
        ctx = f"in {clause}: {show(where)}"
        args = list(node.expressions)
        if not args or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            got = show(args[0]) if args else "nothing"
            raise SQLError(
                f"the first argument of LLM must be a string literal template, got {got} {ctx}"
            )
        template = args[0].this
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise SQLError(f"malformed LLM template {template!r} ({exc}) {ctx}") from exc
        placeholders = list(dict.fromkeys(p for _, p, _, _ in parsed if p is not None))
        try:
            positional, options = split_options(args[1:])
        except ValueError as exc:
            raise SQLError(f"{exc} {ctx}") from exc
        columns: list[str | None] = []
        searches: list[exp.Anonymous] = []
        for arg in positional:
            if isinstance(arg, exp.Column):
                columns.append(self.qualify(arg, clause, where))
            elif _is_call(arg, SEARCH_FUNCTION):
                columns.append(None)
                searches.append(arg)
            else:
                raise SQLError(
                    f"unsupported LLM argument {show(arg)} {ctx} (arguments after the template "
                    f"are columns or similarity_search(column, k => n), then options)"
                )
        if not columns:
            raise SQLError(f"LLM call passes no column after its template {ctx}")
        bound = {c.split(".", 1)[1] for c in columns if c is not None}
        unbound = [p for p in placeholders if p not in bound]
        names = self.search_names(searches, unbound, ctx)
        unbound = [p for p in unbound if p not in names]
        if unbound:
            raise SQLError(
                f"LLM template names placeholder {unbound[0]!r} that is not among its arguments "
                f"{sorted(bound | set(names))} {ctx}"
            )
        fields = []
        it = iter(names)
        for col in columns:
            fields.append(col if col is not None else next(it))
        try:
            output, max_tokens = resolve(implied, template, options)
        except ValueError as exc:
            raise SQLError(f"{exc} {ctx}") from exc
        try:
            call = LLMCall(
                name or f"llm_{len(self.calls) + 1}", template, tuple(fields), output, max_tokens
            )
        except ValueError as exc:
            raise SQLError(f"{exc} {ctx}") from exc
        self.calls.append(call)
        return call

    def search_names(
        self, searches: list[exp.Anonymous], unbound: list[str], ctx: str
    ) -> list[str]:
        """Compile the similarity_search arguments of one LLM call into retrievals; returns
        their names (the placeholders they fill), in argument order."""
        free = list(unbound)
        names = []
        for node in searches:
            query, k, corpus = None, DEFAULT_K, None
            for i, arg in enumerate(node.expressions):
                key = (
                    arg.this.name.lower()
                    if isinstance(arg, exp.Kwarg)
                    else ("query", "k")[min(i, 1)]
                )
                value = arg.expression if isinstance(arg, exp.Kwarg) else arg
                if key == "query" and isinstance(value, exp.Column) and i == 0:
                    query = self.qualify(value, "similarity_search", node)
                elif key == "k" and isinstance(value, exp.Literal) and not value.is_string:
                    k = int(value.this)
                elif key == "corpus" and isinstance(value, exp.Column):
                    corpus = self.qualify(value, "similarity_search", node)
                else:
                    raise SQLError(
                        f"unsupported similarity_search argument {show(arg)} {ctx} "
                        f"(write similarity_search(column, k => n[, corpus => alias.column]))"
                    )
            if query is None:
                raise SQLError(f"similarity_search needs a query column first {ctx}")
            if not free:
                raise SQLError(
                    f"{show(node)} fills no template placeholder {ctx}: every placeholder is "
                    f"bound to a column argument; name the retrieved field in the template"
                )
            name = free.pop(0)
            if corpus is None:
                corpus = f"{query.split('.', 1)[0]}.{name}"
            try:
                retrieval = Retrieval(name, query, k, corpus)
            except ValueError as exc:
                raise SQLError(f"{exc} {ctx}") from exc
            known = self.retrievals.get(name)
            if known is not None and known != retrieval:
                raise SQLError(f"two different retrievals fill {name!r}: {known}, {retrieval}")
            self.retrievals[name] = retrieval
            names.append(name)
        return names

    # ---- WHERE -------------------------------------------------------------------------------

    def where(self, select: exp.Select) -> tuple[list[Predicate], list[LLMFilter]]:
        predicates: list[Predicate] = []
        filters: list[LLMFilter] = []
        node = select.args.get("where")
        if node is None:
            return predicates, filters
        for cond in _conjuncts(node.this):
            if not _has_llm(cond):
                predicates.append(self.predicate(cond))
                continue
            llm, literal, op = _llm_comparison(cond)
            if llm is None:
                raise SQLError(
                    f"unsupported in WHERE: {show(cond)} (an LLM call in WHERE must be a "
                    f"top-level AND conjunct of the form LLM(...) = 'literal')"
                )
            call = self.llm_call(llm, "WHERE", cond, None, Implied.choice(literal, show(cond)))
            filters.append(LLMFilter(call.name, op, literal))
        return predicates, filters

    def predicate(self, cond: exp.Expression) -> Predicate:
        bad = next(
            (
                n
                for n in cond.walk()
                if isinstance(n, exp.AggFunc)
                or _is_call(n, SEARCH_FUNCTION)
                or isinstance(n, exp.Window)
            ),
            None,
        )
        if bad is not None:
            raise SQLError(f"unsupported in WHERE: {show(cond)} ({bad.sql()} is not allowed here)")
        unknown = next((n for n in cond.walk() if isinstance(n, exp.Anonymous)), None)
        if unknown is not None:
            raise SQLError(
                f"unknown function {unknown.name}(...) in WHERE: {show(cond)}; "
                "predicates may use DuckDB's built-in functions only"
            )
        copy = cond.copy()
        columns = []
        for col in list(copy.find_all(exp.Column)):
            q = self.qualify(col, "WHERE", cond)
            columns.append(q)
            alias, name = q.split(".", 1)
            col.set("table", exp.to_identifier(alias))
        return Predicate(copy.sql(dialect="duckdb"), tuple(dict.fromkeys(columns)))

    # ---- SELECT -------------------------------------------------------------------------------

    def select(self, select: exp.Select) -> tuple[list[str], Aggregate | None, list[str]]:
        projection: list[str] = []
        aggregated: list[tuple[int, str, exp.Anonymous | None, exp.Expression, str | None]] = []
        for item in select.expressions:
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                if alias is not None:
                    raise SQLError(
                        f"unsupported in SELECT: {show(item)} (aliases on plain columns are "
                        f"not supported; write {node.sql()})"
                    )
                projection.append(self.qualify(node, "SELECT", item))
            elif _is_llm(node):
                call = self.llm_call(node, "SELECT", item, alias, Implied.nothing())
                projection.append(call.name)
            elif _is_llm_aggregate(node):
                if any(call is not None for _, _, call, _, _ in aggregated):
                    raise SQLError(
                        f"unsupported in SELECT: {show(item)} (only one aggregate per query "
                        f"reads an LLM call, AVG/SUM/COUNT/MIN/MAX(LLM(...)); COUNT(*) may "
                        f"stand beside it)"
                    )
                aggregated.append((len(projection), AGGREGATES[type(node)], node.this, item, alias))
                projection.append("")  # placeholder, filled with the aggregate alias below
            elif _is_count_star(node):
                aggregated.append((len(projection), "COUNT", None, item, alias))
                projection.append("")
            else:
                why = (
                    "an LLM call may appear bare, aliased, or as the only argument of "
                    f"AVG/SUM/COUNT/MIN/MAX; {ACCEPTED_AGGREGATES}"
                    if _has_llm(node)
                    else f"only columns, LLM(...), {ACCEPTED_AGGREGATES}"
                )
                raise SQLError(f"unsupported in SELECT: {show(item)} ({why})")
        group = select.args.get("group")
        group_by: list[str] = []
        if group is not None:
            for g in group.expressions:
                if not isinstance(g, exp.Column):
                    raise SQLError(f"unsupported in GROUP BY: {show(g)} (only columns)")
                group_by.append(self.qualify(g, "GROUP BY", g))
            if not aggregated:
                raise SQLError(
                    f"unsupported GROUP BY {show(group)} without "
                    f"AVG/SUM/COUNT/MIN/MAX(LLM(...)) or COUNT(*) in SELECT"
                )
        if not aggregated:
            return projection, None, group_by
        items = []
        for position, function, node, item, alias in aggregated:
            if node is None:
                name = alias or "count_star"
            else:
                implied = Implied.nothing() if function == "COUNT" else Implied.number(show(item))
                call = self.llm_call(node, "SELECT", item, None, implied)
                name = alias or f"{function.lower()}_{call.name}"
            try:
                items.append(AggregateItem(function, None if node is None else call.name, name))
            except ValueError as exc:
                raise SQLError(f"{exc} in SELECT: {show(item)}") from exc
            projection[position] = name
        try:
            aggregate = Aggregate(tuple(group_by), tuple(items))
        except ValueError as exc:
            raise SQLError(f"{exc} in SELECT: {show(select)}") from exc
        return projection, aggregate, group_by


def _is_llm_aggregate(node: exp.Expression) -> bool:
    """`AVG|SUM|COUNT|MIN|MAX(LLM(...))` with nothing else (no DISTINCT, no second argument)."""
    return type(node) in AGGREGATES and _is_llm(node.this) and not _extra_args(node)


def _extra_args(node: exp.Expression) -> list[str]:
    """Arguments of an aggregate besides its one operand (DISTINCT, a second argument);
    `big_int`, sqlglot's marker for DuckDB's 64-bit COUNT, is not one."""
    return [k for k, v in node.args.items() if v and k not in ("this", "big_int")]


def _is_count_star(node: exp.Expression) -> bool:
    """`COUNT(*)`: the rows that reach the aggregate (passed and answered), per group."""
    return isinstance(node, exp.Count) and isinstance(node.this, exp.Star) and not _extra_args(node)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """Top-level AND conjuncts, looking through parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _llm_comparison(cond: exp.Expression) -> tuple[exp.Anonymous | None, str, str]:
    """(LLM call, literal, op) for `LLM(...) = 'x'` (either side, `=`, `!=` or `<>`)."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.EQ | exp.NEQ):
        return None, "", ""
    op = "=" if isinstance(cond, exp.EQ) else "!="
    for a, b in ((cond.this, cond.expression), (cond.expression, cond.this)):
        if _is_llm(a) and isinstance(b, exp.Literal) and b.is_string:
            if any(_is_llm(n) for n in a.expressions for n in n.walk()):
                return None, "", ""
            return a, b.this, op
    return None, "", ""


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
            raise SQLError(
                f"unsupported clause {key.rstrip('_').upper()}: {text} "
                f"(supported: SELECT, FROM, JOIN ... ON, WHERE, GROUP BY)"
            )
    for node in stmt.walk():
        if node is not stmt and isinstance(node, exp.Subquery | exp.Select | exp.SetOperation):
            raise SQLError(f"unsupported subquery: {show(node)}")
    if stmt.args.get("from_") is None:
        raise SQLError(f"SELECT without FROM: {show(stmt)}")
    return stmt


def check_columns(query: LLMQuery, tables: Mapping[str, Sequence[str]]) -> None:
    """Raise `SQLError` naming the first column the query reads that its table lacks, or that
    its table holds twice as DuckDB sees names (`review` and `Review`: `sql_ast.case_twin`)."""
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
    c = _Compiler(name)
    c.sources.append(c.source(stmt.args["from_"].this, "FROM"))
    joins = c.joins(stmt)
    predicates, filters = c.where(stmt)
    projection, aggregate, _ = c.select(stmt)
    try:
        query = LLMQuery(
            name=name,
            sources=tuple(c.sources),
            joins=tuple(joins),
            predicates=tuple(predicates),
            retrievals=tuple(c.retrievals.values()),
            llm_calls=tuple(c.calls),
            llm_filters=tuple(filters),
            projection=tuple(projection),
            aggregate=aggregate,
        )
    except ValueError as exc:
        raise SQLError(f"{exc} in: {show(stmt)}") from exc
    if tables is not None:
        check_columns(query, tables)
    return query
