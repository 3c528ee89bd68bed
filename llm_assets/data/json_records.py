"""The JSON reader of the table loader (`llm_assets.data.tables`): JSON lines or a top-level list
of objects (`read_json`). Every column is text: strings as they are, numbers and booleans as
written in the file, nested values as compact JSON text, null as null; a key missing from a
record is null. Invalid JSON or a record that is not an object is an `InputError` naming its
line (or list item).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from llm_assets.data.checks import InputError, check_names
from llm_assets.data.limits import InputLimits, check_cells, check_count


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


def _records(path: Path, text: str, limits: InputLimits) -> tuple[list, list[str]]:
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
        check_count(path, len(document), "max_rows", limits)
        return document, [f"item {n}" for n in range(1, len(document) + 1)]
    lines = text.split("\n")  # not splitlines(): U+2028 and U+0085 may sit inside a string
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    del lines
    check_count(path, len(numbered), "max_rows", limits)  # one record a line: before parsing
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


def read_json(path: Path, text: str, limits: InputLimits | None = None) -> pa.Table:
    """The records of `text` as a table (see the module docstring), refused over `limits`:
    rows before the records are parsed (JSON lines), columns and cells before the table is
    returned."""
    limits = limits or InputLimits()
    records, where = _records(path, text, limits)
    shapes = {}
    for number, record in enumerate(records):
        if type(record) is not dict:
            got = type(record).__name__.replace("_RawNumber", "number")
            raise InputError(f"{path}: {where[number]}: expected a JSON object, got a {got}")
        shapes.setdefault(tuple(record), None)
    names = list(dict.fromkeys(k for shape in shapes for k in shape))
    check_count(path, len(names), "max_columns", limits)
    check_names(path, names, "column {}")
    struct = pa.struct([(k, pa.string()) for k in names])
    try:  # fast path: only text and nulls; a missing key is a null
        table = pa.Table.from_struct_array(pa.array(records, struct))
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        cells = [{k: _cell(v) for k, v in record.items()} for record in records]
        table = pa.Table.from_struct_array(pa.array(cells, struct))
    check_cells(path, table, 0, limits)
    return table
