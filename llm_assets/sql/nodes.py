"""The node-level vocabulary of LLM-SQL over sqlglot trees: which nodes are LLM calls or
`similarity_search`, the conjuncts of a condition, `LLM(...) = 'x'` comparisons, a join's
`col IN similarity_search(...)` blocking, aggregate forms; `SQLError` (every rejection of
the compiler) and `show` (a node as the error shows it, its LLM calls as `LLM(...)`)."""

from __future__ import annotations

from sqlglot import exp

from llm_assets.sql.syntax import check_name

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
ACCEPTED_AGGREGATES = (
    "AVG/SUM/COUNT/MIN/MAX(LLM(...)) and COUNT(*) are supported, with or without GROUP BY"
)


class SQLError(ValueError):
    """LLM-SQL that cannot be compiled; the message names the offending clause."""


def is_call(node: exp.Expression, name: str) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.name).upper() == name


def is_llm(node: exp.Expression) -> bool:
    return is_call(node, LLM_FUNCTION)


def has_llm(node: exp.Expression) -> bool:
    return any(is_llm(n) for n in node.walk())


def checked_name(kind: str, value: str, problem, clause: str) -> str:
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
        if is_llm(n):
            n.replace(exp.Anonymous(this=LLM_FUNCTION, expressions=[exp.var("...")]))
    return copy.sql(dialect="duckdb")


def is_llm_aggregate(node: exp.Expression) -> bool:
    """`AVG|SUM|COUNT|MIN|MAX(LLM(...))` with nothing else (no DISTINCT, no second argument)."""
    return type(node) in AGGREGATES and is_llm(node.this) and not extra_args(node)


def extra_args(node: exp.Expression) -> list[str]:
    """Arguments of an aggregate besides its one operand (DISTINCT, a second argument);
    `big_int`, sqlglot's marker for DuckDB's 64-bit COUNT, is not one."""
    return [k for k, v in node.args.items() if v and k not in ("this", "big_int")]


def is_count_star(node: exp.Expression) -> bool:
    """`COUNT(*)`: the rows that reach the aggregate (passed and answered), per group."""
    return isinstance(node, exp.Count) and isinstance(node.this, exp.Star) and not extra_args(node)


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """Top-level AND conjuncts, looking through parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def llm_comparison(cond: exp.Expression) -> tuple[exp.Anonymous | None, str, str]:
    """(LLM call, literal, op) for `LLM(...) = 'x'` (either side, `=`, `!=` or `<>`)."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.EQ | exp.NEQ):
        return None, "", ""
    op = "=" if isinstance(cond, exp.EQ) else "!="
    for a, b in ((cond.this, cond.expression), (cond.expression, cond.this)):
        if is_llm(a) and isinstance(b, exp.Literal) and b.is_string:
            if any(is_llm(n) for n in a.expressions for n in n.walk()):
                return None, "", ""
            return a, b.this, op
    return None, "", ""


def similarity_in(cond: exp.Expression) -> tuple[exp.Column, exp.Anonymous] | None:
    """(column, search) for `column IN similarity_search(...)` (or with the call in
    parentheses): a semantic join's top-k blocking; None for anything else."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.In) or not isinstance(cond.this, exp.Column):
        return None
    if any(cond.args.get(k) for k in ("query", "unnest", "is_global")):
        return None
    field = cond.args.get("field")
    options = [field] if field is not None else list(cond.expressions)
    if len(options) != 1 or not is_call(options[0], SEARCH_FUNCTION):
        return None
    return cond.this, options[0]


def star_item(node: exp.Expression, item: exp.Expression) -> str | None:
    """For a SELECT item: `""` for `*`, the alias for `a.*`, None for anything else;
    `SQLError` for a star this language does not take (`* EXCLUDE (...)`, `* REPLACE (...)`,
    `COLUMNS(...)`, an alias on a star)."""
    star = node if isinstance(node, exp.Star) else None
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
        star = node.this
    if star is None:
        return None
    if any(star.args.get(k) for k in star.args) or item is not node:
        raise SQLError(
            f"unsupported in SELECT: {show(item)} (a star is * or alias.*, without EXCLUDE, "
            f"REPLACE, RENAME or an alias; list the columns instead)"
        )
    return node.table if isinstance(node, exp.Column) else ""
