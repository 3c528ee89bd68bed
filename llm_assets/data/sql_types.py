"""Which DuckDB type a text column would get from DuckDB's CSV sniffer, so that SQL predicates
(`rating > 3`, `verified = TRUE`) compare typed values while prompts keep the file's text.

Invariant: every non-null value of a column typed T casts to T (CAST, not only TRY_CAST).
Where DuckDB's own `read_csv` types a column, `predicate_types` gives the same type; where
the sniffer falls back to VARCHAR for a mix (dates and timestamps), we may give the wider type.
The SQL is built from sqlglot's AST with quoted identifiers (column names are user text).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import pyarrow as pa

_SIGNED_OR_LEADING_ZERO = r"^\s*(\+|-?0[0-9])"
_INTEGER = r"^\s*-?[0-9]+\s*$"
_HAS_DIGIT = r"[0-9]"
_HAS_TIME = r"[0-9][ T][0-9]"
PREDICATE_TYPES = ("BOOLEAN", "BIGINT", "HUGEINT", "DOUBLE", "DATE", "TIMESTAMP")
"""Tried in this order; a text column gets the first its non-null values all fit, else
VARCHAR (also for a column with no non-null value)."""


def _fits(column, type_name: str):
    """SQL condition: `column` casts to `type_name` as DuckDB's CSV sniffer would accept it
    (numbers without leading zeros, booleans spelled as words, dates without a time)."""
    from sqlglot import exp

    def matches(pattern: str):
        return exp.RegexpLike(this=column.copy(), expression=exp.Literal.string(pattern))

    cast = exp.TryCast(this=column.copy(), to=exp.DataType.build(type_name, dialect="duckdb"))
    condition = cast.is_(exp.null()).not_()
    extra = {
        "BOOLEAN": [matches(_HAS_DIGIT).not_()],
        "BIGINT": [matches(_INTEGER), matches(_SIGNED_OR_LEADING_ZERO).not_()],
        "HUGEINT": [matches(_INTEGER), matches(_SIGNED_OR_LEADING_ZERO).not_()],
        "DOUBLE": [matches(_SIGNED_OR_LEADING_ZERO).not_()],
        "DATE": [matches(_HAS_TIME).not_()],
    }.get(type_name, [])
    return exp.and_(condition, *extra)


_TYPED: dict[int, dict[str, str]] = {}
"""id(table) -> its columns typed so far: an Arrow table is immutable, so the type check and
the filter (which both type a query's predicate columns) scan each column of one loaded
table once. An entry goes when its table is freed (before its id can be reused)."""


def _typed_so_far(table: pa.Table) -> dict[str, str]:
    key = id(table)
    if key not in _TYPED:
        _TYPED[key] = {}
        weakref.finalize(table, _TYPED.pop, key, None)
    return _TYPED[key]


def predicate_types(table: pa.Table, columns: Sequence[str]) -> dict[str, str]:
    """The DuckDB type each text column in `columns` would get from DuckDB's CSV sniffer
    (one of `PREDICATE_TYPES`, else VARCHAR); non-text columns are left out. Every non-null
    value of a column typed T casts to T without error. A column of a table is scanned once
    however often it is asked for (`_TYPED`)."""
    unknown = [c for c in columns if c not in table.column_names]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the table has {table.column_names}")
    text = [
        c
        for c in dict.fromkeys(columns)
        if pa.types.is_string(table.schema.field(c).type)
        or pa.types.is_large_string(table.schema.field(c).type)
    ]
    known = _typed_so_far(table)
    known.update(_scan_types(table, [c for c in text if c not in known]))
    return {c: known[c] for c in text}


def _scan_types(table: pa.Table, text: Sequence[str]) -> dict[str, str]:
    """`predicate_types` of the text columns `text`, counted in one DuckDB scan."""
    import duckdb
    from sqlglot import exp

    if not text:
        return {}
    selects = []
    for number, name in enumerate(text):
        column = exp.column(name, quoted=True)
        selects.append(exp.Count(this=column.copy()).as_(f"n{number}"))
        for type_name in PREDICATE_TYPES:
            fits = exp.CountIf(this=_fits(column, type_name))
            selects.append(fits.as_(f"n{number}_{type_name}"))
    query = exp.select(*selects).from_(exp.to_table("t")).sql(dialect="duckdb")
    with duckdb.connect() as con:
        con.register("t", table.select(text))
        counts = dict(
            zip([d[0] for d in con.execute(query).description], con.fetchone(), strict=True)
        )
    result = {}
    for number, name in enumerate(text):
        present = counts[f"n{number}"]
        result[name] = next(
            (t for t in PREDICATE_TYPES if present and counts[f"n{number}_{t}"] == present),
            "VARCHAR",
        )
    return result
