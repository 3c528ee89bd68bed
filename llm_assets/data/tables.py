"""The one loader for user tables: CSV, TSV, Parquet and JSON lines, one file or a glob.

This module finds the files, tells each one's format (extension or `format=`) and encoding,
reads Parquet and joins the files of a glob; the text readers are `llm_assets.data.delimited`
(CSV, TSV) and `llm_assets.data.json_records` (JSON), what they share `llm_assets.data.checks`.

Invariants:
- Text formats (CSV, TSV, JSON) give every column as text exactly as written in the file: no
  dtype inference (`007`, `TRUE`, `1.50`, 20-digit ids and the words `NaN`/`None`/`null` stay
  as written). An empty unquoted CSV cell and a JSON null are null; a quoted empty CSV cell
  (`""`) is the empty string; JSON numbers and booleans keep their text, nested values become
  compact JSON text. Parquet keeps its own types and nulls.
- Column names are non-blank and unique, also ignoring ASCII case: DuckDB, which runs the
  query's SQL, cannot tell `review` from `Review`, so such a file is refused, not misread.
- Bad input raises `InputError`, one line naming the file (and the line and column where they
  apply) and what would be accepted.
- `predicate_types` (from `sql_types`) says which DuckDB type each text column would get from
  DuckDB's CSV sniffer, so SQL predicates compare typed values while prompts keep the text.
"""

from __future__ import annotations

import codecs
import glob
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from llm_assets.data.byte_sources import BufferSource, FileSource
from llm_assets.data.checks import InputError, check_names
from llm_assets.data.delimited import read_delimited
from llm_assets.data.encodings import ENCODING_ERRORS, decode, utf8_payload
from llm_assets.data.json_records import read_json
from llm_assets.data.limits import CHUNK, InputLimits, check_cells, check_count, read_bounded
from llm_assets.data.sql_types import PREDICATE_TYPES, predicate_types

FORMATS = ("csv", "tsv", "parquet", "jsonl", "json")
SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
}
"""Extension -> format; the text formats also accept a trailing `.gz`."""
_GLOB_CHARS = frozenset("*?[")


__all__ = [
    "FORMATS",
    "PREDICATE_TYPES",
    "InputError",
    "InputLimits",
    "load_table",
    "predicate_types",
]


def load_table(
    path_or_glob: str | Path | Sequence[str | Path],
    *,
    format: str | None = None,
    encoding: str | None = None,
    delimiter: str | None = None,
    encoding_errors: str = "strict",
    limits: InputLimits | Mapping[str, int] | None = None,
) -> pa.Table:
    """The table in `path_or_glob`; a glob reads every match in sorted order and concatenates
    them (all must have the same columns), as does a list of paths (in its order). `format`
    (csv, tsv, parquet, jsonl, json) overrides the extension, `encoding` the UTF-8 /
    Windows-1252 detection (per file, preferring UTF-8; `encoding_errors="replace"` reads a
    byte invalid there as U+FFFD instead of stopping) and `delimiter` the detection among `,`
    tab `;` `|` (a `.tsv` file is tab-separated). `limits` (`InputLimits`, or a mapping of some
    of its fields) bound each file's decompressed bytes, rows, columns and cells, and the rows
    of all files together; a file over one is refused while it is read."""
    if format is not None and format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if delimiter is not None and len(delimiter) != 1:
        raise InputError(f"delimiter must be one character, got {delimiter!r}")
    bounds = InputLimits.parse(limits)
    tables, rows = [], 0
    for path in _expand(path_or_glob):
        table = _read_one(path, format, encoding, delimiter, encoding_errors, bounds)
        rows += table.num_rows
        check_count(f"{path} (with the files before it)", rows, "max_rows", bounds)
        tables.append((path, table))
    return _concat(tables)


def _expand(path_or_glob: str | Path | Sequence[str | Path]) -> list[Path]:
    if not isinstance(path_or_glob, str | Path):
        if not path_or_glob:
            raise InputError("no input file: the list of paths is empty")
        return [p for one in path_or_glob for p in _expand(one)]
    text = str(path_or_glob)
    if _GLOB_CHARS & set(text):
        matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not matches:
            raise InputError(f"input file not found: no file matches {text!r}")
        return matches
    path = Path(path_or_glob)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "not found"
        raise InputError(f"input file {what}: {path}")
    return [path]


def _format_of(path: Path, format: str | None) -> str:
    if format is not None:
        return format
    name = path.name.lower()
    stem = name.removesuffix(".gz")
    for suffix, found in SUFFIXES.items():
        if stem.endswith(suffix) and (stem == name or found != "parquet"):
            return found
    accepted = ", ".join([*SUFFIXES, *(s + ".gz" for s in SUFFIXES if SUFFIXES[s] != "parquet")])
    raise InputError(
        f"unsupported input {path}: expected one of {accepted} (or pass format=one of "
        f"{', '.join(FORMATS)})"
    )


def _read_one(
    path: Path,
    format: str | None,
    encoding: str | None,
    delimiter: str | None,
    encoding_errors: str,
    limits: InputLimits,
) -> pa.Table:
    kind = _format_of(path, format)
    if kind == "parquet":
        return _read_parquet(path, limits)
    if kind in ("csv", "tsv"):
        if kind == "tsv" and delimiter is None:
            delimiter = "\t"
        return read_delimited(
            path, _utf8_source(path, encoding, kind, delimiter, encoding_errors, limits),
            delimiter, limits,
        )  # fmt: skip
    data = read_bounded(path, limits)
    text = decode(path, data, encoding, kind, delimiter, encoding_errors)
    del data  # the text holds the file from here: one copy fewer while it is parsed
    if not text or text.isspace():  # (not `strip()`: that copies the whole text)
        raise InputError(f"{path}: the file is empty (expected a header row or records)")
    return read_json(path, text, limits)


def _utf8_source(path, encoding, kind, delimiter, encoding_errors, limits: InputLimits):
    """The CSV / TSV file as UTF-8 bytes: streamed from disk when it is valid UTF-8 and read
    as UTF-8 (`FileSource`), else read whole and transcoded (`utf8_payload`)."""
    if encoding_errors not in ENCODING_ERRORS:
        raise InputError(
            f"encoding_errors {encoding_errors!r}: expected one of {list(ENCODING_ERRORS)}"
        )
    source = None
    if encoding is None or _is_utf8(path, encoding):
        source = FileSource.scan(path, limits)
    if source is None:
        data = read_bounded(path, limits)
        source = BufferSource(utf8_payload(path, data, encoding, kind, delimiter, encoding_errors))
        del data
    if re.search(rb"\S", source.prefix(CHUNK)) is None and source.length <= CHUNK:
        raise InputError(f"{path}: the file is empty (expected a header row or records)")
    return source


def _is_utf8(path: Path, encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")
    except LookupError:
        raise InputError(f"unknown encoding {encoding!r} for {path}") from None


# --- Parquet and globs --------------------------------------------------------------------


def _read_parquet(path: Path, limits: InputLimits) -> pa.Table:
    """The Parquet file's table; its row count, column count and uncompressed size (from the
    footer) are checked against `limits` before any data is read, its cells after."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as file:
            meta = file.metadata
            check_count(path, meta.num_rows, "max_rows", limits)
            check_count(path, len(file.schema_arrow), "max_columns", limits)
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if size > limits.max_bytes:
                what = f"the file's data is {size:,} bytes uncompressed"
                raise limits.refusal(path, what, "max_bytes")
            table = file.read()
    except (pa.ArrowException, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(f"{path}: not a readable Parquet file ({first})") from None
    check_names(path, table.column_names, "column {}")
    check_cells(path, table, 0, limits)
    return table


def _concat(tables: list[tuple[Path, pa.Table]]) -> pa.Table:
    (first_path, first), rest = tables[0], tables[1:]
    parts = [first]
    for path, table in rest:
        if sorted(table.column_names) != sorted(first.column_names):
            raise InputError(
                f"{path}: columns {table.column_names} differ from {first_path}'s "
                f"{first.column_names}; every file a glob matches needs the same columns"
            )
        table = table.select(first.column_names)
        if table.schema != first.schema:
            raise InputError(
                f"{path}: column types {table.schema.types} differ from {first_path}'s "
                f"{first.schema.types}; every file a glob matches needs the same types"
            )
        parts.append(table)
    return pa.concat_tables(parts) if len(parts) > 1 else first
