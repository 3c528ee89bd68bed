"""The "Cache (PSM)" baseline (llm_queries_relational.txt section 3.2-3.3).

One field order for every row, by descending column score
`avg value length x rows / distinct values` (long, repetitive columns first), then rows
sorted lexicographically on the fields in that order, so equal leading values are adjacent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode


def column_scores(enc: EncodedTable, rows: np.ndarray | None = None) -> np.ndarray:
    """Score per field over `rows` (all rows by default): avg length x rows / distinct."""
    scores = np.zeros(len(enc.fields))
    for j in range(len(enc.fields)):
        codes = enc.codes[:, j] if rows is None else enc.codes[rows, j]
        if len(codes) == 0:
            continue
        distinct = np.count_nonzero(np.bincount(codes))  # codes are small integers
        avg_len = enc.lengths[j][codes].mean()
        scores[j] = avg_len * len(codes) / distinct
    return scores


def field_order(enc: EncodedTable, rows: np.ndarray | None = None) -> list[int]:
    """Field indices by descending score; ties keep the table's column order."""
    scores = column_scores(enc, rows)
    return sorted(range(len(scores)), key=lambda j: -scores[j])


def lexicographic(enc: EncodedTable, rows: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """`rows` sorted by their values in fields `order` (first field most significant); the
    codes follow string order, so this is a string sort. Stable for equal rows."""
    if len(rows) < 2 or not order:
        return rows
    keys = [enc.codes[rows, j] for j in reversed(order)]
    return rows[np.lexsort(keys)]


def column_stats_schedule(
    table: TableLike | EncodedTable, fields: Sequence[str] | None = None
) -> Schedule:
    """Fixed field order by column statistics, rows sorted lexicographically."""
    enc = table if isinstance(table, EncodedTable) else encode(table, fields)
    order = field_order(enc)
    rows = lexicographic(enc, np.arange(enc.num_rows, dtype=np.int64), order)
    return Schedule.fixed(rows, [enc.fields[j] for j in order])
