"""The one loader for user tables: CSV, TSV, Parquet and JSON lines, one file or a glob.

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

import csv
import glob
import gzip
import io
import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv

from llm_assets.data.sql_types import PREDICATE_TYPES, predicate_types
from llm_assets.sql_ast import duckdb_fold

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
DELIMITERS = (",", "\t", ";", "|")
"""Candidates for delimiter detection, in order of preference on a tie."""
_SNIFF_CHARS = 1 << 16
_SNIFF_ROWS = 50
_GLOB_CHARS = frozenset("*?[")
NEWLINE = b"\n"


class InputError(ValueError):
    """A problem with the user's input, stated in one line."""


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
    if not text.strip():
        raise InputError(f"{path}: the file is empty (expected a header row or records)")
    if kind == "tsv" and delimiter is None:
        delimiter = "\t"
    if kind in ("csv", "tsv"):
        return _read_delimited(path, text, delimiter or _sniff_delimiter(text))
    return _read_json(path, text)


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
    delimiter = delimiter or ("\t" if kind == "tsv" else _sniff_delimiter(text))
    header = _first_row(text, delimiter)
    prefix = data[line_start:offset].decode("utf-8", errors="replace")
    index = len(_first_row(prefix + "x", delimiter)) - 1
    if 0 <= index < len(header):
        where += f", column {index + 1} ({header[index]!r})"
    return where


# --- CSV / TSV ----------------------------------------------------------------------------


def _rows(text: str, delimiter: str):
    return csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False)


def _first_row(text: str, delimiter: str) -> list[str]:
    try:
        return next(_rows(text, delimiter), [])
    except csv.Error:
        return []


def _sniff_delimiter(text: str) -> str:
    """The candidate delimiter under which the first rows parse cleanly (strict quoting) and
    all have the header's field count (more than one), preferring more fields, then
    `DELIMITERS` order; ',' when none splits the header."""
    sample = text[:_SNIFF_CHARS]
    complete = len(text) <= _SNIFF_CHARS
    best, best_score = ",", (False, 0.0, 1)
    for candidate in DELIMITERS:
        rows = _sample_rows(sample, candidate, complete)
        if rows is None:
            continue
        width = len(rows[0]) if rows else 0
        body = [r for r in rows[1:] if r]
        share = sum(len(r) == width for r in body) / len(body) if body else 1.0
        score = (share == 1.0, share, width)
        if width > 1 and score > best_score:
            best, best_score = candidate, score
    return best


def _sample_rows(sample: str, delimiter: str, complete: bool) -> list[list[str]] | None:
    """Up to `_SNIFF_ROWS` + 1 rows of `sample` under strict quoting; None when the quoting is
    broken in the part of the sample that is surely complete."""
    rows = []
    reader = csv.reader(io.StringIO(sample, newline=""), delimiter=delimiter, strict=True)
    try:
        for row in reader:
            rows.append(row)
            if len(rows) > _SNIFF_ROWS:
                break
    except csv.Error:
        if complete or not rows:
            return None
    if not complete and len(rows) > 1:
        rows = rows[:-1]  # the last row of a truncated sample may be cut short
    return rows


def _read_delimited(path: Path, text: str, delimiter: str) -> pa.Table:
    header = _first_row(text, delimiter)
    _check_names(path, header, "line 1, column {}")
    data = text.encode("utf-8")
    if not data.endswith(b"\n"):
        data += b"\n"
    try:
        return pa_csv.read_csv(
            io.BytesIO(data),
            parse_options=pa_csv.ParseOptions(
                delimiter=delimiter,
                newlines_in_values=True,
                ignore_empty_lines=len(header) > 1,  # a blank line is a null in a 1-column file
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
                check_utf8=False,
            ),
        )
    except pa.ArrowInvalid as error:
        raise InputError(_delimited_problem(path, text, delimiter, header, error)) from None


def _delimited_problem(path: Path, text: str, delimiter: str, header: list[str], error) -> str:
    """The first ragged or malformed row, found again with Python's csv module for its line."""
    hint = f"check the delimiter ({delimiter!r}; pass delimiter=...) and the quoting"
    limit = csv.field_size_limit()
    csv.field_size_limit(1 << 30)
    rows = _rows(text, delimiter)
    line = 1
    try:
        for row in rows:
            if (row or len(header) == 1) and len(row) != len(header) and line > 1:
                return (
                    f"{path}: line {line}: expected {len(header)} fields (as in the header), "
                    f"got {len(row)}; {hint}"
                )
            line = rows.line_num + 1
    except csv.Error as problem:
        return f"{path}: line {line}: {problem}; {hint}"
    finally:
        csv.field_size_limit(limit)
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{path}: cannot parse: {first}; {hint}"


def _check_names(path: Path, names: Sequence[str], place: str) -> None:
    """Every column has a non-blank, unique name, also as DuckDB compares names (ASCII case
    ignored: `review` and `Review` are one column to any SQL); `place` ('line 1, column {}')
    locates one."""
    if not names:
        raise InputError(f"{path}: no columns (expected a header row or records)")
    seen: dict[str, int] = {}
    folded: dict[str, tuple[str, int]] = {}
    for number, name in enumerate(names, start=1):
        if not str(name).strip():
            raise InputError(
                f"{path}: {place.format(number)} has an empty name; every column needs a name"
            )
        if name in seen:
            raise InputError(
                f"{path}: {place.format(number)}: column name {name!r} appears twice (also "
                f"column {seen[name]}); column names must be unique"
            )
        twin, where = folded.setdefault(duckdb_fold(str(name)), (name, number))
        if where != number:
            raise InputError(
                f"{path}: {place.format(number)}: column name {name!r} differs from column "
                f"{where} ({twin!r}) only in case, and the SQL engine (DuckDB) compares column "
                "names case-insensitively, so no query could tell them apart; rename one"
            )
        seen[name] = number


# --- JSON ---------------------------------------------------------------------------------


class _RawNumber(str):
    """A JSON number or constant (NaN, Infinity) kept as the text written in the file."""


_DECODER = json.JSONDecoder(parse_float=_RawNumber, parse_int=_RawNumber, parse_constant=_RawNumber)
"""Numbers keep their text; a key repeated in one object keeps its last value (JSON's rule)."""


def _compact(value) -> str:
    """Compact JSON text of a parsed value, numbers exactly as written."""
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{_compact(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    if isinstance(value, _RawNumber):
        return str.__str__(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return {True: "true", False: "false", None: "null"}[value]


def _cell(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return str.__str__(value)
    return _compact(value)


def _records(path: Path, text: str) -> tuple[list, list[str]]:
    """The parsed records and where each is ('item N' of a top-level list, else 'line N' of
    JSON lines). JSON lines are decoded as one array (fast); when that fails, line by line
    for the line that is wrong."""
    accepted = "expected one JSON object per line (JSON lines) or a top-level list of objects"
    if text.lstrip().startswith("["):
        try:
            document = _DECODER.decode(text)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{path}: line {error.lineno}, column {error.colno}: invalid JSON "
                f"({error.msg}); {accepted}"
            ) from None
        if not isinstance(document, list):
            raise InputError(f"{path}: line 1: the top-level value is not a list; {accepted}")
        return document, [f"item {n}" for n in range(1, len(document) + 1)]
    lines = text.split("\n")  # not splitlines(): U+2028 and U+0085 may sit inside a string
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    try:
        records = _DECODER.decode("[" + ",".join(line for _, line in numbered) + "]")
        if len(records) == len(numbered):
            return records, [f"line {n}" for n, _ in numbered]
    except json.JSONDecodeError:
        pass
    for number, line in numbered:
        try:
            _DECODER.decode(line)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{path}: line {number}, column {error.colno}: invalid JSON ({error.msg}); "
                f"{accepted}"
            ) from None
    raise AssertionError("unreachable: every line decodes but the lines together do not")


def _read_json(path: Path, text: str) -> pa.Table:
    records, where = _records(path, text)
    shapes = {}
    for number, record in enumerate(records):
        if type(record) is not dict:
            got = type(record).__name__.replace("_RawNumber", "number")
            raise InputError(f"{path}: {where[number]}: expected a JSON object, got a {got}")
        shapes.setdefault(tuple(record), None)
    names = list(dict.fromkeys(k for shape in shapes for k in shape))
    _check_names(path, names, "column {}")
    struct = pa.struct([(k, pa.string()) for k in names])
    try:  # fast path: only text and nulls; a missing key is a null
        return pa.Table.from_struct_array(pa.array(records, struct))
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        cells = [{k: _cell(v) for k, v in record.items()} for record in records]
        return pa.Table.from_struct_array(pa.array(cells, struct))


# --- Parquet and globs --------------------------------------------------------------------


def _read_parquet(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(f"{path}: not a readable Parquet file ({first})") from None
    _check_names(path, table.column_names, "column {}")
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
