"""What definition load (`dg check defs`, `dg dev`, `llm_query_assets`) checks of a query's
sources before any run: every file, glob and DuckDB table is there and reads, has the columns
the query reads, and the query's predicates run on its types (`pipeline.typecheck`). Each
problem is one line naming the query and the source.

Upstream assets (`{asset: a/b}`) and the landing table (its files arrive later) are checked
by the run that reads them, in the `filtered` asset, with the same one-line errors.
"""

from __future__ import annotations

from llm_assets.assets.definition import QueryDefinition
from llm_assets.data.tables import InputError


def check_sources(qdef: QueryDefinition) -> None:
    """Raise ValueError, one line, for the first source of `qdef` that is missing (a file, a
    glob matching nothing, a DuckDB database or table), unreadable, lacks a column the query
    reads, or holds a column a predicate cannot compare as written (`check_predicates`)."""
    from llm_assets.pipeline.typecheck import check_predicates

    tables = {}
    for table, spec in sorted(qdef.sources.items()):
        if spec.asset or table == qdef.landed_table:
            continue
        try:
            tables[table] = spec.read()
        except ValueError as exc:
            raise InputError(f"query {qdef.name!r}: source {table!r}: {exc}") from None
    if not tables:
        return
    try:
        check_predicates(qdef.query, tables)
    except ValueError as exc:
        raise type(exc)(f"query {qdef.name!r}: {exc}") from None
