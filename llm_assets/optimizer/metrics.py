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

from collections.abc import Callable, Sequence

import numpy as np

from llm_assets.optimizer.schedule import Pairs, Schedule, validate_schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

__all__ = [
    "char_hit_rate",
    "common_prefix_len",
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
        first[rows] += first_differing_byte(words[rows, word[rows]] ^ words[rows + 1, word[rows]])
    return first


def first_differing_byte(xor: np.ndarray) -> np.ndarray:
    """Per nonzero XOR of two little-endian 64-bit words, the index (0-7) of their first
    differing byte: that of the lowest set bit."""
    low = xor & (~xor + np.uint64(1))  # the lowest set bit alone
    return (np.frexp(low.astype(np.float64))[1] - 1) // 8


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
