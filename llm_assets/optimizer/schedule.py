"""A request schedule: the order rows are sent in and, per row, the order of its fields.

Conceptually a list of `(row_index, [field, ...])`. `Schedule` stores it compactly (a row
array plus an index into a few distinct field orders) and still behaves as that list, so
plain lists of pairs and `Schedule` objects are accepted interchangeably everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Pairs = Sequence[tuple[int, Sequence[str]]]


@dataclass(frozen=True, eq=False)
class Schedule(Sequence):
    """Invariant: `len(rows) == len(order_ids)`; `orders[order_ids[k]]` is the field order of
    the k-th scheduled row `rows[k]`."""

    rows: np.ndarray
    order_ids: np.ndarray
    orders: tuple[tuple[str, ...], ...]
    method_used: str = ""
    """Which method produced it, when a method chose among candidates (`reorder`'s "ggr")."""

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return int(self.rows[k]), list(self.orders[self.order_ids[k]])

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        orders = [list(o) for o in self.orders]
        for row, oid in zip(self.rows.tolist(), self.order_ids.tolist(), strict=True):
            yield row, list(orders[oid])

    def to_pairs(self) -> list[list]:
        """JSON-ready `[[row_index, [field, ...]], ...]`."""
        return [[row, fields] for row, fields in self]

    @classmethod
    def from_pairs(cls, pairs: Pairs | Schedule) -> Schedule:
        if isinstance(pairs, Schedule):
            return pairs
        index: dict[tuple[str, ...], int] = {}
        rows, order_ids = [], []
        for row, fields in pairs:
            rows.append(int(row))
            order_ids.append(index.setdefault(tuple(fields), len(index)))
        return cls(
            np.asarray(rows, dtype=np.int64),
            np.asarray(order_ids, dtype=np.int32),
            tuple(index),
        )

    @classmethod
    def fixed(cls, rows: Iterable[int] | np.ndarray, fields: Sequence[str]) -> Schedule:
        """Every row with the same field order."""
        rows = np.asarray(rows, dtype=np.int64)
        return cls(rows, np.zeros(len(rows), dtype=np.int32), (tuple(fields),))


def validate_schedule(schedule: Pairs | Schedule, n_rows: int, fields: Sequence[str]) -> None:
    """Raise ValueError unless `schedule` lists every row in [0, n_rows) exactly once and
    each row's field order is a permutation of `fields`."""
    sched = Schedule.from_pairs(schedule)
    rows = sched.rows
    if len(rows) != n_rows:
        raise ValueError(f"schedule has {len(rows)} rows, the table has {n_rows}")
    if n_rows and (rows.min() < 0 or rows.max() >= n_rows):
        bad = int(rows[(rows < 0) | (rows >= n_rows)][0])
        raise ValueError(f"row index {bad} is outside [0, {n_rows})")
    counts = np.bincount(rows, minlength=n_rows)
    if (counts != 1).any():
        dup = int(np.flatnonzero(counts > 1)[0])
        raise ValueError(f"row {dup} appears {counts[dup]} times; each row must appear once")
    expected = sorted(fields)
    for order in sched.orders:
        if sorted(order) != expected:
            raise ValueError(
                f"field order {list(order)} is not a permutation of the fields {list(fields)}"
            )
