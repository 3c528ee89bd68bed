"""Greedy Group Recursion (ggr_mlsys.txt section 2.2, Algorithm 1, typos fixed per DESIGN.md).

At a sub-table (rows R, fields F) GGR scores every value v of every field c by
`HITCOUNT(v, c) = weight(v) * (|R_v| - 1)` with `weight(v) = len(v)^2` summed over c and the
fields functionally dependent on c; it takes the best (c, v), puts the group R_v first with c
(and its dependants) leading, recurses into R_v without c, then continues on R minus R_v.

What makes this implementation fast without changing the greedy choice:
- Functional dependencies (given, or detected: two columns whose pair has as many distinct
  values as each alone) merge into one compound field, coded once.
- Columns are integer-coded once; counts come from array operations per sub-table.
- Peeling: removing the rows of value v in field c changes no other count of c and only lowers
  counts elsewhere, so every value of c scoring at least the best score in any other field
  would be picked next anyway, in score order. All of them are taken in one round.
- Sub-tables of at most `SMALL_NODE` rows run the same greedy in plain Python; those of at
  most `LOOKAHEAD_ROWS` rows (up to `LOOKAHEAD_BUDGET` of them) choose each group by a
  rollout instead (the PHC of taking it, then finishing by the plain greedy), which sees a
  cheap group that would split a richer one.
Invariant: the result is a valid schedule (every row once, each row's fields a permutation).

Leftover fields (those not leading a group, at any level) follow in one fixed order, by
`leftover_scores`: the hits a field earns leading a sorted block on its own, i.e. each repeat
of a value hits it whole and each distinct value its common prefix with the previous one in
sorted order. This agrees with HITCOUNT (a field with neither repeats nor shared prefixes
scores 0 and goes last) where `column_stats`' avg length x rows / distinct ranks a long
all-distinct field (JSON, review text) first and hides the prefixes the fields behind it share.

Pieces (`GGRConfig.chunk_rows`, as the authors' harness does with 2,000-row pieces): the rows
are sorted in the leftover order and the greedy runs on consecutive pieces of 5,000 rows.
HITCOUNT counted over the whole table prefers a long value repeated all over (a stock phrase)
to the rows of one entity (a movie and its 300-character description), although taking the
phrase first splits every entity it touches and pays each description once per split; counted
in pieces of sorted rows, the entity's rows are together and win. Measured char hit rate,
whole-table greedy -> pieces: contributions.csv 64.8% -> 65.1%, the 16- and 12-column shapes
of benchmarks/lib/shapes.py (20k rows) 24.6% -> 28.8% and 85.6% -> 89.0%, others equal.

A group's leading fields (the chosen one and those constant in it) are ordered most frequent
value first: any order gives the same PHC, this one lets groups share leading characters.

Early stopping (section 2.2.2): `max_depth` limits nesting, `min_score` stops forming groups
worth less; what remains is ordered by the leftover order and sorted lexicographically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from llm_assets.optimizer.fields import detect_fds, leftover_scores
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

SMALL_NODE = 48
"""Sub-tables with at most this many rows use the pure-Python greedy (less overhead)."""
LOOKAHEAD_ROWS = 8
"""In sub-tables with at most this many rows, each candidate group is scored by a rollout:
the PHC of taking it first and finishing both parts by the plain greedy."""
LOOKAHEAD_BUDGET = 2_000
"""At most this many sub-tables per run get the rollout, so large tables keep their time."""


@dataclass(frozen=True)
class GGRConfig:
    """Knobs of GGR. Defaults run the full greedy to the end (no early stop)."""

    fds: Sequence[Sequence[str]] | str | None = "auto"
    """Functional dependencies as groups of mutually dependent fields; "auto" detects them,
    None uses none."""
    max_depth: int | None = None
    """Maximum number of nested groups before falling back to the leftover order."""
    min_score: float = 0.0
    """Groups whose HITCOUNT is not above this are not formed (leftover order instead)."""
    chunk_rows: int | None = 5_000
    """Rows are sorted in the leftover order and the greedy runs on consecutive pieces of at
    most this many rows (None: one greedy over the whole table); see the module docstring."""


@dataclass(frozen=True)
class _Units:
    """Fields merged along FDs. `codes[:, u]` follow string order of the members in order."""

    members: tuple[tuple[int, ...], ...]
    codes: np.ndarray
    weights: tuple[np.ndarray, ...]
    stats_order: tuple[int, ...]


def _build_units(enc: EncodedTable, fd_groups: Sequence[Sequence[str]]) -> _Units:
    index = {f: j for j, f in enumerate(enc.fields)}
    score = leftover_scores(enc)
    assigned: dict[int, int] = {}
    groups: list[list[int]] = []
    for group in fd_groups:
        unknown = [f for f in group if f not in index]
        if unknown:
            raise KeyError(f"functional dependency names unknown field(s) {unknown}")
        members = sorted({index[f] for f in group} - assigned.keys(), key=lambda j: -score[j])
        for j in members:
            assigned[j] = len(groups)
        if members:
            groups.append(members)
    groups += [[j] for j in range(len(enc.fields)) if j not in assigned]
    n = enc.num_rows
    codes = np.empty((n, len(groups)), dtype=np.int32)
    weights = []
    for u, members in enumerate(groups):
        squares = [enc.lengths[j] ** 2 for j in members]
        if len(members) == 1:
            codes[:, u] = enc.codes[:, members[0]]
            weights.append(squares[0])
            continue
        _, first, inverse = np.unique(
            enc.codes[:, members], axis=0, return_index=True, return_inverse=True
        )
        codes[:, u] = inverse.ravel()
        weights.append(sum(sq[enc.codes[first, j]] for sq, j in zip(squares, members, strict=True)))
    unit_score = [max(score[j] for j in members) for members in groups]
    order = tuple(sorted(range(len(groups)), key=lambda u: -unit_score[u]))
    return _Units(tuple(tuple(g) for g in groups), codes, tuple(weights), order)


class _Greedy:
    """One GGR run: emits (rows, unit order) blocks in schedule order."""

    def __init__(self, units: _Units, config: GGRConfig):
        self.units = units
        self.config = config
        self.threshold = max(config.min_score, 0.0)
        self.rank = {u: r for r, u in enumerate(units.stats_order)}
        self.stats_cols = list(units.stats_order)
        self.out_rows: list[int] = []
        self.out_order_ids: list[int] = []
        self.orders: dict[tuple[int, ...], int] = {}
        self.weight_lists: list[list[float] | None] = [None] * len(units.members)
        self.lookahead_left = LOOKAHEAD_BUDGET
        self.freq_lists: list[list[int] | None] = [None] * len(units.members)

    # -- output -------------------------------------------------------------------------
    def _emit(self, rows: list[int], order: tuple[int, ...]) -> None:
        oid = self.orders.setdefault(order, len(self.orders))
        self.out_rows.extend(rows)
        self.out_order_ids.extend([oid] * len(rows))

    def emit_fallback(self, rows: np.ndarray, prefix: tuple[int, ...], rest: Sequence[int]):
        """Rows ordered lexicographically under the leftover order of the free fields."""
        order = sorted(rest, key=self.rank.__getitem__)
        if len(rows) > 1 and order:
            keys = [self.units.codes[rows, u] for u in reversed(order)]
            rows = rows[np.lexsort(keys)]
        self._emit(rows.tolist(), prefix + tuple(order))

    # -- array path ---------------------------------------------------------------------
    def solve(self, rows: np.ndarray, rest: list[int], prefix: tuple[int, ...], depth: int):
        n = len(rows)
        if n <= 1 or len(rest) <= 1 or self._stopped(depth):
            self.emit_fallback(rows, prefix, rest)
            return
        if n <= SMALL_NODE:
            self.solve_small(rows.tolist(), rest, prefix, depth)
            return
        codes = self.units.codes
        inv, cnt, score, wts, cand = [], [], [], [], []
        for u in rest:
            uniq, inverse, counts = np.unique(
                codes[rows, u], return_inverse=True, return_counts=True
            )
            keep = counts > 1
            local = np.cumsum(keep) - 1
            local[~keep] = -1
            cand.append(uniq[keep])
            inv.append(local[inverse])
            cnt.append(counts[keep].astype(np.float64))
            wts.append(self.units.weights[u][uniq[keep]])
            score.append(wts[-1] * (cnt[-1] - 1))
        alive = np.ones(n, dtype=bool)
        by_value: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        k = len(rest)
        best = np.array([s.max() if len(s) else 0.0 for s in score])
        node_start = len(self.out_rows)
        segments: list[tuple[tuple[int, ...], int, int]] = []
        while True:
            c = int(np.argmax(best))
            top = best[c]
            if top <= self.threshold:
                break
            other = max((best[j] for j in range(k) if j != c), default=0.0)
            floor = max(other, self.threshold)
            picked = np.flatnonzero((score[c] >= floor) & (score[c] > self.threshold))
            # All of them would be picked next anyway; emitting their groups in string order
            # (not score order) leaves PHC unchanged and lets neighbouring groups share
            # partial prefixes (characters, or whole KV blocks) across group boundaries.
            picked = picked[np.argsort(cand[c][picked], kind="stable")]
            if c not in by_value:
                order = np.argsort(inv[c], kind="stable")
                starts = np.searchsorted(inv[c][order], np.arange(len(cand[c]) + 1))
                by_value[c] = (order, starts)
            order, starts = by_value[c]
            child_rest = [u for j, u in enumerate(rest) if j != c]
            taken = []
            for v in picked.tolist():
                members = order[starts[v] : starts[v + 1]]
                members = members[alive[members]]
                taken.append(members)
                group = rows[members]
                block = self.units.codes[group[:, None], child_rest]
                same = (block == block[0]).all(axis=0).tolist()
                constant = [u for u, s in zip(child_rest, same, strict=True) if s]
                lead = self._lead([rest[c], *constant], group[0])
                free = [u for u, s in zip(child_rest, same, strict=True) if not s]
                start = len(self.out_rows)
                self.solve(group, free, prefix + lead, depth + 1)
                key = tuple(self.units.codes[self.out_rows[start], self.stats_cols])
                segments.append((key, start, len(self.out_rows)))
            taken = np.concatenate(taken)
            alive[taken] = False
            score[c][picked] = 0.0
            best[c] = score[c].max()
            for j in range(k):
                if j == c:
                    continue
                hit = inv[j][taken]
                hit = hit[hit >= 0]
                if len(hit) == 0:
                    continue
                np.subtract.at(cnt[j], hit, 1.0)
                touched = np.unique(hit)
                score[j][touched] = wts[j][touched] * np.maximum(cnt[j][touched] - 1, 0)
                best[j] = score[j].max()
        self._sort_segments(node_start, segments)
        self.emit_fallback(rows[alive], prefix, rest)

    def _sort_segments(self, start: int, segments: list) -> None:
        """Put a node's groups in the order leftover-order sorting would give their first
        rows. Groups start with different cells, so PHC cannot drop; neighbouring groups
        that agree on leading cells now share them (as characters and as KV blocks)."""
        if len(segments) < 2:
            return
        segments.sort(key=lambda seg: seg[0])
        rows = [r for _, a, b in segments for r in self.out_rows[a:b]]
        ids = [i for _, a, b in segments for i in self.out_order_ids[a:b]]
        self.out_rows[start:] = rows
        self.out_order_ids[start:] = ids

    # -- pure-Python path for small sub-tables ------------------------------------------
    def _weights(self, u: int) -> list[float]:
        if self.weight_lists[u] is None:
            self.weight_lists[u] = self.units.weights[u].tolist()
        return self.weight_lists[u]

    def solve_small(self, rows: list[int], rest: list[int], prefix: tuple[int, ...], depth: int):
        table = self.units.codes[rows][:, rest].tolist()
        self._small(
            list(zip(rows, table, strict=True)), list(range(len(rest))), rest, prefix, depth
        )

    def _small(self, items, cols: list[int], rest: list[int], prefix, depth: int):
        """items: (row, codes over `rest`); cols: positions in that tuple still free."""
        if len(items) == 2 and self.config.max_depth is None:
            self._pair(items, cols, rest, prefix)
            return
        node_start, segments, vals_of = len(self.out_rows), [], dict(items)
        in_stats_order = sorted(range(len(rest)), key=lambda c: self.rank[rest[c]])
        while len(items) > 1 and len(cols) > 1 and not self._stopped(depth):
            if len(items) <= LOOKAHEAD_ROWS and self.lookahead_left > 0:
                self.lookahead_left -= 1
                best_s, best_c, best_v = self._best_rollout(items, cols, rest)
            else:
                best_s, best_c, best_v = self._best_value(items, cols, rest)
            if best_c < 0:
                break
            group = [it for it in items if it[1][best_c] == best_v]
            items = [it for it in items if it[1][best_c] != best_v]
            first = group[0][1]
            same = [c for c in cols if c != best_c and all(it[1][c] == first[c] for it in group)]
            free = [c for c in cols if c != best_c and c not in same]
            lead = self._lead([rest[c] for c in [best_c, *same]], group[0][0])
            start = len(self.out_rows)
            self._small(group, free, rest, prefix + lead, depth + 1)
            head = vals_of[self.out_rows[start]]
            segments.append((tuple(head[c] for c in in_stats_order), start, len(self.out_rows)))
        self._sort_segments(node_start, segments)
        cols = sorted(cols, key=lambda c: self.rank[rest[c]])
        if len(items) > 1:
            items.sort(key=lambda it: [it[1][c] for c in cols])
        self._emit([row for row, _ in items], prefix + tuple(rest[c] for c in cols))

    def _best_value(self, items, cols: list[int], rest: list[int]):
        """(HITCOUNT, c, v) of the best value; ties go to the earlier field's smaller value."""
        best_s, best_c, best_v = self.threshold, -1, -1
        columns = list(zip(*[vals for _, vals in items], strict=True))
        for c in cols:
            w = self._weights(rest[c])
            counts: dict[int, int] = {}
            for v in columns[c]:
                counts[v] = counts.get(v, 0) + 1
            for v, n in counts.items():
                if n > 1:
                    s = w[v] * (n - 1)
                    if s > best_s or (s == best_s and c == best_c and v < best_v):
                        best_s, best_c, best_v = s, c, v
        return best_s, best_c, best_v

    def _best_rollout(self, items, cols: list[int], rest: list[int]):
        """The group to take first by rollout: every value's rows (c, v), scored by the PHC of
        taking them first and finishing both parts by the plain greedy. Returns
        (score, c, v); ties go to the earlier field, then the smaller value."""
        table = [vals for _, vals in items]
        best = (self.threshold, -1, -1)
        for c in cols:
            for v in sorted({vals[c] for vals in table}):
                group = [vals for vals in table if vals[c] == v]
                if len(group) < 2:
                    continue
                others = [vals for vals in table if vals[c] != v]
                score = self._group_gain(group, c, cols, rest)
                score += self._greedy_phc(others, cols, rest)
                if score > best[0]:
                    best = (score, c, v)
        return best

    def _group_gain(self, group: list, c: int, cols: list[int], rest: list[int]) -> float:
        """PHC earned inside a group led by field c: its constant fields, then the greedy."""
        first = group[0]
        same = [x for x in cols if x != c and all(g[x] == first[x] for g in group)]
        gain = sum(self._weights(rest[x])[first[x]] for x in [c, *same]) * (len(group) - 1)
        free = [x for x in cols if x != c and x not in same]
        return gain + self._greedy_phc(group, free, rest)

    def _greedy_phc(self, table: list, cols: list[int], rest: list[int]) -> float:
        """PHC the plain greedy (HITCOUNT of the chosen value) reaches on `table`."""
        total = 0.0
        while len(table) > 1 and cols:
            best_s, best_c, best_v = 0.0, -1, -1
            for c in cols:
                w = self._weights(rest[c])
                counts: dict[int, int] = {}
                for vals in table:
                    counts[vals[c]] = counts.get(vals[c], 0) + 1
                for v, n in counts.items():
                    if n > 1 and w[v] * (n - 1) > best_s:
                        best_s, best_c, best_v = w[v] * (n - 1), c, v
            if best_c < 0:
                break
            total += self._group_gain([t for t in table if t[best_c] == best_v], best_c, cols, rest)
            table = [t for t in table if t[best_c] != best_v]
        return total

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

    def _lead(self, fields: list[int], row: int) -> tuple[int, ...]:
        """The fields leading a group (the chosen one and every field constant in it), most
        frequent value in the whole table first (ties in leftover order). Any order gives the
        group the same PHC; this one lets groups share their leading characters (and KV
        blocks) with the other groups that hold the same common values."""
        codes = self.units.codes
        return tuple(sorted(fields, key=lambda u: (-self._freq(u)[codes[row, u]], self.rank[u])))

    def _freq(self, u: int) -> list[int]:
        if self.freq_lists[u] is None:
            self.freq_lists[u] = np.bincount(self.units.codes[:, u]).tolist()
        return self.freq_lists[u]

    def _stopped(self, depth: int) -> bool:
        return self.config.max_depth is not None and depth >= self.config.max_depth


def ggr_schedule(
    table: TableLike | EncodedTable,
    fields: Sequence[str] | None = None,
    config: GGRConfig | None = None,
    token_length: Callable[[str], int] | None = None,
) -> Schedule:
    """GGR schedule of `table` over `fields` (all columns by default). With `token_length`,
    value weights are squared token counts instead of squared character counts."""
    config = config or GGRConfig()
    enc = table if isinstance(table, EncodedTable) else encode(table, fields, token_length)
    if config.fds == "auto":
        fd_groups = detect_fds(enc)
    elif config.fds is None:
        fd_groups = []
    elif isinstance(config.fds, str):
        raise ValueError(f"fds must be 'auto', None or groups of field names, got {config.fds!r}")
    else:
        fd_groups = [list(g) for g in config.fds]
    units = _build_units(enc, fd_groups)
    greedy = _Greedy(units, config)
    all_units = list(range(len(units.members)))
    rows = np.arange(enc.num_rows, dtype=np.int64)
    chunk = config.chunk_rows
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk_rows must be a positive number of rows or None, got {chunk}")
    if chunk is not None and enc.num_rows > chunk:
        keys = [units.codes[:, u] for u in reversed(units.stats_order)]
        rows = rows[np.lexsort(keys)]
    step = chunk or max(enc.num_rows, 1)
    for start in range(0, enc.num_rows, step):
        greedy.solve(rows[start : start + step], all_units, (), 0)
    names = {
        oid: tuple(enc.fields[j] for u in unit_order for j in units.members[u])
        for unit_order, oid in greedy.orders.items()
    }
    return Schedule(
        np.asarray(greedy.out_rows, dtype=np.int64),
        np.asarray(greedy.out_order_ids, dtype=np.int32),
        tuple(names[oid] for oid in range(len(names))),
    )
