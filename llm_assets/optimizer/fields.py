"""Per-field facts GGR computes once, before recursing: the leftover order and the
functional dependencies. (Imported by `ggr`; see its docstring for how they are used.)"""

from __future__ import annotations

import numpy as np

from llm_assets.optimizer.metrics import neighbour_lcps
from llm_assets.optimizer.table import EncodedTable

__all__ = ["detect_fds", "leftover_scores"]


def leftover_scores(enc: EncodedTable) -> np.ndarray:
    """Per field: hits (in `enc.lengths` units) it earns leading a lexicographic sort alone:
    sum over values of length x (count - 1), plus each distinct value's common prefix with
    the previous distinct value (scaled to the value's units when lengths are tokens)."""
    scores = np.zeros(len(enc.fields))
    for j, uniq in enumerate(enc.uniques):
        counts = np.bincount(enc.codes[:, j], minlength=len(uniq))
        repeats = float((enc.lengths[j] * np.maximum(counts - 1, 0)).sum())
        if len(uniq) < 2:
            scores[j] = repeats
            continue
        chars = np.fromiter(map(len, uniq[1:]), dtype=np.float64, count=len(uniq) - 1)
        shared = neighbour_lcps(uniq)
        units = np.divide(enc.lengths[j][1:], chars, out=np.zeros_like(chars), where=chars > 0)
        scores[j] = repeats + float((shared * units).sum())
    return scores


def detect_fds(enc: EncodedTable) -> list[list[str]]:
    """Groups of fields in one-to-one correspondence on this table (pairwise FD both ways).
    Fields whose values are all distinct (keys) are in no group: any two of them correspond
    trivially, they hold no repeated value to group on, and merged they would follow each
    other in one fixed order wherever they are free, where each node's rows may share the
    prefixes of one and not the other (`tails`)."""
    m = len(enc.fields)
    distinct = [len(u) for u in enc.uniques]
    keys = {j for j in range(m) if distinct[j] == enc.num_rows and enc.num_rows > 1}
    parent = list(range(m))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a in range(m):
        for b in range(a + 1, m):
            if distinct[a] != distinct[b] or a in keys or find(a) == find(b):
                continue
            pair = enc.codes[:, a].astype(np.int64) * distinct[b] + enc.codes[:, b]
            if len(np.unique(pair)) == distinct[a]:
                parent[find(b)] = find(a)
    groups: dict[int, list[str]] = {}
    for j in range(m):
        groups.setdefault(find(j), []).append(enc.fields[j])
    return [g for g in groups.values() if len(g) > 1]
