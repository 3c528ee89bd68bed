"""The safety net's char hit rates scored by cells (`cell_sorted_hits`), not by joining
each row's cells into a string: the same totals as `metrics.char_hit_rate` (see its module
docstring: only the rows' field orders matter), from rows sorted by their cells' text ranks,
neighbours sharing equal leading cells whole plus the common prefix of the first cells that
differ; rows under a value that is a prefix of another are joined and compared as strings.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

import numpy as np

from llm_assets.optimizer.metrics import (
    _field_positions,
    char_hit_rate,
    first_differing_byte,
    neighbour_lcps,
    sorted_hits,
)
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable

CELL_ROWS = 4_096
"""Schedules of fewer rows are scored on their joined strings (`sorted_hits`), not by
`cell_sorted_hits`: on 1-2k-row tables (movies_small, rt_movies) numpy's per-call cost made
that up to 2x slower, from 6k rows (squad_v2_dev_half) it is faster."""


def fixed_order_hit_rates(
    enc: EncodedTable, orders: Sequence[Sequence[int]], cells: CellTexts | None = None
) -> list[float]:
    """`char_hit_rate` of a schedule in which every row takes the field order `orders[i]`
    (field indices), for each i, by `cell_sorted_hits` (below `CELL_ROWS` rows, on the
    joined strings): the rate does not depend on the row order (module docstring), so no
    schedule is needed and the rows are taken in file order."""
    if enc.num_rows < CELL_ROWS:  # numpy's per-call cost dominates: join the strings
        columns = [enc.uniques[j][enc.codes[:, j]].tolist() for j in range(len(enc.fields))]
        rates = []
        for order in orders:
            strings = list(map("".join, zip(*(columns[j] for j in order), strict=True)))
            total = sum(map(len, strings))
            rates.append(sorted_hits(strings) / total if total else 0.0)
        return rates
    cells = cells or CellTexts(enc)
    rows = np.arange(enc.num_rows, dtype=np.int64)
    total = int(cells.row_chars().sum())
    rates = []
    for order in orders:
        hits = cell_sorted_hits(cells, rows, np.asarray(order, dtype=np.int64))
        rates.append(hits / total if total else 0.0)
    return rates


def schedule_hit_rate(
    enc: EncodedTable, schedule: Schedule, cells: CellTexts | None = None
) -> float:
    """`char_hit_rate(enc, schedule)` by `cell_sorted_hits` (below `CELL_ROWS` rows, by
    `char_hit_rate` itself)."""
    if len(schedule) < CELL_ROWS:
        return char_hit_rate(enc, schedule)
    cells = cells or CellTexts(enc)
    if not enc.fields or not len(schedule):
        return 0.0
    positions = np.stack(_field_positions(enc, schedule))
    used = np.unique(schedule.order_ids)
    # rows of one field order keep the cheaper path of one order (keys are codes)
    positions = positions[used[0]] if len(used) == 1 else positions[schedule.order_ids]
    total = int(cells.row_chars()[schedule.rows].sum())
    return cell_sorted_hits(cells, schedule.rows, positions) / total if total else 0.0


class CellTexts:
    """The distinct cells of `enc` (value `offsets[j] + code` of field j) as one buffer of
    characters, for `cell_sorted_hits`: their texts, lengths, and the buffer read as
    overlapping 64-bit words (one starting at each character: 8 ASCII characters, or 2
    UTF-32 code points), with 8 NUL characters after the last."""

    def __init__(self, enc: EncodedTable):
        self.offsets = np.cumsum([0] + [len(u) for u in enc.uniques]).astype(np.int64)
        self.texts = np.concatenate(enc.uniques) if enc.uniques else np.zeros(0, dtype=object)
        self.sizes = np.fromiter(map(len, self.texts), dtype=np.int64, count=len(self.texts))
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.sizes32 = self.sizes.astype(np.int32)  # for rows x fields arrays
        self.has_empty = bool((self.sizes == 0).any())
        text = "".join(itertools.chain(self.texts, ["\0" * 8]))  # no copy to pad it
        if text.isascii():
            raw, unit = text.encode("ascii"), 1
        else:
            raw, unit = text.encode("utf-32-le", "surrogatepass"), 4
        del text
        self.per_word = 8 // unit
        count = len(raw) // unit - 7  # a word at each character and just past the last
        self.words = np.ndarray((count,), dtype="<u8", buffer=raw, strides=(unit,))
        self.unit = unit
        self.enc = enc
        self._ranks: np.ndarray | None = None
        self._sorted: np.ndarray | None = None
        self._row_chars: np.ndarray | None = None

    def row_chars(self) -> np.ndarray:
        """Each table row's characters, all fields (in any order)."""
        if self._row_chars is None:
            self._row_chars = np.zeros(self.enc.num_rows, dtype=np.int64)
            for j in range(len(self.enc.fields)):
                self._row_chars += self.sizes[self.offsets[j] + self.enc.codes[:, j]]
        return self._row_chars

    def ranks(self) -> np.ndarray:
        """Each cell's rank among all cells' texts in string order (ties broken by id)."""
        if self._ranks is None:
            order = np.argsort(self.texts, kind="stable")
            self._ranks = np.empty(len(self.texts), dtype=np.int64)
            self._ranks[order] = np.arange(len(order))
        return self._ranks

    def ranks_bound(self, fields: np.ndarray | None, m: int) -> np.ndarray:
        """Per cell position (of `m`), a bound on its keys: its field's distinct values
        (`fields`: the one field order, keys are codes) or all cells (None: keys are
        `ranks`)."""
        if fields is not None:
            return np.asarray([len(self.enc.uniques[j]) for j in fields.tolist()])
        return np.full(m, len(self.texts))

    def sorted_texts(self, fields: np.ndarray | None, j: int) -> np.ndarray:
        """The texts that keys at cell position j rank, in key order: its field's values
        (`fields`: the one field order, keys are codes) or all cells (None: `ranks`)."""
        if fields is not None:
            return self.enc.uniques[int(fields[j])]
        if self._sorted is None:
            self._sorted = np.empty(len(self.texts), dtype=object)
            self._sorted[self.ranks()] = self.texts
        return self._sorted

    def common_prefixes(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """`common_prefix_len` of the texts of cells `first[k]` and `second[k]`, galloping:
        1, 2, 4... words at once from where a pair is still equal, until a word differs
        (the first differing character: the lowest set bit of the words' XOR) or the
        shorter text ends."""
        cap = np.minimum(self.sizes[first], self.sizes[second])
        lcp = cap.copy()
        at_a, at_b = self.starts[first], self.starts[second]
        active = np.flatnonzero(cap > 0)
        lo, count, last = 0, 1, len(self.words) - 1
        while len(active):
            step = lo + np.arange(count, dtype=np.int64) * self.per_word
            a = np.minimum(at_a[active][:, None] + step, last)  # clipped: past every cap
            xor = self.words[a] ^ self.words[np.minimum(at_b[active][:, None] + step, last)]
            differ = xor != 0
            found = differ.any(axis=1)
            word = differ.argmax(axis=1)[found]
            byte = first_differing_byte(xor[np.flatnonzero(found), word])
            done = active[found]
            lcp[done] = np.minimum(cap[done], lo + word * self.per_word + byte // self.unit)
            lo += count * self.per_word
            active = active[~found]
            active = active[cap[active] > lo]
            count *= 2
        return lcp


def cell_sorted_hits(cells: CellTexts, rows: np.ndarray, positions: np.ndarray) -> int:
    """`sorted_hits` of the strings joining the cells of table rows `rows[k]` in the field
    order `positions[k]` (field indices; one order for all rows if 1-D), mostly without
    building them. Empty cells add nothing to a string: a row with one before a cell that
    is not empty has its cells moved (stably) so that they end it. The rows are sorted by
    their cells (each cell's text rank in string order); neighbours share their equal
    leading cells whole and, at the first differing cell, those two texts' common prefix
    (`CellTexts.common_prefixes`). That is the string order and its neighbour LCPs wherever
    each neighbour pair's first differing texts are not one a prefix of the other, or the
    shorter is empty (its row's text ends there): then each pair is in string order, so all
    are. Where one is (or they are equal texts of two fields), the rows sharing the cells
    before it whose text there starts with the shorter one are sorted and compared as
    strings, from the first cell they do not all share (`neighbour_lcps`; `_regions`);
    their neighbours outside compare the same with each of them."""
    enc = cells.enc
    n, m = len(rows), len(enc.fields)
    if n < 2 or not m:
        return 0
    codes = enc.codes[rows[:, None], positions]
    ids = cells.offsets[positions] + codes
    # one order for all rows: a field's codes are its texts' ranks
    fields = positions if positions.ndim == 1 else None
    keys = codes if fields is not None else None
    del codes
    if cells.has_empty:
        # An empty cell adds nothing to a row's text: where one comes before a cell that
        # is not empty, the row's cells move (stably) so that its empty cells end it.
        empty = cells.sizes[ids] == 0
        move = np.flatnonzero((empty[:, :-1] & ~empty[:, 1:]).any(axis=1))
        if len(move):
            taken = np.argsort(empty[move], axis=1, kind="stable")
            ids[move] = np.take_along_axis(ids[move], taken, axis=1)
            fields = None  # a position holds cells of several fields
        del empty, move
    if fields is None:
        keys = cells.ranks()[ids]
    order = _lexsort_rows(keys, cells.ranks_bound(fields, m))
    ids = ids[order]
    equal = ids[1:] == ids[:-1]
    lead = np.where(equal.all(axis=1), m, equal.argmin(axis=1))  # first differing cell
    del equal
    shared = np.zeros((n - 1, m + 1), dtype=np.int32)  # a row's first cells' characters
    np.cumsum(cells.sizes32[ids[:-1]], axis=1, out=shared[:, 1:])
    lcp = shared[np.arange(n - 1), lead].astype(np.int64)  # the equal leading cells
    del shared
    differ = np.flatnonzero(lead < m)
    at = lead[differ]
    first, second = ids[differ, at], ids[differ + 1, at]
    common = cells.common_prefixes(first, second)
    lcp[differ] += common
    shorter = np.minimum(cells.sizes[first], cells.sizes[second])
    loose = (common == shorter) & (shorter > 0)  # an empty cell there ends its row's text
    if not loose.any():
        return int(lcp.sum())
    lo, hi = _regions(lead, differ[loose], keys[order], lambda j: cells.sorted_texts(fields, j))
    mark = np.zeros(n + 1, dtype=np.int64)
    np.add.at(mark, lo, 1)
    np.add.at(mark, hi + 1, -1)
    rows_in = np.flatnonzero(np.cumsum(mark[:-1]) > 0)  # rows of the regions, in order
    # A region's rows share its pairs' first `same` cells: join the rest, add those back.
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2], bounds[1::2] = lo, hi
    same = np.minimum.reduceat(np.append(lead, m), bounds)[0::2]
    heads = np.zeros((len(lo), m + 1), dtype=np.int64)
    np.cumsum(cells.sizes[ids[lo]], axis=1, out=heads[:, 1:])
    shared_pairs = int((heads[np.arange(len(lo)), same] * (hi - lo)).sum())
    skipped = np.repeat(same, hi - lo + 1)
    first = int(same.min())  # the cells before it are shared in every region: not joined
    picked = ids[rows_in, first:]
    columns = []
    for k in range(first, m):
        column = cells.texts[picked[:, k - first]]
        column[skipped > k] = ""
        columns.append(column.tolist())
    joined = list(map("".join, zip(*columns, strict=True)))
    first_at = np.searchsorted(rows_in, lo).tolist()
    strings: list[str] = []
    for a, b in zip(first_at, [*first_at[1:], len(rows_in)], strict=True):
        strings += sorted(joined[a:b])
    pair_lcps = neighbour_lcps(strings)
    keep = np.ones(len(pair_lcps), dtype=bool)
    keep[np.asarray(first_at[1:], dtype=np.int64) - 1] = False  # pairs across two regions
    inside = np.zeros(n - 1, dtype=bool)
    inside[rows_in[:-1][np.diff(rows_in) == 1]] = True  # pairs within one region...
    inside[hi[:-1][lo[1:] == hi[:-1] + 1]] = False  # ...not across two adjacent ones
    return int(lcp[~inside].sum()) + int(pair_lcps[keep].sum()) + shared_pairs


def _lexsort_rows(keys: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """`np.lexsort(keys.T[::-1])` (rows by their keys, first column most significant,
    stable), with neighbouring columns packed into one int64 key where their key ranges
    (`bound[k]`: every key of column k is below it) multiply to under 2**62."""
    packed, key, span = [], np.zeros(len(keys), dtype=np.int64), 1
    for k in range(keys.shape[1]):
        size = max(int(bound[k]), 1)
        if span * size >= 1 << 62:
            packed.append(key)
            key, span = np.zeros(len(keys), dtype=np.int64), 1
        key = key * size + keys[:, k]
        span *= size
    packed.append(key)
    if len(packed) == 1:
        return np.argsort(packed[0], kind="stable")
    return np.lexsort(packed[::-1])


def _regions(lead, pairs, keys, texts_at) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted-row ranges lo[i]..hi[i] (inclusive, ascending) to sort as strings: for
    each pair k of `pairs` (rows k and k + 1 first differ at cell j = `lead[k]`, row k's text
    u there a prefix of row k + 1's), the rows that share the cells before j with row k and
    whose text at j starts with u (in sorted rows, a segment sharing the cells before j
    has ascending keys at j, the texts' ranks, and those starting with u are a range of
    ranks), merged where they overlap. `texts_at(j)`: the texts keys at j rank, in order."""
    n = len(keys)
    lows, highs = [], []
    for j in np.unique(lead[pairs]).tolist():
        ks = pairs[lead[pairs] == j]
        sorted_texts = texts_at(j)
        segment = np.zeros(n, dtype=np.int64)
        segment[np.flatnonzero(lead < j) + 1] = 1
        segment = np.cumsum(segment)  # rows sharing the cells before j
        big = len(sorted_texts) + 1
        combined = segment * big + keys[:, j]  # ascending
        ranks = keys[ks, j]
        distinct, back = np.unique(ranks, return_inverse=True)
        ends = []
        for rank in distinct.tolist():
            prefix = sorted_texts[rank]
            end = bisect.bisect_left(sorted_texts, prefix + "\U0010ffff", rank)
            while end < len(sorted_texts) and sorted_texts[end].startswith(prefix):
                end += 1  # texts continuing with the largest code point
            ends.append(end)
        base = segment[ks] * big
        lows.append(np.searchsorted(combined, base + ranks, side="left"))
        highs.append(np.searchsorted(combined, base + np.asarray(ends)[back], side="left") - 1)
    lo, hi = np.concatenate(lows), np.concatenate(highs)
    by = np.argsort(lo, kind="stable")
    lo, hi = lo[by], hi[by]
    reach = np.maximum.accumulate(hi)
    firsts = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    ends = np.concatenate((firsts[1:], [len(lo)])) - 1
    return lo[firsts], reach[ends]
