"""Upper bounds on what any schedule can reach: PHC and the character-trie hit rate.

Both are cheap (sorting and counting, no search), so a benchmark can report how close a
schedule is to the limit on tables far beyond OPHR's reach.

**PHC** (`phc_upper_bound`). A row hits cell (c, v) only if the previous row holds (c, v) too,
so the first row of the schedule holding (c, v) never hits it:
`PHC <= sum over cells of w(v) * (count(c, v) - 1)`, the table's total HITCOUNT.

**Char hit rate** (`char_hit_upper_bound`). The trie's hits are the sum over rows of the
longest common prefix (LCP) with an earlier row. Compare row i with the row j it matches,
skipping empty cells. While the cells at equal offsets are equal texts the match is aligned.
It leaves alignment at the first pair (t of i, u of j) that differs:
- if neither is a prefix of the other, the match ends inside t after LCP(t, u) <= q(t), where
  q(t) is t's largest LCP with any other value of the table (a sorted neighbour);
- if one is a proper prefix of the other, the match may run on across the misaligned cell
  boundary, but only if the next character (after the shorter one) begins a cell that can
  follow there: one of row i's cells (t shorter) or a cell of a row holding u (u shorter).
  Rows where that can happen are "ambiguous" and get their whole length as bound; in the
  others the run ends within q(t) characters of t as well.
So a clean row i hits at most (its cells whose text occurs twice or more) + max q(t) over its
cells, and over all clean rows a text t is matched at most min(clean occurrences,
occurrences - 1) times (the first row holding t has no earlier row holding it). The bound is
the smaller of the two totals for clean rows, plus the ambiguous rows' lengths. Character
sets for the "can follow" test are kept as 63-bit masks of the characters' code points modulo
63: a collision can only flag more rows as ambiguous, which keeps the bound valid.
"""

from __future__ import annotations

import numpy as np

from llm_assets.optimizer.metrics import neighbour_lcps
from llm_assets.optimizer.table import EncodedTable

__all__ = ["char_hit_upper_bound", "phc_upper_bound"]

_BUCKETS = 63


def phc_upper_bound(enc: EncodedTable) -> float:
    """Total HITCOUNT: no schedule's PHC exceeds it (see the module docstring)."""
    total = 0.0
    for j in range(len(enc.fields)):
        counts = np.bincount(enc.codes[:, j], minlength=len(enc.uniques[j]))
        total += float((enc.lengths[j] ** 2 * np.maximum(counts - 1, 0)).sum())
    return total


def _bit(ch: str) -> int:
    return 1 << (ord(ch) % _BUCKETS)


def _global_ids(enc: EncodedTable) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct texts over all fields, per-cell index into them)."""
    texts = np.unique(np.concatenate([np.asarray(u, dtype=object) for u in enc.uniques]))
    ids = np.empty(enc.codes.shape, dtype=np.int64)
    for j, uniq in enumerate(enc.uniques):
        ids[:, j] = np.searchsorted(texts, uniq)[enc.codes[:, j]]
    return texts, ids


def char_hit_upper_bound(enc: EncodedTable) -> float:
    """An upper bound on `metrics.char_hit_rate` over every schedule of `enc`'s rows and
    fields (lengths in characters; see the module docstring for the argument)."""
    texts, ids = _global_ids(enc)
    n_texts = len(texts)
    length = np.fromiter(map(len, texts), dtype=np.int64, count=n_texts)
    first = np.array([_bit(t[0]) if t else 0 for t in texts], dtype=np.int64)
    row_chars = length[ids].sum(axis=1)
    total = int(row_chars.sum())
    if total == 0:
        return 0.0
    # q(t): largest LCP with another text (one of the two sorted neighbours).
    adjacent = neighbour_lcps(texts)
    q = np.zeros(n_texts, dtype=np.int64)
    if n_texts > 1:
        q[:-1] = adjacent
        q[1:] = np.maximum(q[1:], adjacent)
    # Proper-prefix pairs (u, t): u is a proper prefix of t; a stack walk over sorted texts.
    pairs: list[tuple[int, int, int]] = []  # (u, t, bit of t[len(u)])
    stack: list[int] = []
    for k in range(n_texts):
        t = texts[k]
        while stack and not t.startswith(texts[stack[-1]]):
            stack.pop()
        pairs.extend((u, k, _bit(t[length[u]])) for u in stack if length[u] > 0)
        stack.append(k)
    # Character masks: what row i's cells start with; what can follow in rows holding u.
    row_mask = np.bitwise_or.reduce(first[ids], axis=1)
    held_mask = np.zeros(n_texts, dtype=np.int64)
    np.bitwise_or.at(held_mask, ids.ravel(), np.repeat(row_mask, ids.shape[1]))
    shorter_in_i = np.zeros(n_texts, dtype=np.int64)  # t prefix of u: bits of u[len(t)]
    longer_in_i = np.zeros(n_texts, dtype=bool)  # u prefix of t, and t[len(u)] can follow u
    for u, t, bit in pairs:
        shorter_in_i[u] |= bit
        if held_mask[u] & bit:
            longer_in_i[t] = True
    ambiguous = ((shorter_in_i[ids] & row_mask[:, None]) != 0).any(axis=1)
    ambiguous |= longer_in_i[ids].any(axis=1)
    clean = ~ambiguous
    # Clean rows: per-row bound and per-text bound.
    occurrences = np.bincount(ids.ravel(), minlength=n_texts)
    shared = np.where(occurrences[ids] > 1, length[ids], 0).sum(axis=1)
    partial = q[ids].max(axis=1)
    per_row = np.minimum(row_chars, shared + partial)[clean].sum()
    clean_occ = np.bincount(ids[clean].ravel(), minlength=n_texts)
    per_text = (length * np.minimum(clean_occ, np.maximum(occurrences - 1, 0))).sum()
    per_text += partial[clean].sum()
    bound = min(per_row, per_text) + row_chars[ambiguous].sum()
    return min(1.0, float(bound) / total)
