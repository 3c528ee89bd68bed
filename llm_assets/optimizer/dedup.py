"""Exact deduplication of LLM inputs (llm_queries_relational.txt section 4).

Two rows are duplicates when their rendered inputs are equal: the same strings in every
chosen field (`dedup_rows`), or the same full prompt text (`dedup_prompts`). No normalising
(case, whitespace) unless the caller does it first.
Invariant: `distinct[inverse[i]]` is the representative of original row i, and
representatives are the first occurrences, in original order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_assets.optimizer.table import (
    EncodedTable,
    TableLike,
    encode,
    factorize_strings,
    object_array,
)


@dataclass(frozen=True)
class Dedup:
    distinct: np.ndarray
    """Row index (into the original table) of each distinct input, first occurrences."""
    inverse: np.ndarray
    """For every original row, the position in `distinct` of its representative."""

    @property
    def num_duplicates(self) -> int:
        return len(self.inverse) - len(self.distinct)

    @property
    def ratio(self) -> float:
        """distinct / original (1.0 means nothing was saved)."""
        return len(self.distinct) / len(self.inverse) if len(self.inverse) else 1.0

    def expand(self, values: Sequence) -> list:
        """Map one value per distinct input back to every original row."""
        if len(values) != len(self.distinct):
            raise ValueError(f"expected {len(self.distinct)} values, got {len(values)}")
        return [values[k] for k in self.inverse.tolist()]


def _first_occurrence(labels: np.ndarray) -> Dedup:
    """`labels` numbered in first-occurrence order (as pd.factorize gives them)."""
    n_distinct = int(labels.max()) + 1 if len(labels) else 0
    first = np.full(n_distinct, len(labels), dtype=np.int64)
    np.minimum.at(first, labels, np.arange(len(labels), dtype=np.int64))
    return Dedup(first, labels.astype(np.int64))


def dedup_rows(table: TableLike | EncodedTable, fields: Sequence[str] | None = None) -> Dedup:
    """Rows equal on every chosen field (rendered) collapse to their first occurrence."""
    enc = table if isinstance(table, EncodedTable) else encode(table, fields)
    if enc.num_rows == 0:
        return Dedup(np.zeros(0, np.int64), np.zeros(0, np.int64))
    return _first_occurrence(row_labels(enc.codes, [len(u) for u in enc.uniques]))


def row_labels(codes: np.ndarray, cardinalities: Sequence[int]) -> np.ndarray:
    """One label per row of `codes` (n_rows x n_fields, field j's codes below
    `cardinalities[j]`), equal exactly for equal rows, numbered in first-occurrence order.
    Hashed field by field: each step's key (label so far x cardinality + code) is below
    n_rows x cardinality, so it never overflows int64, and nothing is sorted."""
    labels = np.zeros(len(codes), dtype=np.int64)
    for j, cardinality in enumerate(cardinalities):
        labels, _ = pd.factorize(labels * cardinality + codes[:, j].astype(np.int64))
    return labels


def dedup_prompts(prompts: Sequence[str]) -> Dedup:
    """Equal prompt strings collapse to their first occurrence."""
    if len(prompts) == 0:
        return Dedup(np.zeros(0, np.int64), np.zeros(0, np.int64))
    labels, _ = factorize_strings(object_array(prompts))
    return _first_occurrence(labels)
