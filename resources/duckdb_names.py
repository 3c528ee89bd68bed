"""How DuckDB tells identifiers apart, a property of the engine: ASCII letters compare
case-insensitively (quoted or not), every other character as it is.

The warehouse (`resources.warehouse.store`) refuses a frame with two columns DuckDB cannot keep
apart and a schema named like one DuckDB reserves; the query model (`llm_assets.sql.syntax`,
which re-exports both functions) refuses the same names before a query is built.
"""

from __future__ import annotations

__all__ = ["case_twin", "duckdb_fold"]

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def duckdb_fold(name: str) -> str:
    """`name` as DuckDB compares identifiers: ASCII letters lower-cased, the rest as it is
    (DuckDB keeps `ä` and `Ä` apart)."""
    return name.translate(_ASCII_LOWER)


def case_twin(names, name: str | None = None) -> tuple[str, str] | None:
    """The first two of `names` that DuckDB cannot tell apart (`duckdb_fold`), as (earlier,
    later); with `name`, the first of `names` other than `name` that folds to it, as (name,
    twin). None when there is none.

    >>> case_twin(["id", "review", "Review"]), case_twin(["ä", "Ä"])
    (('review', 'Review'), None)
    >>> case_twin(["id", "review", "Review"], "Review")
    ('Review', 'review')
    """
    names = [str(n) for n in names]
    if name is not None:
        key = duckdb_fold(name)
        twin = next((n for n in names if n != name and duckdb_fold(n) == key), None)
        return None if twin is None else (name, twin)
    seen: dict[str, str] = {}
    for n in names:
        first = seen.setdefault(duckdb_fold(n), n)
        if first != n:
            return first, n
    return None
