"""GGR's greedy on small sub-tables, in plain Python (`llm_assets.optimizer.ggr` holds the
algorithm, its array path for larger sub-tables and the run's output): a sub-table of at most
`ggr.SMALL_NODE` rows, where numpy's per-call cost would dominate.

The greedy choice is the array path's (the best HITCOUNT, ties to the earlier field's smaller
value); a field whose values are all distinct in a sub-table is not counted again below it;
two rows are placed at once (`_pair`: their agreeing fields lead). A sub-table of at most
`EXACT_ROWS` rows gets the PHC optimum (`leaf.exact_runs`) when no early stop is set and its
search fits `leaf.MAX_CELLS`; in small tables a sub-table of up to `LOOKAHEAD_ROWS` rows looks
one group ahead (`_lookahead`); what stays ungrouped follows its free fields in their
`tails` order and is sorted in it.

`SmallNodes` is a mixin of `ggr._Greedy`: it reads the run's state (`units`, `config`,
`threshold`, `exact`, `lookahead`, `optima`, `rank`, `row_lists`, `weight_lists`) and emits
through the run's output methods (`_emit`, `_segment`, `_sort_segments`, `_lead`,
`_stopped`) and `tails.TailOrder` (`_tail`, `_head`).
"""

from __future__ import annotations

# Counter's own C counting loop, without the constructor's type checks: ~2 us less per
# call, and the small-node greedy counts tens of thousands of short columns.
from collections import _count_elements
from operator import itemgetter

from llm_assets.optimizer.leaf import exact_runs

EXACT_ROWS = 8
"""Sub-tables with at most this many rows are solved exactly (`leaf.exact_runs`)."""
LOOKAHEAD_ROWS = 10
"""In a table of at most `ggr.SMALL_NODE` rows, sub-tables of `EXACT_ROWS` + 1 to this many
rows choose their next group by lookahead (`_lookahead`). Not in larger tables: the 28k x
10 skewed table has 717 such sub-tables, where the lookahead raised PHC by 0.01% and made
GGR about a third slower."""


def _key(items, live: list[int]) -> tuple:
    """Names a sub-table's exact search: its rows and the positions searched."""
    return tuple(row for row, _ in items), tuple(live)


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
        live = [c for c in cols if rest[c] not in self.keys]  # keys never repeat a value
        self._small(list(zip(rows, table, strict=True)), cols, live, rest, prefix, depth)

    def _small(self, items, cols: list[int], live: list[int], rest: list[int], prefix, depth):
        """items: (row, codes over `rest`); cols: positions in that tuple still free; live:
        those of `cols` that may still hold a repeated value (a field whose values are all
        distinct in a sub-table is so in every part of it). The greedy, until at most
        `EXACT_ROWS` rows are left: those are solved exactly."""
        if len(items) == 2 and self.config.max_depth is None:
            self._pair(items, cols, rest, prefix)
            return
        node_start, segments, heads = len(self.out_rows), [], []
        while len(items) > 1 and len(cols) > 1 and not self._stopped(depth):
            start = len(self.out_rows)
            if (
                len(items) <= EXACT_ROWS
                and self.exact
                and len(live) > 1
                and self._exact(items, cols, live, rest, prefix, heads)
            ):
                segments.append(self._segment(start))
                items = []
                break
            best_s, best_c, best_v, live = self._best_value(items, live, rest)
            if best_c < 0:
                break
            if self.lookahead and EXACT_ROWS < len(items) <= LOOKAHEAD_ROWS:
                best_c, best_v = self._lookahead(items, cols, live, rest) or (best_c, best_v)
            group = [it for it in items if it[1][best_c] == best_v]
            items = [it for it in items if it[1][best_c] != best_v]
            first = group[0][1]
            # A field constant over 2+ rows repeats a value: it is among `live`.
            same = [c for c in live if c != best_c and all(it[1][c] == first[c] for it in group)]
            free = [c for c in cols if c != best_c and c not in same]
            lead = self._lead([rest[c] for c in [best_c, *same]], group[0][0])
            heads.append(self._head(lead, group[0][0]))
            self._small(group, free, [c for c in live if c in free], rest, prefix + lead, depth + 1)
            segments.append(self._segment(start))
        self._sort_segments(node_start, segments)
        position = {rest[c]: c for c in cols}
        cols = [position[u] for u in self._tail([r for r, _ in items], list(position), heads)]
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

    def _lookahead(self, items, cols: list[int], live: list[int], rest: list[int]):
        """(c, v) of the first group that does best once the group and the other rows are
        solved exactly, trying values in HITCOUNT order (ties as `_best_value`), the
        greedy's first, skipping those whose HITCOUNT bounds (`_upper`) cannot beat the
        best found; None where a part is beyond the exact search. The greedy's pick can
        spoil the rest: on random 10-row tables it reached 0.71 of the optimum where
        another value's group first reaches it."""
        columns = list(zip(*[vals for _, vals in items], strict=True))
        found = []
        for c in live:
            counts: dict[int, int] = {}
            _count_elements(counts, columns[c])
            w = self._weights(rest[c])
            found += [(-w[v] * (n - 1), c, v) for v, n in counts.items() if n > 1]
        bounded = []
        for neg, c, v in sorted(found):
            if -neg <= self.threshold:
                break
            group = [it for it in items if it[1][c] == v]
            others = [it for it in items if it[1][c] != v]
            first = group[0][1]
            same = [x for x in live if x != c and all(it[1][x] == first[x] for it in group)]
            gain = -neg + sum(self._weights(rest[x])[first[x]] for x in same) * (len(group) - 1)
            inner = [x for x in live if x != c and x not in same]
            bound = gain + self._upper(group, inner, rest) + self._upper(others, live, rest)
            bounded.append((-bound, len(bounded), gain, c, v, group, inner, others))
        best, pick = -1.0, None
        self.optima.clear()
        # The greedy's own pick first: `_exact` reuses its parts if it stays the pick.
        for negbound, _, gain, c, v, group, inner, others in bounded[:1] + sorted(bounded[1:]):
            if -negbound <= best:
                continue
            in_group, in_others = (
                self._optimum(group, inner, rest),
                self._optimum(others, live, rest),
            )
            if in_group is None or in_others is None:
                return None
            if gain + in_group + in_others > best:
                best, pick = gain + in_group + in_others, (c, v)
        return pick

    def _upper(self, items, cols: list[int], rest: list[int]) -> float:
        """Total HITCOUNT of `items` on the positions `cols`: no schedule of them earns more."""
        total = 0.0
        for c in cols:
            counts: dict[int, int] = {}
            _count_elements(counts, [vals[c] for _, vals in items])
            w = self._weights(rest[c])
            total += sum(w[v] * (n - 1) for v, n in counts.items() if n > 1)
        return total

    def _optimum(self, items, live: list[int], rest: list[int]) -> float | None:
        """The PHC optimum of `items` on the positions `live` (`_runs`, remembered for
        `_exact`), or None beyond the exact search."""
        if len(items) < 2 or not live:
            return 0.0
        found = self.optima[_key(items, live)] = self._runs(items, live, rest)
        return None if found is None else found[0]

    def _runs(self, items, live: list[int], rest: list[int]):
        """`leaf.exact_runs` of `items` on the positions `live`."""
        columns = list(zip(*[vals for _, vals in items], strict=True))
        return exact_runs([columns[c] for c in live], [self._weights(rest[c]) for c in live])

    def _exact(self, items, cols: list[int], live: list[int], rest: list[int], prefix, heads):
        """Emit the PHC optimum of a small sub-table (`leaf.exact_runs` over the `live`
        positions, or the answer a lookahead left for it; the others earn nothing): each row
        led by the cells of its runs, then its other fields in their `_tail` order (per
        run). False (nothing emitted) where the sub-table is beyond `leaf.MAX_CELLS`."""
        key = _key(items, live)
        found = self.optima.pop(key) if key in self.optima else self._runs(items, live, rest)
        if found is None:
            return False
        batches: list[tuple[tuple[int, ...], list[int]]] = []
        for k, lead in found[1]:
            if not batches or lead != batches[-1][0]:
                batches.append((lead, []))
            batches[-1][1].append(items[k][0])
        free = [rest[c] for c in cols]
        for lead, batch in batches:
            head = tuple(rest[live[c]] for c in lead)
            tail = [u for u in free if u not in head]
            if len(tail) > 1 and (len(batch) > 1 or (heads and not head)):
                tail = self._tail(batch, tail, () if head else heads)
            else:
                tail = self._ranked(tail)
            self._emit(batch, prefix + head + tuple(tail))
        return True

    def _pair(self, items, cols: list[int], rest: list[int], prefix) -> None:
        """Two rows: the greedy takes all their agreeing fields (led as `_lead` orders them),
        then the free fields in their `_tail` order. Same PHC, no loop."""
        (row_a, a), (row_b, b) = items
        shared = [c for c in cols if a[c] == b[c] and self._weights(rest[c])[a[c]] > self.threshold]
        position = {rest[c]: c for c in cols if c not in shared}
        free = [position[u] for u in self._tail([row_a, row_b], list(position))]
        if [a[c] for c in free] > [b[c] for c in free]:
            row_a, row_b = row_b, row_a
        lead = self._lead([rest[c] for c in shared], row_a)
        self._emit([row_a, row_b], prefix + lead + tuple(rest[c] for c in free))
