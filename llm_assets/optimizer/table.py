"""Tables as the optimizer sees them: every cell rendered to a string, every column coded.

Any pyarrow Table or pandas DataFrame works, with columns of any type. Cells render the same
way everywhere (prompts, metrics, dedup), so a value never looks different in two places:

- null (None, NaN, NaT, pd.NA) -> "" (empty)
- bool -> "True" / "False"; int -> decimal; float -> shortest repr ("2.5", "1e-07"),
  integral floats without ".0" only if the caller renders them so (we keep "3.0")
- nested (list, struct, map; numpy arrays from pandas) -> compact JSON (`[1,2]`,
  `{"x":"é"}`), the same from Arrow and pandas, never Python or numpy text
- typed values as their SQL text: a date `2024-02-29`, a timestamp with its zone's offset
  (`2024-02-29 11:00:00+01:00`), a decimal with its scale (`1.10`), binary as PostgreSQL's
  hex form (`\\x00ff`), a duration as ISO 8601 (`P1DT2H0.5S`, `-PT5S`)
- everything else -> str(value); strings are kept verbatim (braces, newlines and all)

`EncodedTable` holds, per chosen field, integer codes per row (`codes[:, j]`) numbered in
sorted string order (so sorting codes sorts the strings), the distinct strings, and their
lengths. It is built once; all algorithms work on the codes, never on Python cell objects.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

TableLike = pa.Table | pd.DataFrame


def render_cell(value: Any) -> str:
    """The string a cell contributes to a prompt (see the module docstring for the rules)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return "True" if value else "False"
    if isinstance(value, float | np.floating):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()  # binary has no text: never decoded, never altered
    if isinstance(value, decimal.Decimal):
        return format(value, "f")  # its scale kept (1.10), never an exponent
    if isinstance(value, datetime.timedelta | np.timedelta64):
        return iso_duration(value)
    if isinstance(value, dict | list | tuple | np.ndarray):
        return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"))
    return str(value)


def iso_duration(value: datetime.timedelta | np.timedelta64) -> str:
    """A duration as ISO 8601 (`PT5S`, `P1DT2H0.0005S`, `-PT1M`, `PT0S`), exact to the
    nanosecond; '' for NaT.

    >>> iso_duration(datetime.timedelta(days=1, hours=2, microseconds=500))
    'P1DT2H0.0005S'
    """
    if isinstance(value, pd.Timedelta):
        ns = value.value
    elif isinstance(value, datetime.timedelta):  # (Python's: beyond pandas' ns range too)
        ns = ((value.days * 86_400 + value.seconds) * 10**6 + value.microseconds) * 1000
    else:
        converted = pd.Timedelta(value)
        if converted is pd.NaT:
            return ""
        ns = converted.value
    sign, ns = ("-" if ns < 0 else ""), abs(ns)
    days, ns = divmod(ns, 86_400 * 10**9)
    hours, ns = divmod(ns, 3_600 * 10**9)
    minutes, ns = divmod(ns, 60 * 10**9)
    seconds, fraction = divmod(ns, 10**9)
    time = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or fraction or not (days or time):
        time += str(seconds) + (f".{fraction:09d}".rstrip("0") if fraction else "") + "S"
    return f"{sign}P" + (f"{days}D" if days else "") + (f"T{time}" if time else "")


def _plain(value: Any) -> Any:
    """A nested cell (Parquet list, struct or map; a numpy array from pandas) as plain JSON
    values, so it renders the same from Arrow and from pandas: compact JSON, not Python or
    numpy text. A missing or NaN element is null."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, bool | int | str):
        return value
    return render_cell(value)


def column_names(table: TableLike) -> list[str]:
    return [str(c) for c in (table.column_names if isinstance(table, pa.Table) else table.columns)]


def num_rows(table: TableLike) -> int:
    return table.num_rows if isinstance(table, pa.Table) else len(table)


def resolve_fields(table: TableLike, fields: Sequence[str] | None) -> list[str]:
    """The fields to use: all columns when `fields` is None; a KeyError naming any unknown one."""
    available = column_names(table)
    if fields is None:
        return available
    fields = list(fields)
    missing = [f for f in fields if f not in available]
    if missing:
        raise KeyError(f"unknown field(s) {missing}; available columns: {available}")
    if len(set(fields)) != len(fields):
        raise ValueError(f"fields must be distinct, got {fields}")
    return fields


def rendered_column(table: TableLike, field: str) -> np.ndarray:
    """One column as an object array of rendered strings (see `render_cell`)."""
    if isinstance(table, pa.Table):
        column = table.column(field)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            values = column.to_numpy(zero_copy_only=False)
            return np.array(["" if v is None else v for v in values], dtype=object)
        values = column.to_pylist()
    else:
        series = table[field]
        if pd.api.types.infer_dtype(series, skipna=False) == "string":
            return series.to_numpy(dtype=object)
        values = series.tolist()
    return np.array([render_cell(v) for v in values], dtype=object)


TRANSIENT = pa.system_memory_pool()
"""The Arrow pool for buffers built and dropped within one call (a column's text to code it,
prompts being joined): the C allocator returns large blocks to the OS when they are freed,
where Arrow's default pool (mimalloc) keeps them, holding gigabytes at 10M rows."""


@dataclass(frozen=True)
class EncodedTable:
    """Integer-coded view of chosen fields. Invariant: `uniques[j][codes[i, j]]` is the
    rendered cell of row i, field j, and `uniques[j]` is sorted ascending."""

    fields: tuple[str, ...]
    codes: np.ndarray
    """int32 array (n_rows, n_fields)."""
    uniques: tuple[np.ndarray, ...]
    """Per field: the distinct rendered strings, sorted (object arrays)."""
    lengths: tuple[np.ndarray, ...]
    """Per field: float64 length of each distinct string (characters or tokens)."""

    @property
    def num_rows(self) -> int:
        return self.codes.shape[0]

    def cell(self, row: int, j: int) -> str:
        return self.uniques[j][self.codes[row, j]]

    def take(self, rows: np.ndarray) -> EncodedTable:
        """Rows `rows` of this table (the same uniques: every one must still occur, as when
        `rows` holds one row of each distinct row)."""
        return EncodedTable(self.fields, self.codes[rows], self.uniques, self.lengths)

    def select(self, fields: Sequence[str]) -> EncodedTable:
        """The table with its fields in the order `fields` names them (all of them)."""
        if sorted(fields) != sorted(self.fields):
            raise ValueError(f"select needs every field of {list(self.fields)}, got {fields}")
        at = [self.fields.index(f) for f in fields]
        pick = lambda items: tuple(items[j] for j in at)  # noqa: E731
        return EncodedTable(
            tuple(fields), self.codes[:, at], pick(self.uniques), pick(self.lengths)
        )


def object_array(values: Sequence) -> np.ndarray:
    """`values` as a one-dimensional object array, each element as it is (`np.asarray` would
    make a sequence of equal-length sequences two-dimensional)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def factorize_strings(values: np.ndarray, sort: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) of an object array of str, as `pd.factorize` gives them: codes in
    first-occurrence order, or in sorted order of the uniques with `sort`.

    Coded by Arrow's hash table and sort (UTF-8 bytes: every character counts, and byte order
    is Python's code point order), not pandas': pandas' hash table reads a str only up to its
    first NUL and takes strings holding different lone surrogates for one value ('\ud800a'
    and '\ud800b'), and sorts Python objects one comparison at a time. A column Arrow cannot
    hold (a lone surrogate is not UTF-8) is coded with a dict (exact, slower)."""
    try:
        array = pa.array(values, type=pa.large_string(), from_pandas=False, memory_pool=TRANSIENT)
    except (pa.ArrowException, UnicodeEncodeError):
        return _factorize_with_dict(values, sort)
    encoded = pc.dictionary_encode(array, memory_pool=TRANSIENT)
    del array
    codes = encoded.indices.to_numpy().astype(np.int64)
    # the dictionary is in first-occurrence order: value k first appears where the running
    # maximum of the codes reaches k; those rows hold the caller's own str objects (shared,
    # not copied out of Arrow)
    seen = np.maximum.accumulate(codes) if len(codes) else codes
    first = np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]]) if len(codes) else codes
    uniques = np.asarray(values, dtype=object)[first]
    if sort:
        order = pc.array_sort_indices(encoded.dictionary, memory_pool=TRANSIENT).to_numpy()
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        codes, uniques = rank[codes], uniques[order]
    return codes, uniques


def _factorize_with_dict(values: np.ndarray, sort: bool) -> tuple[np.ndarray, np.ndarray]:
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int64, len(values))
    uniques = np.empty(len(index), dtype=object)
    uniques[:] = list(index)
    if sort:
        order = np.argsort(uniques, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        codes, uniques = rank[codes], uniques[order]
    return codes, uniques


def encode(
    table: TableLike,
    fields: Sequence[str] | None = None,
    token_length=None,
) -> EncodedTable:
    """Render and code `fields` of `table`. `token_length(str) -> int`, when given, measures
    value lengths in tokens instead of characters."""
    names = resolve_fields(table, fields)
    n = num_rows(table)
    codes = np.empty((n, len(names)), dtype=np.int32)
    uniques, lengths = [], []
    for j, name in enumerate(names):
        col_codes, col_uniques = factorize_strings(rendered_column(table, name), sort=True)
        codes[:, j] = col_codes
        measure = len if token_length is None else token_length
        uniques.append(col_uniques)
        lengths.append(np.fromiter((measure(s) for s in col_uniques), float, len(col_uniques)))
    return EncodedTable(tuple(names), codes, tuple(uniques), tuple(lengths))
