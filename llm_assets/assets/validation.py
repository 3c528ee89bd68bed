"""What definition load (`dg check defs`, `dg dev`, `llm_query_assets`) checks of a query's
sources before any run: every file, glob and DuckDB table is there and reads, has the columns
the query reads, the query's predicates run on its types (`pipeline.typecheck`), and a
semantic join's candidate pairs are within `max_pairs` (`pipeline.filtering.candidate_pairs`,
counted as the run and `llm-assets plan` count them). Each problem is one line naming the query
and the source.

Upstream assets (`{asset: a/b}`) and the landing table (its files arrive later) are checked
by the run that reads them, in the `filtered` asset, with the same one-line errors.

Dagster loads the definitions several times in one process (`dg launch` about seven times a
run, and again in every step's process under the multiprocess executor), so a query whose
files are unchanged since it passed (same paths, sizes and modification times) is not read
again in that process.
"""

from __future__ import annotations

import glob
import os

from llm_assets.assets.definition import QueryDefinition
from llm_assets.data.tables import InputError

_PASSED: set[tuple] = set()
"""Fingerprints (`_fingerprint`) of the queries that passed `check_sources` in this process."""


def _fingerprint(qdef: QueryDefinition) -> tuple | None:
    """What `check_sources` reads: the query and, per checked source, its spec and each file's
    path, size and modification time; None where a file cannot be stat'ed (check it)."""
    files = []
    for table, spec in sorted(qdef.sources.items()):
        if spec.asset or table == qdef.landed_table:
            continue
        path = spec.path or spec.database
        paths = sorted(glob.glob(path, recursive=True)) if set("*?[") & set(path) else [path]
        try:
            stats = [(p, st.st_size, st.st_mtime_ns) for p in paths for st in [os.stat(p)]]
        except OSError:
            return None
        files.append((table, spec.model_dump_json(), tuple(stats)))
    return (qdef.name, qdef.sql, qdef.options.model_dump_json(), qdef.label_column, tuple(files))


def check_sources(qdef: QueryDefinition) -> None:
    """Raise ValueError, one line, for the first source of `qdef` that is missing (a file, a
    glob matching nothing, a DuckDB database or table), unreadable, lacks a column the query
    reads, or holds a column a predicate cannot compare as written (`check_predicates`), or
    whose semantic join has more candidate pairs than `max_pairs` (`candidate_pairs`).
    A query that passed in this process with the same files (`_fingerprint`) passes again
    without reading them."""
    key = _fingerprint(qdef)
    if key is not None and key in _PASSED:
        return
    _check_sources(qdef)
    if key is not None:
        _PASSED.add(key)


def _check_sources(qdef: QueryDefinition) -> None:
    from llm_assets.pipeline.filtering import candidate_pairs
    from llm_assets.pipeline.quality import resolve_label
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
        if qdef.label_column and set(tables) >= {s.table for s in qdef.query.sources}:
            columns = {t: list(frame.column_names) for t, frame in tables.items()}
            resolve_label(qdef.query, columns, qdef.label_column)
    except ValueError as exc:
        raise type(exc)(f"query {qdef.name!r}: {exc}") from None
    if set(tables) >= {s.table for s in qdef.query.sources}:  # its message names the query
        options = qdef.options
        candidate_pairs(qdef.query, tables, options.pushdown, options.max_pairs, options.retriever)
