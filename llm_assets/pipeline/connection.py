"""The DuckDB connection every statement built from a user's query runs on, and the Arrow form
of a table registered on it. A leaf: it imports no other module of the pipeline."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa


def locked_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files or attach databases, with its
    configuration locked: the user's SQL sees only the relations registered on it."""
    con = duckdb.connect(config={"enable_external_access": False})
    con.execute("SET lock_configuration = true")
    return con


def as_arrow(table: pa.Table | pd.DataFrame) -> pa.Table:
    """`table` as an Arrow table (an Arrow table as is; a DataFrame without its index)."""
    if isinstance(table, pa.Table):
        return table
    return pa.Table.from_pandas(table, preserve_index=False)
