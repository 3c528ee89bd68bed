"""Prefix-sharing metrics of a schedule (DESIGN.md section 5), one definition each.

- `char_hit_rate`: each row's cells concatenated (no separator) in its field order; rows
  inserted in schedule order into a character trie; sum over rows of the longest common
  prefix with ANY earlier row, divided by the total characters. That sum is the total length
  minus the trie's node count, and the node count does not depend on the insertion order:
  so only the per-row field orders matter, and the sum is computed as the LCPs of neighbours
  in sorted order. (`trie_hits` gives the per-row hits in schedule order.)
- `token_hit_rate`: the same over token ids in whole blocks, as vLLM's prefix cache with an
  unbounded pool counts it: a row hits the full `block_size`-token blocks its token prefix
  shares with an earlier row, never its last token; a shorter shared prefix earns nothing.
  The block size is the engine's (vLLM's `block_size`, the simulator's
  `resources.sim.block_cache.BLOCK_SIZE`): the caller passes it.
- `phc`: prefix hit count of ggr_mlsys.txt Eq. 1-2: for each row, the sum of squared cell
  lengths over the leading cells equal to the PREVIOUS row's cells at the same positions. A
  cell is a (field, value) pair: the same text in another field is not a hit.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

from llm_assets.optimizer.schedule import Pairs, Schedule, validate_schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

__all__ = [
    "char_hit_rate",
    "common_prefix_len",
    "fixed_order_hit_rates",
    "neighbour_lcps",
    "phc",
    "row_strings",
    "sorted_hits",
    "token_hit_rate",
    "validate_schedule",
]


def _encoded(table: TableLike | EncodedTable, sched: Schedule) -> EncodedTable:
    if isinstance(table, EncodedTable):
        return table
    fields = list(sched.orders[0]) if sched.orders else None
    return encode(table, fields)


def _field_positions(enc: EncodedTable, sched: Schedule) -> list[np.ndarray]:
    index = {f: j for j, f in enumerate(enc.fields)}
    return [np.array([index[f] for f in order], dtype=np.int64) for order in sched.orders]


def row_strings(
    table: TableLike | EncodedTable, schedule: Pairs | Schedule, sep: str = ""
) -> list[str]:
    """Each scheduled row's cells joined by `sep` in its field order, in schedule order."""
    sched = Schedule.from_pairs(schedule)
    enc = _encoded(table, sched)
    n, m = len(sched), len(enc.fields)
    if not m:
        return [""] * n
    positions = np.stack(_field_positions(enc, sched)) if sched.orders else np.zeros((0, m))
    if len(sched.orders) == 1:  # one field order: join columns, no 2-D gather
        columns = [enc.uniques[j][enc.codes[sched.rows, j]].tolist() for j in positions[0]]
        return list(map(sep.join, zip(*columns, strict=True)))
    if len(sched.orders) * 32 > n:  # many small orders: one 2-D gather
        cells = np.empty((enc.num_rows, m), dtype=object)
        for j in range(m):
            cells[:, j] = enc.uniques[j][enc.codes[:, j]]
        picked = cells[sched.rows[:, None], positions[sched.order_ids].astype(np.int64)]
        return list(map(sep.join, picked.tolist()))
    out = np.empty(n, dtype=object)  # few orders: each one's rows joined column-wise
    by_order = np.argsort(sched.order_ids, kind="stable")
    bounds = np.searchsorted(sched.order_ids[by_order], np.arange(len(sched.orders) + 1))
    for oid, pos in enumerate(positions.tolist()):
        at = by_order[bounds[oid] : bounds[oid + 1]]
        rows = sched.rows[at]
        columns = [enc.uniques[j][enc.codes[rows, j]].tolist() for j in pos]
        out[at] = list(map(sep.join, zip(*columns, strict=True)))
    return out.tolist()


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix (works on any sliceable sequences). Galloping then
    binary search on C-level slice comparisons: windows of 8, 16, 32... characters until one
    differs, then halving inside it; O(LCP) characters copied, O(log LCP) Python steps."""
    n = min(len(a), len(b))
    lo, width = 0, 8
    while True:  # invariant: a[:lo] == b[:lo]
        hi = min(lo + width, n)
        if a[lo:hi] != b[lo:hi]:
            break
        if hi == n:
            return n
        lo, width = hi, width * 2
    while hi - lo > 1:  # invariant: a[:lo] == b[:lo] and a[lo:hi] != b[lo:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


_BLOCK_CHARS = 1 << 22
"""Characters compared in one block by `neighbour_lcps` (bounds its memory to ~16 MB)."""


def neighbour_lcps(strings: Sequence[str], block_chars: int = _BLOCK_CHARS) -> np.ndarray:
    """`common_prefix_len(strings[k], strings[k + 1])` for every k, vectorised: consecutive
    strings go into blocks of fixed-width arrays (numpy pads them with code point 0, which
    only extends a match past the shorter string, so each LCP is capped by the shorter
    length) compared whole, row against next row (`_first_differences`: 8 characters at a
    time where the block is ASCII). O(sum over blocks of rows x the block's longest string)
    comparisons in C; a block holds as many rows as keep that product under
    `block_chars` (at least 2, so each pair meets in some block)."""
    n = len(strings)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    lcp = np.minimum(lengths[:-1], lengths[1:]) if n > 1 else np.zeros(0, dtype=np.int64)
    start = 0
    while start < n - 1:
        widest = np.maximum.accumulate(lengths[start : start + block_chars])
        fits = np.arange(1, len(widest) + 1) * np.maximum(widest, 1) <= block_chars
        stop = start + max(2, int(fits.sum()))  # `fits` is a prefix of trues
        first = _first_differences(strings[start:stop])
        lcp[start : stop - 1] = np.minimum(lcp[start : stop - 1], first)
        start = stop - 1
    return lcp


def _first_differences(strings: Sequence[str]) -> np.ndarray:
    """Index of the first differing character of each neighbour pair in the fixed-width
    array of `strings` (its width where none differs). ASCII blocks go as bytes compared 8
    at a time (the first differing word, then its lowest differing byte: little-endian);
    others as UTF-32 code points."""
    if not any(strings):
        return np.zeros(len(strings) - 1, dtype=np.int64)
    if all(map(str.isascii, strings)):
        width = -(-max(map(len, strings)) // 8)
        block = np.array(list(map(str.encode, strings)), dtype=f"S{8 * width}")
        words, unit = block.view("<u8").reshape(len(block), width), 8
    else:
        block = np.array(strings, dtype=str)
        width = block.dtype.itemsize // 4
        words, unit = block.view(np.uint32).reshape(len(block), width), 1
    differ = words[:-1] != words[1:]
    found = differ.any(axis=1)
    word = differ.argmax(axis=1)
    first = np.where(found, word * unit, width * unit)
    if unit > 1:
        rows = np.flatnonzero(found)
        xor = words[rows, word[rows]] ^ words[rows + 1, word[rows]]
        low = xor & (~xor + np.uint64(1))  # lowest set bit: the first differing byte
        first[rows] += (np.frexp(low.astype(np.float64))[1] - 1) // 8
    return first


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


def sorted_hits(strings: Sequence[str]) -> int:
    """Sum over `strings` of the longest common prefix with any earlier one, in any insertion
    order: the LCPs of neighbours in sorted order (see the module docstring)."""
    return int(neighbour_lcps(sorted(strings)).sum())


def char_hit_rate(table: TableLike | EncodedTable, schedule: Pairs | Schedule) -> float:
    """Character-trie prefix hit rate of `schedule` over `table` (0.0 for no characters)."""
    strings = row_strings(table, schedule)
    total = sum(map(len, strings))
    return sorted_hits(strings) / total if total else 0.0


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
    total_per_row = sum(
        cells.sizes[cells.offsets[j] + enc.codes[:, j]] for j in range(len(enc.fields))
    )
    total = int(np.sum(total_per_row))
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
    positions = np.stack(_field_positions(enc, schedule))[schedule.order_ids]
    total = int(
        cells.sizes[cells.offsets[positions] + enc.codes[schedule.rows[:, None], positions]].sum()
    )
    return cell_sorted_hits(cells, schedule.rows, positions) / total if total else 0.0


class CellTexts:
    """The distinct cells of `enc` (value `offsets[j] + code` of field j) as one buffer of
    characters, for `cell_sorted_hits`: their texts, lengths, and the buffer read as
    overlapping 64-bit words (one starting at each character: 8 ASCII characters, or 2
    UTF-32 code points), with 8 zero bytes after the last."""

    def __init__(self, enc: EncodedTable):
        self.offsets = np.cumsum([0] + [len(u) for u in enc.uniques]).astype(np.int64)
        self.texts = np.concatenate(enc.uniques) if enc.uniques else np.zeros(0, dtype=object)
        self.sizes = np.fromiter(map(len, self.texts), dtype=np.int64, count=len(self.texts))
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.sizes32 = self.sizes.astype(np.int32)  # for rows x fields arrays
        text = "".join(self.texts)
        if text.isascii():
            raw, unit = text.encode("ascii"), 1
        else:
            raw, unit = text.encode("utf-32-le", "surrogatepass"), 4
        raw += bytes(8)
        self.per_word = 8 // unit
        count = (len(raw) - 8) // unit + 1
        self.words = np.ndarray((count,), dtype="<u8", buffer=raw, strides=(unit,))
        self.unit = unit
        self.enc = enc
        self._ranks: np.ndarray | None = None
        self._sorted: np.ndarray | None = None

    def ranks(self) -> np.ndarray:
        """Each cell's rank among all cells' texts in string order (ties broken by id)."""
        if self._ranks is None:
            order = np.argsort(self.texts, kind="stable")
            self._ranks = np.empty(len(self.texts), dtype=np.int64)
            self._ranks[order] = np.arange(len(order))
        return self._ranks

    def ranks_bound(self, positions: np.ndarray) -> np.ndarray:
        """Per cell position, a bound on its keys: the field's distinct values (one order,
        keys are codes) or all cells (keys are `ranks`)."""
        if positions.ndim == 1:
            return np.asarray([len(self.enc.uniques[j]) for j in positions.tolist()])
        return np.full(positions.shape[1], len(self.texts))

    def sorted_texts(self, positions: np.ndarray, j: int) -> np.ndarray:
        """The texts that keys at cell position j rank, in key order: its field's values
        (one order for all rows: `positions` 1-D, keys are codes) or all cells (`ranks`)."""
        if positions.ndim == 1:
            return self.enc.uniques[int(positions[j])]
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
            x = xor[np.flatnonzero(found), word]
            low = x & (~x + np.uint64(1))  # lowest set bit: the first differing byte
            byte = (np.frexp(low.astype(np.float64))[1] - 1) // 8
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
    building them. The rows are sorted by their cells (each cell's text rank in string
    order); neighbours share their equal leading cells whole and, at the first differing
    cell, those two texts' common prefix (`CellTexts.common_prefixes`). That is the string
    order and its neighbour LCPs wherever each neighbour pair's first differing texts are
    not one a prefix of the other: then each pair is in string order, so all are. Where
    one is (or they are equal texts of two fields), the rows sharing the cells before it
    whose text there starts with the shorter one are sorted and compared as strings, from
    the first cell they do not all share (`neighbour_lcps`; `_regions`); their neighbours
    outside compare the same with each of them."""
    enc = cells.enc
    n, m = len(rows), len(enc.fields)
    if n < 2 or not m:
        return 0
    if positions.ndim == 1:  # one order: a field's codes are its texts' ranks
        keys = enc.codes[rows][:, positions]
        ids = cells.offsets[positions] + keys
    else:
        ids = cells.offsets[positions] + enc.codes[rows[:, None], positions]
        keys = cells.ranks()[ids]
    order = _lexsort_rows(keys, cells.ranks_bound(positions))
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
    loose = common == np.minimum(cells.sizes[first], cells.sizes[second])
    if not loose.any():
        return int(lcp.sum())
    lo, hi = _regions(lead, differ[loose], keys[order], lambda j: cells.sorted_texts(positions, j))
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
    picked = ids[rows_in]
    columns = []
    for k in range(m):
        column = cells.texts[picked[:, k]]
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


def token_hit_rate(
    texts: Sequence[str], tokenize: Callable[[str], Sequence[int]], block_size: int
) -> float:
    """Share of the prompt tokens of `texts` (sent in this order) that an unbounded prefix
    cache of the engine's `block_size`-token blocks serves (see the module docstring); 0.0
    for none."""
    ids = [tuple(tokenize(t)) for t in texts]
    blocks = [
        tuple(seq[k : k + block_size] for k in range(0, len(seq) - block_size + 1, block_size))
        for seq in ids
    ]
    total = sum(map(len, ids))
    if not total:
        return 0.0
    hits = trie_hits(blocks)
    cap = [(len(seq) - 1) // block_size if seq else 0 for seq in ids]
    return sum(map(min, hits, cap)) * block_size / total


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
