"""The DuckDB connection every statement built from a user's query runs on."""

from __future__ import annotations

import duckdb


def locked_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files or attach databases, with its
    configuration locked: the user's SQL sees only the relations registered on it."""
    con = duckdb.connect(config={"enable_external_access": False})
    con.execute("SET lock_configuration = true")
    return con
