"""Reading user tables from disk with errors that say what was wrong (no tracebacks)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

SUFFIXES = (".csv", ".parquet")


class InputError(ValueError):
    """A problem with the user's input, stated in one line."""


def read_table(path: str | Path) -> pa.Table | pd.DataFrame:
    """A CSV (every cell kept as its text; empty cells as "") or Parquet file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file not found: {path}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"unsupported input {path.name!r}: expected one of {list(SUFFIXES)}")
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        import pyarrow.parquet as pq

        return pq.read_table(path)
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{path.name}: the file is empty (no header row)") from exc
    except (pd.errors.ParserError, pa.ArrowInvalid, UnicodeDecodeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path.name}: cannot parse: {first_line}") from exc
