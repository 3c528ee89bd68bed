"""The GGR authors' QuickGreedy, ported: a candidate of `reorder`'s safety net (on tables
small enough, `optimizer.reorder`) and the baseline `benchmarks.reorder` measures.

Written from the paper (ggr_mlsys.txt, section 2.2) and the published behaviour of their
harness's `QuickGreedy.reorder` (defaults as their benchmarks run it), not copied:

1. Optional column merge: each given group of columns becomes one column whose value is the
   members' values joined by "|", members ordered by the column statistics; merged columns
   go after the others.
2. Column statistics (their score): mean(len(value)^2) x (rows / distinct - 1), stable sort,
   highest first. Columns with more than `distinct_value_threshold` x rows distinct values
   (0.7) are set aside and appended to every row after the recursed fields, in that order.
3. The recursed fields are put in statistics order and the rows sorted lexicographically
   (their `fixed_reorder`), then cut into halves until each piece has at most `base` rows
   (2,000); each piece is reordered on its own (they run the pieces in separate processes).
4. In a piece (their `recursive_reorder`): count every cell value over all fields together
   (a value is its text, whatever its field); pick the value v maximising
   len(v)^2 x (count - 1), ties to the value met first reading rows in order, cells in their
   current order; a pick below `early_stop` (0) ends the piece in statistics order. Every row
   holding v moves its cells equal to v to the front (in current order); their first cell
   is dropped and the remaining cells of that group are reordered the same way (column
   recursion); then the rows without v are reordered the same way (row recursion). A pick
   of score 0 still recurses (it peels the first row), as theirs does. Depth limits
   `row_stop` / `col_stop` send what is left at that depth to statistics order; their
   defaults (the table's rows and columns) never bind, which None stands for here.
5. Finally every row's cell list (recursed cells in their new order, then the set-aside
   fields) is sorted lexicographically as a whole: that is the row order.

Differences that do not change the schedule: counts are updated as groups leave instead of
recounted, a heap finds the maximum, and the rows holding each text are indexed once per
call (`_Alive`) instead of every row left being read at each pick, and a single row is
solved in a loop (`_one_row`) instead of a recursion (same schedules as the original port on
373 tables of `benchmarks.lib.shapes`, random ones and movies_small, and on six of the
benchmark's tables). Cells are the rendered strings of
`llm_assets.optimizer.table` (their harness compares pandas values; for the string tables
here that is the same). One-way dependencies (their experimental option) are not ported.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

import numpy as np

from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable

Cell = tuple[int, str]  # (column of the working table, text)


def _stats_order(columns: list[list[str]]) -> list[int]:
    """Their column statistics: mean(len^2) x (rows / distinct - 1), highest first, stable."""
    scores = []
    for values in columns:
        distinct = len(set(values))
        mean_sq = sum(len(v) ** 2 for v in values) / len(values) if values else 0.0
        scores.append(mean_sq * (len(values) / distinct - 1) if distinct else 0.0)
    return sorted(range(len(columns)), key=lambda c: -scores[c])


def _reached(depth: int, limit: int | None) -> bool:
    return limit is not None and depth >= limit


def _one_row(row: list[Cell]) -> None:
    """`_Piece.solve` on one row without early stop or depth limit, in place, as a loop: the
    first cell whose text scores highest within the cells from `start` on (len^2 x (count -
    1); all 0: the first cell) leads them with the cells of equal text, and the cells after
    it are solved the same way. Once the texts left are all distinct every one scores 0 and
    nothing moves any more."""
    for start in range(len(row)):
        counts: dict[str, int] = {}
        for _, text in row[start:]:
            counts[text] = counts.get(text, 0) + 1
        if len(counts) == len(row) - start:
            return
        best, top = start, -1
        for i in range(start, len(row)):
            text = row[i][1]
            score = len(text) ** 2 * (counts[text] - 1)
            if score > top:
                best, top = i, score
        value = row[best][1]
        tail = row[start:]
        row[start:] = [c for c in tail if c[1] == value] + [c for c in tail if c[1] != value]


class _Alive:
    """The rows of a `_Piece.solve` call not yet taken by a group, in row order, with the
    rows holding each text (indexed once: a row's cells change only once it is taken), so
    a group is found without reading every row left."""

    def __init__(self, rows: list[list[Cell]]):
        self.flags = [True] * len(rows)
        self.left = len(rows)
        self.first = 0
        self.holding: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            for _, text in row:
                where = self.holding.setdefault(text, [])
                if not where or where[-1] != i:
                    where.append(i)

    def __iter__(self):
        flags = self.flags
        return (i for i in range(self.first, len(flags)) if flags[i])

    def take(self, value: str) -> list[int]:
        """The rows left holding `value`, in row order; they are no longer left."""
        group = [i for i in self.holding.pop(value, ()) if self.flags[i]]
        for i in group:
            self.flags[i] = False
        self.left -= len(group)
        while self.first < len(self.flags) and not self.flags[self.first]:
            self.first += 1
        return group


class _Piece:
    """Column and row recursion of one piece. Rows are lists of cells, reordered in place."""

    def __init__(self, early_stop: float, row_stop: int | None, col_stop: int | None):
        self.early_stop = early_stop
        self.row_stop = row_stop
        self.col_stop = col_stop
        # no early stop or depth limit: a single row takes `_one_row`
        self.plain = early_stop <= 0 and row_stop is None and col_stop is None

    def solve(self, rows: list[list[Cell]], row_depth: int = 0, col_depth: int = 0) -> None:
        """Their `recursive_reorder`: each group taken is one row recursion deeper (the rows
        left after it), its tails one column recursion deeper; at a depth limit the rest
        falls back to statistics order."""
        if len(rows) == 1 and self.plain:
            _one_row(rows[0])
            return
        counts = Counter(text for row in rows for _, text in row)
        heap = [(-(len(v) ** 2) * (n - 1), v) for v, n in counts.items()]
        heapq.heapify(heap)
        alive = _Alive(rows)
        while alive.left and heap:
            if _reached(row_depth, self.row_stop) or _reached(col_depth, self.col_stop):
                self._fixed(rows, list(alive))
                return
            value, score = self._pick(rows, alive, counts, heap)
            if value is None:
                return
            if score < self.early_stop:
                self._fixed(rows, list(alive))
                return
            group = alive.take(value)
            for i in group:
                row = rows[i]
                row[:] = [c for c in row if c[1] == value] + [c for c in row if c[1] != value]
            tails = [rows[i][1:] for i in group]
            self.solve(tails, row_depth, col_depth + 1)
            row_depth += 1
            for i, tail in zip(group, tails, strict=True):
                rows[i][1:] = tail
                for _, text in rows[i]:
                    counts[text] -= 1
            for text in {text for i in group for _, text in rows[i]}:
                if counts[text] > 0:
                    heapq.heappush(heap, (-(len(text) ** 2) * (counts[text] - 1), text))

    def _pick(self, rows, alive, counts, heap) -> tuple[str | None, float]:
        """The highest-scoring value, ties to its first occurrence in row-major order."""
        while heap:
            neg, v = heap[0]
            if counts[v] > 0 and -(len(v) ** 2) * (counts[v] - 1) == neg:
                break
            heapq.heappop(heap)
        else:
            return None, 0.0
        top = heap[0][0]
        if top == 0:  # every value scores 0: the first cell read wins
            return next(row[0][1] for i in alive if (row := rows[i])), 0.0
        tied = set()
        while heap and heap[0][0] == top:
            neg, v = heapq.heappop(heap)
            if counts[v] > 0 and -(len(v) ** 2) * (counts[v] - 1) == neg:
                tied.add(v)
        chosen = next(text for i in alive for _, text in rows[i] if text in tied)
        for v in tied - {chosen}:
            heapq.heappush(heap, (top, v))
        return chosen, -top

    @staticmethod
    def _fixed(rows, alive) -> None:
        """Their fallback: positions in statistics order (rows of a piece share positions)."""
        width = len(rows[alive[0]])
        columns = [[rows[i][p][1] for i in alive] for p in range(width)]
        order = _stats_order(columns)
        for i in alive:
            rows[i][:] = [rows[i][p] for p in order]


def _pieces(start: int, stop: int, base: int) -> list[tuple[int, int]]:
    """Their split: halve (first half len // 2) until a piece has at most `base` rows."""
    if stop - start <= base:
        return [(start, stop)]
    mid = start + (stop - start) // 2
    return _pieces(start, mid, base) + _pieces(mid, stop, base)


def quick_greedy(
    enc: EncodedTable,
    col_merge: Sequence[Sequence[str]] = (),
    distinct_value_threshold: float = 0.7,
    base: int = 2000,
    early_stop: float = 0.0,
    row_stop: int | None = None,
    col_stop: int | None = None,
) -> Schedule:
    """Their QuickGreedy schedule of `enc` (see the module docstring)."""
    n = enc.num_rows
    texts = [enc.uniques[j][enc.codes[:, j]].tolist() for j in range(len(enc.fields))]
    stats_all = _stats_order(texts)
    merged = {enc.fields.index(f) for group in col_merge for f in group}
    units: list[list[int]] = [[j] for j in range(len(enc.fields)) if j not in merged]
    for group in col_merge:
        members = {enc.fields.index(f) for f in group}
        units.append([j for j in stats_all if j in members])
    values = [
        texts[u[0]]
        if len(u) == 1
        else ["|".join(t) for t in zip(*(texts[j] for j in u), strict=True)]
        for u in units
    ]
    stats = _stats_order(values)
    too_distinct = {
        u for u in range(len(units)) if len(set(values[u])) > distinct_value_threshold * n
    }
    aside = [u for u in stats if u in too_distinct]
    recurse = [u for u in stats if u not in too_distinct]
    # fixed_reorder: statistics order, rows sorted (the row index breaks ties, as theirs).
    order = sorted(range(n), key=lambda r: ([values[u][r] for u in recurse], r))
    rows = [[(u, values[u][r]) for u in recurse] for r in order]
    piece = _Piece(early_stop, row_stop, col_stop)
    for start, stop in _pieces(0, n, base):
        piece.solve(rows[start:stop])  # the inner lists are shared: reordered in place
    finals = [
        [text for _, text in rows[k]] + [values[u][r] for u in aside] for k, r in enumerate(order)
    ]
    ranked = sorted(range(n), key=lambda k: finals[k])
    field_orders: dict[tuple[int, ...], int] = {}
    ids = []
    for k in ranked:
        fields = tuple(j for u, _ in rows[k] for j in units[u]) + tuple(
            j for u in aside for j in units[u]
        )
        ids.append(field_orders.setdefault(fields, len(field_orders)))
    return Schedule(
        np.asarray([order[k] for k in ranked], dtype=np.int64),
        np.asarray(ids, dtype=np.int32),
        tuple(tuple(enc.fields[j] for j in f) for f in field_orders),
        method_used="authors_ggr",
    )
