"""The order of the free fields of rows GGR leaves ungrouped, scored on those rows.

Where GGR leaves rows ungrouped - a node's rows that no group took, a two-row group's
disagreeing fields, a run of an exact leaf - their free fields follow the shared prefix in
one order, and the rows are sorted in it. The character trie (the hit rate the benchmarks
report) sees only per-row field orders: after the prefix, an ungrouped row's string begins
with the first non-empty cell of its free fields. Those fields hold no repeated value worth
a group there (the greedy took those), so what the rows still share is the common prefix of
distinct texts: the sequential ids of one claim's rows ("100123", "100124"), the dates of a
movie, the entity a claim starts with. That is a property of the rows at hand, not of the
whole table the leftover order (`fields.leftover_scores`) is scored on: a 75-character JSON
column shares 6-7 characters with its sorted neighbour over 10k rows but 3 within a claim's
two rows, whose sequential ids share 5; on those rows the ids should come first.

`TailOrder._tail` takes as first field the one whose texts share the most on those rows
(`shared_prefix_sum`, the characters a trie of the texts saves), counting for a row empty in
it the text it then shows (its next non-empty field's, the others in leftover order), and
counting the first texts of the node's groups (`heads`: a row whose claim starts like a
sibling group's claim shares that start); then the same for the rows empty in that field.
Ties, and rows that share nothing, keep the leftover order. Nodes of more than `TAIL_ROWS`
rows keep it too.

Measured (char hit rate before -> after, the authors' GGR port in brackets): the claims
look-alike with a sequential id per row (`benchmarks.lib.shapes.claims_rows`, 10k rows)
43.07% -> 44.00% (44.00%), one row per movie with many empty cells (`rt_movies`, 1,560 rows)
6.96% -> 7.28% (7.00%), contributions.csv 65.12% -> 66.48% (63.0%). The price is Python work
per ungrouped node: GGR's greedy took 6-63% more CPU on the benchmark tables.

`TailOrder` is a mixin of `ggr._Greedy`: it reads the run's `rank`, `row_lists`,
`text_lists` and `ranked_units`.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_assets.optimizer.metrics import common_prefix_len

TAIL_ROWS = 64
"""Larger nodes keep the leftover order: it is the same score over all the table's rows, of
which many rows are a fair sample (scoring them changed no hit rate on the benchmark tables
and the look-alikes, and cost about 10% of GGR's time on the 28k x 10 table)."""


def _lcp(a: str, b: str) -> int:
    """Common prefix length of two texts; most differ within a few characters."""
    if not a or not b or a[0] != b[0]:
        return 0
    n = min(len(a), len(b))
    k = 1
    while k < n and k < 8 and a[k] == b[k]:
        k += 1
    return k if k < 8 or k == n else common_prefix_len(a, b)


def shared_prefix_sum(texts: list[str]) -> int:
    """Sum of common prefixes of neighbours among `texts` once sorted: the characters a
    trie of them saves (equal texts save their whole length)."""
    if len(texts) < 2:
        return 0
    texts = sorted(texts)
    return sum(map(_lcp, texts, texts[1:]))


def _first_texts(texts: dict[int, list[str]], ranked: list[int], first: int) -> list[str]:
    """Each row's first non-empty text when `first` leads and the others follow in
    `ranked` order ("" where all are empty)."""
    out = texts[first]
    if all(out):
        return out
    for u in ranked:
        if u != first:
            out = [t or other for t, other in zip(out, texts[u], strict=True)]
            if all(out):
                break
    return out


class TailOrder:
    """Free-field order of ungrouped rows, scored on the node (see the module docstring)."""

    def _tail(self, rows: Sequence[int], units: Sequence[int], heads: Sequence[str] = ()):
        """`units` in the order the `rows` should follow them, given the `heads` (texts of
        the node's groups) that their strings meet after the shared prefix. The first unit
        is the one whose order gives the rows' first non-empty texts that share the most
        (`shared_prefix_sum` with the heads: a row empty there shows its next field's text,
        the others following in leftover order); the rows empty in it are ordered the same
        way after it, meeting the heads and the first unit's texts."""
        ranked = self._ranked(units)
        n = len(rows)
        if len(ranked) < 2 or not n or n > TAIL_ROWS or n + len(heads) < 2:
            return ranked
        if n == 2 and not heads:  # the commonest case: two rows, nothing else
            a, b = (self.row_lists[r] for r in rows)
            pairs = [(texts[a[u]], texts[b[u]]) for u in ranked for texts in (self.text_lists[u],)]
            if all(x and y for x, y in pairs):
                score = [_lcp(x, y) for x, y in pairs]
                best = max(range(len(ranked)), key=score.__getitem__)
                return [ranked.pop(best), *ranked] if score[best] else ranked
        texts = self._texts(rows, ranked)
        starts = {t[:1] for found in texts.values() for t in found}
        # A head starting unlike every text of the rows shares nothing with them (sorted,
        # it never sits between two of them): it adds the same to every unit's score.
        heads, order = [t for t in heads if t[:1] in starts], []
        while len(ranked) > 1 and texts:
            score = [
                shared_prefix_sum(_first_texts(texts, ranked, u) + heads) if any(texts[u]) else 0
                for u in ranked
            ]
            best = max(range(len(ranked)), key=score.__getitem__)  # ties: leftover order
            if score[best] == 0:
                break
            u = ranked.pop(best)
            order.append(u)
            heads += [t for t in texts[u] if t]
            empty = [k for k, t in enumerate(texts[u]) if not t]
            texts = {v: [texts[v][k] for k in empty] for v in ranked} if empty else {}
        return order + ranked

    def _ranked(self, units: Sequence[int]) -> list[int]:
        """`units` in the leftover order (a new list)."""
        key = tuple(units)
        found = self.ranked_units.get(key)
        if found is None:
            found = self.ranked_units[key] = sorted(units, key=self.rank.__getitem__)
        return list(found)

    def _texts(self, rows: Sequence[int], units: Sequence[int]) -> dict[int, list[str]]:
        """Per unit, the texts of `rows` in it."""
        lists = [self.row_lists[r] for r in rows]
        out = {}
        for u in units:
            texts = self.text_lists[u]
            out[u] = [texts[vals[u]] for vals in lists]
        return out

    def _head(self, lead: Sequence[int], row: int) -> str:
        """The first non-empty text of `row` in the `lead` units: what the rows of a group
        led by them show first ("" where all are empty)."""
        vals = self.row_lists[row]
        for u in lead:
            text = self.text_lists[u][vals[u]]
            if text:
                return text
        return ""
