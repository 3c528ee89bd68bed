"""Names and SQL built from them: what an identifier may be, and quoted sqlglot nodes.

Every SQL string the query model emits is rendered from a sqlglot tree by `render` (DuckDB
dialect, every identifier quoted, comments dropped); user text never reaches SQL by string
formatting. Names are checked before they enter a tree, with one-line errors saying what is
accepted:

- a source alias: `ALIAS_RULE`, e.g. `r`, `_t2`;
- a table name: `TABLE_RULE`, up to three dotted parts of that form (`raw.reviews`);
- a column name: `COLUMN_RULE`, printable text without `"`, `;` or backslash, 1 to
  `MAX_NAME_CHARS` characters; a stage output name (an LLM call, a retrieval, an aggregate
  alias) is a column name without '.' (a '.' marks a qualified `alias.column`).

DuckDB compares identifiers case-insensitively (ASCII letters only, quoted or not): two
columns of one table whose names differ only in that case (`review`, `Review`) cannot be told
apart by any SQL, so the loader and the query binding refuse them (`case_twin`, with
`duckdb_fold` re-exported from `resources.duckdb_names`: DuckDB's rule, the warehouse's too).

>>> render(column_node("r", "review content"))
'"r"."review content"'
>>> column_problem('x"; DROP TABLE t; --')
'a column name is printable text without \\'"\\', \\';\\' or backslash, 1 to 128 characters'
>>> print(render(parse_condition("r.kind = 'Fresh' -- trailing */ comment")))
r.kind = 'Fresh'
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

from resources.duckdb_names import case_twin as case_twin
from resources.duckdb_names import duckdb_fold as duckdb_fold

DIALECT = "duckdb"
MAX_NAME_CHARS = 128
FORBIDDEN_CHARS = '";\\'
_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2}")
ALIAS_RULE = "a letter or '_' followed by letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)"
TABLE_RULE = "[A-Za-z_][A-Za-z0-9_]*, optionally schema-qualified (schema.table)"
COLUMN_RULE = f"printable text without '\"', ';' or backslash, 1 to {MAX_NAME_CHARS} characters"


def alias_problem(name: str) -> str | None:
    """Why `name` cannot be a source alias, or None."""
    return None if _ALIAS.fullmatch(name) else f"an alias is {ALIAS_RULE}"


def table_problem(name: str) -> str | None:
    """Why `name` cannot be a table name, or None."""
    return None if _TABLE.fullmatch(name) else f"a table name is {TABLE_RULE}"


def column_problem(name: str) -> str | None:
    """Why `name` cannot be a column name, or None."""
    ok = (
        0 < len(name) <= MAX_NAME_CHARS
        and name.isprintable()
        and not any(c in FORBIDDEN_CHARS for c in name)
    )
    return None if ok else f"a column name is {COLUMN_RULE}"


def output_problem(name: str) -> str | None:
    """Why `name` cannot name a stage output (LLM call, retrieval, aggregate), or None."""
    if column_problem(name) is None and "." not in name:
        return None
    return f"an output name is {COLUMN_RULE}, without '.'"


def check_name(kind: str, name: object, problem=column_problem) -> str:
    """`name` if `problem(name)` is None, else ValueError naming the kind and the value."""
    why = problem(name) if isinstance(name, str) else "it is not a string"
    if why is not None:
        shown = name if not isinstance(name, str) or len(name) <= 100 else name[:100] + "..."
        raise ValueError(f"{kind} {shown!r} is not accepted: {why}")
    return name


def identifier(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def column_node(alias: str | None, name: str) -> exp.Column:
    """`"alias"."name"` (or `"name"` without an alias)."""
    return exp.Column(this=identifier(name), table=identifier(alias) if alias else None)


def table(relation: str, alias: str | None = None) -> exp.Table:
    """A quoted table reference; `relation` is split on '.' into catalog, schema, name.
    Each part must be a valid column-like name (`COLUMN_RULE`)."""
    parts = relation.split(".")
    if len(parts) > 3:
        raise ValueError(f"relation {relation!r:.120} has more than three dotted parts")
    for part in parts:
        check_name("relation name part", part)
    keys = ("this", "db", "catalog")
    node = exp.Table(**{k: identifier(p) for k, p in zip(keys, reversed(parts), strict=False)})
    if alias is not None:
        node.set("alias", exp.TableAlias(this=identifier(alias)))
    return node


def render(node: exp.Expression, pretty: bool = False) -> str:
    """DuckDB SQL for `node`, comments dropped."""
    return node.sql(dialect=DIALECT, comments=False, pretty=pretty)


def parse_error(exc: sqlglot.errors.ParseError) -> str:
    """The first error of a sqlglot parse failure, on one line: ` at line L, column C: what
    near 'token'`."""
    first = exc.errors[0] if exc.errors else {}
    where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
    near = f" near {first['highlight']!r}" if first.get("highlight") else ""
    what = first.get("description") or str(exc).splitlines()[0]
    return f"{where}: {what}{near}"


def parse_condition(sql: str) -> exp.Expression:
    """One DuckDB scalar expression (a predicate), parsed; ValueError if `sql` is anything
    else: several statements, a statement, a subquery, a table reference."""
    try:
        trees = [t for t in sqlglot.parse(sql, read=DIALECT) if t is not None]
    except sqlglot.errors.ParseError as exc:
        raise ValueError(
            f"predicate {sql!r:.120} is not valid DuckDB SQL{parse_error(exc)}"
        ) from exc
    if len(trees) != 1 or not isinstance(trees[0], exp.Condition):
        raise ValueError(f"predicate {sql!r:.120} is not one SQL expression")
    bad = next(
        (n for n in trees[0].walk() if isinstance(n, exp.Query | exp.Subquery | exp.Table)), None
    )
    if bad is not None:
        raise ValueError(f"predicate {sql!r:.120} contains a subquery or table: {render(bad)}")
    return trees[0]


def condition_values_sql(condition: str, relation: str) -> str:
    """`SELECT COALESCE((condition), FALSE) FROM relation`: the condition's value per row,
    null read as false. `condition` is parsed with `parse_condition`."""
    value = exp.func("COALESCE", exp.paren(parse_condition(condition)), exp.false())
    return render(exp.select(value).from_(table(relation)))
