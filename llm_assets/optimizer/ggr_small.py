"""GGR's greedy on small sub-tables, in plain Python (`llm_assets.optimizer.ggr` holds the
algorithm, its array path for larger sub-tables and the run's output): a sub-table of at most
`ggr.SMALL_NODE` rows, where numpy's per-call cost would dominate.

The greedy choice is the array path's (the best HITCOUNT, ties to the earlier field's smaller
value); a field whose values are all distinct in a sub-table is not counted again below it;
two rows are placed at once (`_pair`: their agreeing fields lead). A sub-table of at most
`EXACT_ROWS` rows gets the PHC optimum (`leaf.exact_runs`) when no early stop is set and its
search fits `leaf.MAX_CELLS`; what stays ungrouped is sorted in the leftover order.

`SmallNodes` is a mixin of `ggr._Greedy`: it reads the run's state (`units`, `config`,
`threshold`, `exact`, `rank`, `row_lists`, `weight_lists`) and emits through the run's output
methods (`_emit`, `_segment`, `_sort_segments`, `_lead`, `_stopped`).
"""

from __future__ import annotations

# Counter's own C counting loop, without the constructor's type checks: ~2 us less per
# call, and the small-node greedy counts tens of thousands of short columns.
from collections import _count_elements
from operator import itemgetter

from llm_assets.optimizer.leaf import exact_runs

EXACT_ROWS = 8
"""Sub-tables with at most this many rows are solved exactly (`leaf.exact_runs`)."""


class SmallNodes:
    """The pure-Python path of one GGR run (see the module docstring)."""

    def _weights(self, u: int) -> list[float]:
        if self.weight_lists[u] is None:
            self.weight_lists[u] = self.units.weights[u].tolist()
        return self.weight_lists[u]

    def solve_small(self, rows: list[int], rest: list[int], prefix: tuple[int, ...], depth: int):
        cells = itemgetter(*rest)
        table = [cells(self.row_lists[r]) for r in rows]
        cols = list(range(len(rest)))
        self._small(list(zip(rows, table, strict=True)), cols, cols, rest, prefix, depth)

    def _small(self, items, cols: list[int], live: list[int], rest: list[int], prefix, depth):
        """items: (row, codes over `rest`); cols: positions in that tuple still free; live:
        those of `cols` that may still hold a repeated value (a field whose values are all
        distinct in a sub-table is so in every part of it). The greedy, until at most
        `EXACT_ROWS` rows are left: those are solved exactly."""
        if len(items) == 2 and self.config.max_depth is None:
            self._pair(items, cols, rest, prefix)
            return
        node_start, segments = len(self.out_rows), []
        while len(items) > 1 and len(cols) > 1 and not self._stopped(depth):
            start = len(self.out_rows)
            if (
                len(items) <= EXACT_ROWS
                and self.exact
                and len(live) > 1
                and self._exact(items, cols, live, rest, prefix)
            ):
                segments.append(self._segment(start))
                items = []
                break
            best_s, best_c, best_v, live = self._best_value(items, live, rest)
            if best_c < 0:
                break
            group = [it for it in items if it[1][best_c] == best_v]
            items = [it for it in items if it[1][best_c] != best_v]
            first = group[0][1]
            # A field constant over 2+ rows repeats a value: it is among `live`.
            same = [c for c in live if c != best_c and all(it[1][c] == first[c] for it in group)]
            free = [c for c in cols if c != best_c and c not in same]
            lead = self._lead([rest[c] for c in [best_c, *same]], group[0][0])
            self._small(group, free, [c for c in live if c in free], rest, prefix + lead, depth + 1)
            segments.append(self._segment(start))
        self._sort_segments(node_start, segments)
        cols = sorted(cols, key=lambda c: self.rank[rest[c]])
        if len(items) > 1 and cols:
            key = itemgetter(*cols)
            items.sort(key=lambda it: key(it[1]))
        if items:
            self._emit([row for row, _ in items], prefix + tuple(rest[c] for c in cols))

    def _best_value(self, items, live: list[int], rest: list[int]):
        """(HITCOUNT, c, v) of the best value among the `live` positions, ties to the earlier
        field's smaller value, and the positions of `live` holding a repeated value."""
        best_s, best_c, best_v = self.threshold, -1, -1
        columns = list(zip(*[vals for _, vals in items], strict=True))
        repeated = []
        for c in live:
            counts: dict[int, int] = {}
            _count_elements(counts, columns[c])
            if len(counts) == len(items):
                continue
            repeated.append(c)
            w = self._weights(rest[c])
            for v, n in counts.items():
                if n > 1:
                    s = w[v] * (n - 1)
                    if s > best_s or (s == best_s and c == best_c and v < best_v):
                        best_s, best_c, best_v = s, c, v
        return best_s, best_c, best_v, repeated

    def _exact(self, items, cols: list[int], live: list[int], rest: list[int], prefix) -> bool:
        """Emit the PHC optimum of a small sub-table (`leaf.exact_runs` over the `live`
        positions; the others earn nothing): each row led by the cells of its runs, then its
        other fields in leftover order. False (nothing emitted) where the sub-table is beyond
        `leaf.MAX_CELLS`."""
        searched = [rest[c] for c in live]
        columns = list(zip(*[vals for _, vals in items], strict=True))
        found = exact_runs([columns[c] for c in live], list(map(self._weights, searched)))
        if found is None:
            return False
        ranked = sorted((rest[c] for c in cols), key=self.rank.__getitem__)
        batch: list[int] = []
        last, order = None, prefix
        for k, lead in found[1]:
            if lead != last:
                if batch:
                    self._emit(batch, order)
                batch, last = [], lead
                head = tuple(searched[c] for c in lead)
                order = prefix + head + tuple(u for u in ranked if u not in head)
            batch.append(items[k][0])
        self._emit(batch, order)
        return True

    def _pair(self, items, cols: list[int], rest: list[int], prefix) -> None:
        """Two rows: the greedy takes all their agreeing fields (led as `_lead` orders them),
        then the free fields in leftover order. Same PHC, no loop."""
        (row_a, a), (row_b, b) = items
        shared = [c for c in cols if a[c] == b[c] and self._weights(rest[c])[a[c]] > self.threshold]
        free = sorted((c for c in cols if c not in shared), key=lambda c: self.rank[rest[c]])
        if [a[c] for c in free] > [b[c] for c in free]:
            row_a, row_b = row_b, row_a
        lead = self._lead([rest[c] for c in shared], row_a)
        self._emit([row_a, row_b], prefix + lead + tuple(rest[c] for c in free))
