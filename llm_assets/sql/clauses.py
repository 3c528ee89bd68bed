"""The clause handlers of the LLM-SQL compiler (`llm_assets.sql.compiler` is the entry and documents
the language): FROM and JOIN sources, WHERE predicates and LLM filters, SELECT columns, LLM
calls and aggregates, GROUP BY, and each `LLM(...)` call with its `similarity_search`
retrievals.

`Compiler` collects the sources, the LLM calls (numbered in the order compiled: WHERE before
SELECT) and the retrievals of one query while its clauses are compiled; every rejection is a
`SQLError` naming the clause, its LLM calls shown as `LLM(...)` (`show`). Columns are read
from the parsed tree and qualified as `alias.column` (`Compiler.qualify`); names are checked
by `llm_assets.sql.syntax` before they enter the model.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field, replace

from sqlglot import exp

from llm_assets.query.parts import (
    Aggregate,
    AggregateItem,
    Join,
    LLMCall,
    LLMFilter,
    Predicate,
    Retrieval,
    SemanticJoin,
    Source,
    TopK,
    placeholder_names,
)
from llm_assets.sql.nodes import (
    ACCEPTED_AGGREGATES,
    AGGREGATES,
    DEFAULT_K,
    SEARCH_FUNCTION,
    SQLError,
    checked_name,
    conjuncts,
    has_llm,
    is_call,
    is_count_star,
    is_llm,
    is_llm_aggregate,
    llm_comparison,
    show,
    similarity_in,
    star_item,
)
from llm_assets.sql.outputs import Implied, resolve, split_options
from llm_assets.sql.syntax import alias_problem, column_problem, output_problem, table_problem


@dataclass
class Compiler:
    name: str
    sources: list[Source] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    retrievals: dict[str, Retrieval] = field(default_factory=dict)
    semantic_joins: list[SemanticJoin] = field(default_factory=list)
    join_filters: list[LLMFilter] = field(default_factory=list)
    """The LLM filters of semantic joins (they run first: they decide the join's rows)."""
    join_predicates: list[Predicate] = field(default_factory=list)
    """Non-LLM conjuncts of a semantic join's ON other than equi-keys (`a.id < b.id`): WHERE
    predicates, as they are for an inner join."""

    # ---- columns ------------------------------------------------------------------------

    def aliases(self) -> list[str]:
        return [s.alias for s in self.sources]

    def qualify(self, col: exp.Column, clause: str, where: exp.Expression) -> str:
        """`alias.column` for a column reference, resolving an unqualified one when the query
        has a single source."""
        if col.args.get("db") or col.args.get("catalog"):
            raise SQLError(f"unsupported column {col.sql()} in {clause}: {show(where)}")
        checked_name("column name", col.name, column_problem, clause)
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
        checked_name("table name", table, table_problem, clause)
        return Source(
            checked_name("source alias", node.alias_or_name, alias_problem, clause), table
        )

    def joins(self, select: exp.Select) -> list[Join]:
        out: list[Join] = []
        for j in select.args.get("joins") or []:
            if j.side or j.kind not in ("", "INNER") or j.args.get("using") or not j.args.get("on"):
                raise SQLError(
                    f"unsupported in JOIN: {show(j).strip()} (only INNER JOIN ... ON a.x = b.y, "
                    f"or ON LLM(...) = 'yes' for a semantic join)"
                )
            self.sources.append(self.source(j.this, "JOIN"))
            parts = conjuncts(j.args["on"])
            semantic = any(has_llm(cond) for cond in parts)
            top_k = None
            for cond in parts:
                if has_llm(cond):
                    self.semantic_join(cond)
                    continue
                if similarity_in(cond) is not None:
                    if not semantic or top_k is not None:
                        raise SQLError(
                            f"unsupported in JOIN ON: {show(cond)} (top-k blocking: one "
                            f"b.y IN similarity_search(a.x, k => n) beside LLM(...) = 'yes')"
                        )
                    top_k = self.top_k(cond, *similarity_in(cond))
                    continue
                if not (
                    isinstance(cond, exp.EQ)
                    and isinstance(cond.this, exp.Column)
                    and isinstance(cond.expression, exp.Column)
                ):
                    if semantic:  # an inner join's ON conjunct is a WHERE conjunct
                        self.join_predicates.append(self.predicate(cond, "JOIN ON"))
                        continue
                    raise SQLError(
                        f"unsupported in JOIN ON: {show(cond)} (only equalities of two "
                        f"columns, alias.x = alias.y, joined by AND; other conditions beside "
                        f"an LLM condition, in a semantic join)"
                    )
                left = self.qualify(cond.this, "JOIN ON", cond).split(".", 1)
                right = self.qualify(cond.expression, "JOIN ON", cond).split(".", 1)
                try:
                    out.append(Join(left[0], left[1], right[0], right[1]))
                except ValueError as exc:
                    raise SQLError(f"unsupported in JOIN ON: {show(cond)} ({exc})") from exc
            if top_k is not None:
                self.semantic_joins[-1] = replace(self.semantic_joins[-1], top_k=top_k)
        return out

    def top_k(self, cond: exp.Expression, column: exp.Column, search: exp.Anonymous) -> TopK:
        """`b.y IN similarity_search(a.x, k => n)` in a semantic join's ON."""
        ctx = f"in JOIN ON: {show(cond)}"
        corpus = self.qualify(column, "JOIN ON", cond)
        query, k, named = self.search_args(search, ctx)
        if named is not None:
            raise SQLError(
                f"similarity_search in JOIN ON takes no corpus => {ctx} (the column before IN "
                f"is searched)"
            )
        try:
            return TopK(corpus, query, k)
        except ValueError as exc:
            raise SQLError(f"{exc} {ctx}") from exc

    def semantic_join(self, cond: exp.Expression) -> None:
        """`LLM(...) = 'literal'` in JOIN ON: an LLM call and filter deciding which candidate
        pairs of the source just joined are rows of the join (at most one per source)."""
        alias = self.sources[-1].alias
        llm, literal, op = llm_comparison(cond)
        if llm is None:
            raise SQLError(
                f"unsupported in JOIN ON: {show(cond)} (an LLM call in ON must be a top-level "
                f"AND conjunct of the form LLM(...) = 'literal')"
            )
        if any(s.alias == alias for s in self.semantic_joins):
            raise SQLError(
                f"unsupported in JOIN ON: {show(cond)} (one LLM condition per joined table)"
            )
        call = self.llm_call(llm, "JOIN ON", cond, None, Implied.choice(literal, show(cond)))
        self.join_filters.append(LLMFilter(call.name, op, literal))
        self.semantic_joins.append(SemanticJoin(alias, call.name))

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
            elif is_call(arg, SEARCH_FUNCTION):
                columns.append(None)
                searches.append(arg)
            else:
                raise SQLError(
                    f"unsupported LLM argument {show(arg)} {ctx} (arguments after the template "
                    f"are columns or similarity_search(column, k => n), then options)"
                )
        if not columns:
            raise SQLError(f"LLM call passes no column after its template {ctx}")
        bound = set(placeholder_names([c for c in columns if c is not None]))
        unbound = [p for p in placeholders if p not in bound]
        names = self.search_names(searches, unbound, ctx)
        unbound = [p for p in unbound if p not in names]
        if unbound:
            raise SQLError(
                f"LLM template names placeholder {unbound[0]!r} that is not among its arguments "
                f"{sorted(bound | set(names))} {ctx} (a placeholder is an argument's column "
                f"name, alias.column where two arguments share it)"
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
            query, k, corpus = self.search_args(node, ctx)
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

    def search_args(self, node: exp.Anonymous, ctx: str) -> tuple[str, int, str | None]:
        """(query column, k, corpus column or None) of one `similarity_search(...)`."""
        query, k, corpus = None, DEFAULT_K, None
        for i, arg in enumerate(node.expressions):
            key = arg.this.name.lower() if isinstance(arg, exp.Kwarg) else ("query", "k")[min(i, 1)]
            value = arg.expression if isinstance(arg, exp.Kwarg) else arg
            if key == "query" and isinstance(value, exp.Column) and i == 0:
                query = self.qualify(value, "similarity_search", node)
            elif key == "k" and isinstance(value, exp.Literal) and not value.is_string:
                if not value.this.isdigit():
                    raise SQLError(
                        f"similarity_search k => {value.this} must be a positive integer (how "
                        f"many nearest values each row gets) {ctx}"
                    )
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
        return query, k, corpus

    # ---- WHERE -------------------------------------------------------------------------------

    def where(self, select: exp.Select) -> tuple[list[Predicate], list[LLMFilter]]:
        predicates: list[Predicate] = []
        filters: list[LLMFilter] = []
        node = select.args.get("where")
        if node is None:
            return predicates, filters
        for cond in conjuncts(node.this):
            if not has_llm(cond):
                predicates.append(self.predicate(cond))
                continue
            llm, literal, op = llm_comparison(cond)
            if llm is None:
                raise SQLError(
                    f"unsupported in WHERE: {show(cond)} (an LLM call in WHERE must be a "
                    f"top-level AND conjunct of the form LLM(...) = 'literal')"
                )
            call = self.llm_call(llm, "WHERE", cond, None, Implied.choice(literal, show(cond)))
            filters.append(LLMFilter(call.name, op, literal))
        return predicates, filters

    def predicate(self, cond: exp.Expression, clause: str = "WHERE") -> Predicate:
        bad = next(
            (
                n
                for n in cond.walk()
                if isinstance(n, exp.AggFunc)
                or is_call(n, SEARCH_FUNCTION)
                or isinstance(n, exp.Window)
            ),
            None,
        )
        if bad is not None:
            raise SQLError(
                f"unsupported in {clause}: {show(cond)} ({bad.sql()} is not allowed here)"
            )
        unknown = next((n for n in cond.walk() if isinstance(n, exp.Anonymous)), None)
        if unknown is not None:
            raise SQLError(
                f"unknown function {unknown.name}(...) in {clause}: {show(cond)}; "
                "predicates may use DuckDB's built-in functions only"
            )
        copy = cond.copy()
        columns = []
        for col in list(copy.find_all(exp.Column)):
            q = self.qualify(col, clause, cond)
            columns.append(q)
            alias, name = q.split(".", 1)
            col.set("table", exp.to_identifier(alias))
        return Predicate(copy.sql(dialect="duckdb"), tuple(dict.fromkeys(columns)))

    # ---- SELECT -------------------------------------------------------------------------------

    def select(self, select: exp.Select) -> tuple[list[str], Aggregate | None, list[str | None]]:
        """(projection, aggregate, each item's SELECT alias on a plain column or None)."""
        projection: list[str] = []
        labels: list[str | None] = []
        aggregated: list[tuple[int, str, exp.Anonymous | None, exp.Expression, str | None]] = []
        for item in select.expressions:
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.this if isinstance(item, exp.Alias) else item
            labels.append(None)
            if star_item(node, item) is not None:
                projection.append(self.star(node, item))
            elif isinstance(node, exp.Column):
                projection.append(self.qualify(node, "SELECT", item))
                if alias is not None:
                    labels[-1] = checked_name("SELECT alias", alias, output_problem, "SELECT")
            elif is_llm(node):
                call = self.llm_call(node, "SELECT", item, alias, Implied.nothing())
                projection.append(call.name)
            elif is_llm_aggregate(node):
                if any(call is not None for _, _, call, _, _ in aggregated):
                    raise SQLError(
                        f"unsupported in SELECT: {show(item)} (only one aggregate per query "
                        f"reads an LLM call, AVG/SUM/COUNT/MIN/MAX(LLM(...)); COUNT(*) may "
                        f"stand beside it)"
                    )
                aggregated.append((len(projection), AGGREGATES[type(node)], node.this, item, alias))
                projection.append("")  # placeholder, filled with the aggregate alias below
            elif is_count_star(node):
                aggregated.append((len(projection), "COUNT", None, item, alias))
                projection.append("")
            else:
                why = (
                    "an LLM call may appear bare, aliased, or as the only argument of "
                    f"AVG/SUM/COUNT/MIN/MAX; {ACCEPTED_AGGREGATES}"
                    if has_llm(node)
                    else f"select columns (col AS name), *, LLM(...); {ACCEPTED_AGGREGATES}"
                )
                raise SQLError(f"unsupported in SELECT: {show(item)} ({why})")
        group = select.args.get("group")
        group_by: list[str] = []
        named = {label: p for p, label in zip(projection, labels, strict=True) if label}
        if group is not None:
            for g in group.expressions:
                if not isinstance(g, exp.Column):
                    raise SQLError(f"unsupported in GROUP BY: {show(g)} (only columns)")
                by_alias = named.get(g.name) if not g.table else None
                group_by.append(by_alias or self.qualify(g, "GROUP BY", g))
            if not aggregated:
                raise SQLError(
                    f"unsupported GROUP BY {show(group)} without "
                    f"AVG/SUM/COUNT/MIN/MAX(LLM(...)) or COUNT(*) in SELECT"
                )
        if not aggregated:
            return projection, None, labels
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
        return projection, aggregate, labels

    def star(self, node: exp.Expression, item: exp.Expression) -> str:
        """`*` or `alias.*` in SELECT: every column of the sources, or of one."""
        alias = star_item(node, item)
        if alias and alias not in self.aliases():
            raise SQLError(
                f"unknown alias {alias!r} in SELECT: {show(item)}; sources: {self.aliases()}"
            )
        return f"{alias}.*" if alias else "*"
