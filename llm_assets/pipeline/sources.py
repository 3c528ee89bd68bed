"""Where a query's tables come from: a file or glob, a DuckDB table, or an upstream asset.

`SourceSpec.parse` accepts the short forms users write in YAML or Python:

>>> SourceSpec.parse("data/reviews.tsv").path
'data/reviews.tsv'
>>> SourceSpec.parse({"asset": "movies/reviews"}).asset_path
['movies', 'reviews']
>>> SourceSpec.parse({"duckdb_table": "main.reviews", "database": "w.duckdb"}).label
'duckdb:w.duckdb:main.reviews'
>>> SourceSpec.parse({"path": "a.csv", "asset": "x"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for SourceSpec
  Value error, a source needs exactly one of path, asset, duckdb_table; got ['path', 'asset'] ...
...

(pydantic's `ValidationError` is a `ValueError`.)

Files are read by the one loader (`llm_assets.data.tables.load_table`): text columns keep
the file's text exactly, nulls stay nulls; a file over the source's `limits` (bytes, rows,
columns, cell size) is refused while it is read. A DuckDB table is read on a read-only connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from llm_assets.data.limits import InputLimits


class SourceSpec(BaseModel):
    """One table of a query: exactly one of `path`, `asset`, `duckdb_table`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(None, description="A CSV/TSV/Parquet/JSON-lines file or a glob.")
    format: str | None = Field(None, description="csv, tsv, parquet or jsonl (default: by name).")
    encoding: str | None = Field(None, description="Text encoding (default: detected).")
    encoding_errors: Literal["strict", "replace"] = Field(
        "strict",
        description="A byte invalid in the file's encoding: stop with its line and column "
        "(strict) or read it as U+FFFD (replace; only that byte changes).",
    )
    delimiter: str | None = Field(None, description="Field separator (default: detected).")
    limits: InputLimits = Field(
        default_factory=InputLimits,
        description="Bounds on the file: max_bytes (decompressed), max_rows, max_columns, "
        "max_cell_bytes; give only those to change, e.g. `limits: {max_rows: 50000000}` "
        "(defaults and why: `llm_assets.data.limits`).",
    )
    asset: str | None = Field(
        None, description="Key of an upstream asset, `a/b`, read through its own IO manager."
    )
    duckdb_table: str | None = Field(None, description="`[schema.]table` in a DuckDB file.")
    database: str | None = Field(None, description="The DuckDB file holding `duckdb_table`.")

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSpec:
        kinds = [k for k in ("path", "asset", "duckdb_table") if getattr(self, k)]
        if len(kinds) != 1:
            raise ValueError(
                f"a source needs exactly one of path, asset, duckdb_table; got {kinds or 'none'}"
            )
        if self.duckdb_table and not self.database:
            raise ValueError(f"duckdb_table {self.duckdb_table!r} needs `database: FILE.duckdb`")
        return self

    @classmethod
    def parse(cls, value: str | Mapping[str, Any] | SourceSpec) -> SourceSpec:
        """A spec from a path string, a mapping, or a spec."""
        if isinstance(value, SourceSpec):
            return value
        if isinstance(value, str | Path):
            return cls(path=str(value))
        return cls.model_validate(dict(value))

    @property
    def asset_path(self) -> list[str]:
        return [p for p in (self.asset or "").split("/") if p]

    @property
    def label(self) -> str:
        """What the data is, for MLflow and metadata (the file, table or asset)."""
        if self.path:
            return self.path
        if self.asset:
            return f"asset:{self.asset}"
        return f"duckdb:{self.database}:{self.duckdb_table}"

    def read(self, path: str | Sequence[str] | None = None) -> pa.Table:
        """The table (`path` overrides the spec's file: a landed file, or several landed files
        read as one table)."""
        from llm_assets.data.tables import load_table

        if path or self.path:
            return load_table(
                path or self.path,
                format=self.format,
                encoding=self.encoding,
                encoding_errors=self.encoding_errors,
                delimiter=self.delimiter,
                limits=self.limits,
            )
        if self.duckdb_table:
            return read_duckdb_table(self.database, self.duckdb_table)
        raise ValueError(f"source {self.label} is an asset: Dagster loads it, not the loader")


def read_duckdb_table(database: str, table: str) -> pa.Table:
    """`[schema.]table` of a DuckDB file, read-only; one-line errors."""
    import duckdb
    from sqlglot import exp

    from llm_assets.data.tables import InputError

    if not Path(database).exists():
        raise InputError(f"DuckDB database not found: {database}")
    parts = table.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise InputError(f"duckdb_table {table!r}: write it as table or schema.table")
    ref = exp.table_(parts[-1], db=parts[0] if len(parts) == 2 else None, quoted=True)
    sql = exp.select("*").from_(ref).sql(dialect="duckdb")
    con = duckdb.connect(database, read_only=True)
    try:
        return con.execute(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise InputError(f"{database}: cannot read {table!r}: {str(exc).splitlines()[0]}") from exc
    finally:
        con.close()
