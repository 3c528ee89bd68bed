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

import glob
import gzip
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from llm_assets.data.checks import InputError, check_names
from llm_assets.data.delimited import first_row, read_delimited, sniff_delimiter
from llm_assets.data.json_records import read_json
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
NEWLINE = b"\n"


__all__ = ["FORMATS", "PREDICATE_TYPES", "InputError", "load_table", "predicate_types"]


def load_table(
    path_or_glob: str | Path | Sequence[str | Path],
    *,
    format: str | None = None,
    encoding: str | None = None,
    delimiter: str | None = None,
    encoding_errors: str = "strict",
) -> pa.Table:
    """The table in `path_or_glob`; a glob reads every match in sorted order and concatenates
    them (all must have the same columns), as does a list of paths (in its order). `format`
    (csv, tsv, parquet, jsonl, json) overrides the extension, `encoding` the UTF-8 /
    Windows-1252 detection (per file, preferring UTF-8; `encoding_errors="replace"` reads a
    byte invalid there as U+FFFD instead of stopping) and `delimiter` the detection among `,`
    tab `;` `|` (a `.tsv` file is tab-separated)."""
    if format is not None and format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if delimiter is not None and len(delimiter) != 1:
        raise InputError(f"delimiter must be one character, got {delimiter!r}")
    tables = [
        (path, _read_one(path, format, encoding, delimiter, encoding_errors))
        for path in _expand(path_or_glob)
    ]
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
    encoding_errors: str = "strict",
) -> pa.Table:
    kind = _format_of(path, format)
    if kind == "parquet":
        return _read_parquet(path)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise InputError(f"{path}: not a readable gzip file ({error})") from None
    text = _decode(path, data, encoding, kind, delimiter, encoding_errors)
    del data  # the text holds the file from here: one copy fewer while it is parsed
    if not text or text.isspace():  # (not `strip()`: that copies the whole text)
        raise InputError(f"{path}: the file is empty (expected a header row or records)")
    if kind == "tsv" and delimiter is None:
        delimiter = "\t"
    if kind in ("csv", "tsv"):
        return read_delimited(path, text, delimiter or sniff_delimiter(text))
    return read_json(path, text)


# --- encodings ----------------------------------------------------------------------------


def _decode(
    path: Path,
    data: bytes,
    encoding: str | None,
    kind: str,
    delimiter: str | None,
    errors: str = "strict",
) -> str:
    """The file's text; a BOM is dropped. `encoding` when given, else detected per file,
    preferring UTF-8: a file is UTF-8 when it decodes as UTF-8 or holds at least one valid
    multi-byte UTF-8 sequence; only a file with neither is read as Windows-1252. A byte that is
    not valid in the chosen encoding is an InputError naming the file, line and column, or,
    with `errors="replace"`, becomes U+FFFD (that byte only; nothing else changes)."""
    if errors not in ENCODING_ERRORS:
        raise InputError(f"encoding_errors {errors!r}: expected one of {list(ENCODING_ERRORS)}")
    name = encoding or ("utf-8-sig" if _looks_utf8(data) else "cp1252")
    try:
        return data.decode(name, errors).removeprefix("\ufeff")
    except LookupError:
        raise InputError(f"unknown encoding {name!r} for {path}") from None
    except UnicodeDecodeError as error:
        failure = error
    where = _where(data, failure.start, kind, delimiter)
    byte = f"byte 0x{data[failure.start]:02x}"
    bad = _invalid_utf8(data) if name == "utf-8-sig" else None
    if encoding:
        problem = f"is not valid {encoding}"
    elif bad is not None:
        problem = (
            f"is not valid UTF-8, in a file that is otherwise UTF-8 ({bad} such place"
            f"{'s' if bad != 1 else ''})"
        )
    else:
        problem = "is neither UTF-8 nor Windows-1252 (cp1252)"
    raise InputError(
        f"{path}: {where}: {byte} {problem}; fix the file, pass encoding_errors='replace' to "
        "read each such byte as U+FFFD, or encoding=... (e.g. utf-8, cp1252, latin-1)"
    )


ENCODING_ERRORS = ("strict", "replace")


def _looks_utf8(data: bytes) -> bool:
    """Whether `data` decodes as UTF-8 or holds at least one valid multi-byte sequence."""
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return not data.decode("utf-8", "ignore").isascii()


def _invalid_utf8(data: bytes) -> int:
    """How many invalid UTF-8 sequences `data` holds (each one U+FFFD under "replace")."""
    replaced = data.decode("utf-8", "replace").count("\ufffd")
    return replaced - data.count("\ufffd".encode())


def _where(data: bytes, offset: int, kind: str, delimiter: str | None) -> str:
    """'line N' (1-based) of byte `offset`, plus the CSV column it falls in when known."""
    line_start = data.rfind(NEWLINE, 0, offset) + 1
    where = f"line {data.count(NEWLINE, 0, offset) + 1}"
    if kind not in ("csv", "tsv"):
        return where
    text = data.decode("utf-8", errors="replace")
    delimiter = delimiter or ("\t" if kind == "tsv" else sniff_delimiter(text))
    header = first_row(text, delimiter)
    prefix = data[line_start:offset].decode("utf-8", errors="replace")
    index = len(first_row(prefix + "x", delimiter)) - 1
    if 0 <= index < len(header):
        where += f", column {index + 1} ({header[index]!r})"
    return where


# --- Parquet and globs --------------------------------------------------------------------


def _read_parquet(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(f"{path}: not a readable Parquet file ({first})") from None
    check_names(path, table.column_names, "column {}")
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
