"""The CSV / TSV reader of the table loader (`llm_assets.data.tables`): the delimiter when not
given (`sniff_delimiter`), the header (`first_row`), and the table with every column as text
exactly as written (`read_delimited`: an empty unquoted cell is null, a quoted empty cell the
empty string). A ragged or malformed row is an `InputError` naming its line and what to check.
An empty first header name (the row index of pandas' `to_csv` and R's `write.csv`) is read as
`UNNAMED_FIRST` (`column0`, DuckDB's `read_csv` name for it in a file of up to 10 columns);
any other empty name is refused.
"""

from __future__ import annotations

import codecs
import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv

from llm_assets.data.checks import InputError, check_names
from llm_assets.data.limits import MIB, InputLimits, check_cells, check_count

DELIMITERS = (",", "\t", ";", "|")
"""Candidates for delimiter detection, in order of preference on a tie."""
UNNAMED_FIRST = "column0"
"""The name of a first column whose header name is empty (pandas / R row index exports)."""
_SNIFF_CHARS = 1 << 16
_SNIFF_ROWS = 50
_SNIFF_BYTES = 4 * _SNIFF_CHARS + 4
"""Bytes that hold more than `_SNIFF_CHARS` characters (or the whole file)."""


def _rows(text: str, delimiter: str):
    return csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False)


_FIRST_ROW_CHARS = 1 << 16


def first_row(text: str, delimiter: str) -> list[str]:
    """The first row of `text` ([] on a csv error in it), read from a prefix that holds it
    whole (64K characters, doubled until the reader gets past the row or the prefix is the
    text): `io.StringIO` copies what it is given as 4-byte characters, ~3x the file."""
    size = _FIRST_ROW_CHARS
    while True:
        prefix = text[:size]
        rows = _rows(prefix, delimiter)
        try:
            row = next(rows, [])
        except csv.Error:  # in the row itself: the whole text fails there too
            return []
        if len(prefix) == len(text):
            return row
        try:
            if next(rows, None) is not None:
                return row  # the reader got past the first row: it is whole
        except csv.Error:
            return row
        size *= 2


def sniff_delimiter(text: str) -> str:
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


def head_text(source, size: int) -> str:
    """The text of the first `size` bytes of a UTF-8 `source` (`byte_sources`; a character
    cut at the end is left out); the whole text when `size` covers it."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    return decoder.decode(source.prefix(size), final=size >= source.length)


def header_row(path: Path, source, delimiter: str, limits: InputLimits) -> list[str]:
    """The first row of a UTF-8 `source` (as `first_row`: [] on a csv error in it), read from a
    doubling prefix; refused as soon as the prefix shows more than `max_columns` fields or a
    field longer than `max_cell_bytes` (a single line of gigabytes stops there)."""
    too_long = "line 1 (the header): a field longer than allowed"
    if _first_field_too_long(source, delimiter, limits.max_cell_bytes):
        raise limits.refusal(path, too_long, "max_cell_bytes")
    saved = csv.field_size_limit()
    csv.field_size_limit(limits.max_cell_bytes)  # characters: a longer field has more bytes
    size = _FIRST_ROW_CHARS
    try:
        while True:
            rows = _rows(head_text(source, size), delimiter)
            try:
                row = next(rows, [])
            except csv.Error as error:
                if "field larger than field limit" in str(error):
                    raise limits.refusal(path, too_long, "max_cell_bytes") from None
                return []
            check_count(path, len(row), "max_columns", limits)
            if size >= source.length:
                return row
            try:
                if next(rows, None) is not None:
                    return row
            except csv.Error:
                return row
            size *= 2
    finally:
        csv.field_size_limit(saved)


def _first_field_too_long(source, delimiter: str, limit: int) -> bool:
    """Whether the first `limit` + 1 bytes hold no delimiter, quote or line break: a first
    field over `limit` (a single line of gigabytes), told without decoding it."""
    if source.length <= limit:
        return False
    window = source.prefix(limit + 1)
    marks = (b"\n", b"\r", b'"', delimiter.encode("utf-8"))
    return all(window.find(mark) == -1 for mark in marks)


FIRST_BLOCK = MIB
"""Bytes pyarrow parses per block at first (pyarrow's default). Small blocks keep the parse's
memory near the table's (a 10M-row refusal peaks at ~0.9 GB with 1 MiB blocks, ~2.4 GB with
64 MiB). A row longer than a block (a long cell) makes pyarrow stop ("straddling"): the parse
starts again with blocks `BLOCK_GROWTH` times as large, up to the whole file."""
BLOCK_GROWTH = 8
COLUMNS_PER_MIB = 256
MAX_FIRST_BLOCK = 64 * MIB
"""A table of more than `COLUMNS_PER_MIB` columns starts with proportionally larger blocks (up
to this): each block costs an array per column, and 10,000 columns in 1 MiB blocks took 3x
as long to load."""


def read_delimited(
    path: Path, source, delimiter: str | None, limits: InputLimits | None = None
) -> pa.Table:
    """The table in a UTF-8 `source` (`byte_sources`: no BOM, a final newline), every column
    text as written, parsed block by block: rows and cells are checked against `limits` as
    each block arrives."""
    limits = limits or InputLimits()
    if delimiter is None:
        delimiter = sniff_delimiter(head_text(source, _SNIFF_BYTES))
    header = header_row(path, source, delimiter, limits)
    named = [UNNAMED_FIRST, *header[1:]] if header[:1] == [""] and len(header) > 1 else header
    check_names(path, named, "line 1, column {}")
    wide = FIRST_BLOCK * -(-len(header) // COLUMNS_PER_MIB)  # one array per column per block
    block = max(1 << 10, min(source.length + 1, wide, MAX_FIRST_BLOCK))
    while True:
        try:
            table = _blocks(path, source, delimiter, header, limits, block)
            break
        except pa.ArrowInvalid as error:
            if "straddling" in str(error) and block <= source.length:
                block = min(block * BLOCK_GROWTH, source.length + 1)
                continue
            text = source.text()
            raise InputError(_delimited_problem(path, text, delimiter, header, error)) from None
    return table.rename_columns(named) if named is not header else table


def _blocks(path, source, delimiter, header, limits: InputLimits, block: int) -> pa.Table:
    stream = source.stream()
    try:
        return _parse(path, stream, delimiter, header, limits, block)
    finally:
        stream.close()


def _parse(path, stream, delimiter, header, limits: InputLimits, block: int) -> pa.Table:
    reader = pa_csv.open_csv(
        stream,
        # no readahead thread: with one reading a Python stream, 1 in 40 processes aborted
        # at exit ("terminate called without an active exception"); 0 in 80 without
        read_options=pa_csv.ReadOptions(block_size=block, use_threads=False),
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
    batches, rows = [], 0
    for batch in reader:
        check_cells(path, batch, rows, limits)
        rows += batch.num_rows
        check_count(path, rows, "max_rows", limits)
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=reader.schema)


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
