"""Prefix-sharing metrics of a schedule (DESIGN.md section 5), one definition each.

- `char_hit_rate`: each row's cells concatenated (no separator) in its field order; rows
  inserted in schedule order into a character trie; sum over rows of the longest common
  prefix with ANY earlier row, divided by the total characters. Computed without a trie:
  the best earlier match of a string is one of its two nearest earlier-inserted neighbours
  in sorted order, found by deleting rows from a sorted linked list in reverse schedule order.
- `phc`: prefix hit count of ggr_mlsys.txt Eq. 1-2: for each row, the sum of squared cell
  lengths over the leading cells equal to the PREVIOUS row's cells at the same positions. A
  cell is a (field, value) pair: the same text in another field is not a hit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llm_assets.optimizer.schedule import Pairs, Schedule, validate_schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

__all__ = ["char_hit_rate", "phc", "row_strings", "validate_schedule", "common_prefix_len"]


def _encoded(table: TableLike | EncodedTable, sched: Schedule) -> EncodedTable:
    if isinstance(table, EncodedTable):
        return table
    fields = list(sched.orders[0]) if sched.orders else None
    return encode(table, fields)


def _field_positions(enc: EncodedTable, sched: Schedule) -> list[np.ndarray]:
    index = {f: j for j, f in enumerate(enc.fields)}
    return [np.array([index[f] for f in order], dtype=np.int64) for order in sched.orders]


def row_strings(table: TableLike | EncodedTable, schedule: Pairs | Schedule) -> list[str]:
    """Each scheduled row's cells concatenated in its field order, in schedule order."""
    sched = Schedule.from_pairs(schedule)
    enc = _encoded(table, sched)
    positions = _field_positions(enc, sched)
    uniques = enc.uniques
    out: list[str] = []
    codes = enc.codes
    for row, oid in zip(sched.rows.tolist(), sched.order_ids.tolist(), strict=True):
        r = codes[row]
        out.append("".join([uniques[j][r[j]] for j in positions[oid].tolist()]))
    return out


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search on C-level slice comparisons)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def trie_hits(strings: Sequence[str]) -> list[int]:
    """For each string, its longest common prefix with any EARLIER string of the list."""
    n = len(strings)
    if n == 0:
        return []
    order = sorted(range(n), key=strings.__getitem__)
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    # adjacent[r] = LCP(sorted[r], sorted[r + 1]); deletions merge it as a running min.
    adjacent = [
        common_prefix_len(strings[order[r]], strings[order[r + 1]]) for r in range(n - 1)
    ] + [0]
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    hits = [0] * n
    for i in range(n - 1, -1, -1):  # reverse schedule order: neighbours are all earlier rows
        r = rank[i]
        p, q = prev[r], nxt[r]
        left = adjacent[p] if p >= 0 else 0
        right = adjacent[r] if q < n else 0
        hits[i] = max(left, right)
        if p >= 0:
            adjacent[p] = min(left, right) if q < n else 0
            nxt[p] = q
        if q < n:
            prev[q] = p
    return hits


def char_hit_rate(table: TableLike | EncodedTable, schedule: Pairs | Schedule) -> float:
    """Character-trie prefix hit rate of `schedule` over `table` (0.0 for no characters)."""
    strings = row_strings(table, schedule)
    total = sum(map(len, strings))
    return sum(trie_hits(strings)) / total if total else 0.0


def phc(table: TableLike | EncodedTable, schedule: Pairs | Schedule) -> float:
    """Prefix hit count (Eq. 1-2) with squared character lengths (or the encoded lengths)."""
    sched = Schedule.from_pairs(schedule)
    enc = _encoded(table, sched)
    n = len(sched)
    if n < 2 or not enc.fields:
        return 0.0
    positions = _field_positions(enc, sched)
    m = len(enc.fields)
    cell = np.empty((n, m), dtype=np.int64)  # field * 2**32 + code: a (field, value) id
    weight = np.empty((n, m), dtype=np.float64)
    for oid, pos in enumerate(positions):
        at = np.flatnonzero(sched.order_ids == oid)
        rows = sched.rows[at]
        for k, j in enumerate(pos.tolist()):
            codes = enc.codes[rows, j].astype(np.int64)
            cell[at, k] = (j << 32) | codes
            weight[at, k] = enc.lengths[j][codes] ** 2
    same = np.cumprod(cell[1:] == cell[:-1], axis=1, dtype=np.int8).astype(bool)
    return float((weight[1:] * same).sum())
