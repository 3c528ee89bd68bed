"""Greedy Group Recursion (ggr_mlsys.txt section 2.2, Algorithm 1, typos fixed per DESIGN.md).

At a sub-table (rows R, fields F) GGR scores every value v of every field c by
`HITCOUNT(v, c) = weight(v) * (|R_v| - 1)` with `weight(v) = len(v)^2` summed over c and the
fields functionally dependent on c; it takes the best (c, v), puts the group R_v first with c
(and its dependants) leading, recurses into R_v without c, then continues on R minus R_v.

What makes this implementation fast without changing the greedy choice:
- Functional dependencies (given, or detected: two columns whose pair has as many distinct
  values as each alone; not two all-distinct columns, `fields.detect_fds`) merge into one
  compound field, coded once. A field all distinct in the table is never counted.
- Columns are integer-coded once; counts come from array operations per sub-table (a
  `bincount` over the code range where it is small enough, else a sort), kept for all
  fields in one flat array that each round updates with a handful of numpy calls.
- Peeling: removing the rows of value v in field c changes no other count of c and only lowers
  counts elsewhere, so every value of c scoring at least the best score in any other field
  would be picked next anyway, in score order. All of them are taken in one round.
- Sub-tables of at most `SMALL_NODE` rows run the same greedy in plain Python (`ggr_small`;
  numpy's per-call cost dominates below that: on the 28k x 10 skewed table GGR's CPU was
  1.04 s at 32 rows, 0.87-0.93 s at 160, 0.89 s at 400, 0.96 s at 1,000); a field whose
  values are all distinct in a sub-table is not counted again below it.

Exact leaves (the one place GGR departs from the greedy): a sub-table of at most
`ggr_small.EXACT_ROWS` rows - at a group's start, or what is left of a sub-table once that
few rows remain ungrouped - whose rows x fields-with-a-repeated-value stay within
`leaf.MAX_CELLS` (40) gets the PHC optimum (`leaf.exact_runs`), which may split a value's
rows (the greedy never does; on random 7 x 4 tables its worst was 0.86 of the optimum).
Each such search is bounded (at most 2^8 row sets x 2^fields field sets, pruned by
HITCOUNT bounds); measured on the 28k x 10 skewed table: 4.3k leaves, ~0.2 s CPU, char hit
rate 62.095% -> 62.114% (leaves with at most one field still repeating are left to the
greedy, which reaches their optimum); they are off under early stopping (`max_depth`, `min_score`).
In tables of at most `SMALL_NODE` rows, a sub-table of 9-10 rows (`ggr_small.LOOKAHEAD_ROWS`)
takes the first group that does best with both parts then solved exactly, not always the
greedy's (`SmallNodes._lookahead`): on random 9-10 row tables the greedy alone reached 0.71
of the optimum at worst, this 0.94 (2,600 tables).

Invariant: the result is a valid schedule (every row once, each row's fields a permutation).

Leftover fields (those not leading a group, at any level) follow in the leftover order, by
`leftover_scores`: the hits a field earns leading a sorted block on its own, i.e. each repeat
of a value hits it whole and each distinct value its common prefix with the previous one in
sorted order. This agrees with HITCOUNT (a field with neither repeats nor shared prefixes
scores 0 and goes last) where `column_stats`' avg length x rows / distinct ranks a long
all-distinct field (JSON, review text) first and hides the prefixes the fields behind it share.
Where few rows stay ungrouped (a node of at most `tails.TAIL_ROWS` rows, a two-row group, a
run of an exact leaf) the same score is taken on those rows (`tails`): what matters there is
what they share, not the whole table (a claim's two rows share 5 characters of their
sequential ids and 3 of their JSON evidence, which shares more over the whole table).

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
from llm_assets.optimizer.ggr_small import SmallNodes
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode
from llm_assets.optimizer.tails import TailOrder

SMALL_NODE = 160
"""Sub-tables with at most this many rows use the pure-Python greedy (less overhead)."""


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
    texts: tuple[np.ndarray, ...]
    """Per unit, the text of each code (the members' texts joined)."""


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
    weights, texts = [], []
    for u, members in enumerate(groups):
        squares = [enc.lengths[j] ** 2 for j in members]
        if len(members) == 1:
            codes[:, u] = enc.codes[:, members[0]]
            weights.append(squares[0])
            texts.append(enc.uniques[members[0]])
            continue
        _, first, inverse = np.unique(
            enc.codes[:, members], axis=0, return_index=True, return_inverse=True
        )
        codes[:, u] = inverse.ravel()
        weights.append(sum(sq[enc.codes[first, j]] for sq, j in zip(squares, members, strict=True)))
        parts = [enc.uniques[j][enc.codes[first, j]] for j in members]
        texts.append(np.array(["".join(t) for t in zip(*parts, strict=True)], dtype=object))
    unit_score = [max(score[j] for j in members) for members in groups]
    order = tuple(sorted(range(len(groups)), key=lambda u: -unit_score[u]))
    return _Units(tuple(tuple(g) for g in groups), codes, tuple(weights), order, tuple(texts))


class _Greedy(SmallNodes, TailOrder):
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
        self.exact = config.max_depth is None and self.threshold == 0.0
        self.lookahead = self.exact and len(units.codes) <= SMALL_NODE
        self.freq_lists: list[list[int] | None] = [None] * len(units.members)
        self.row_lists: list[list[int]] = units.codes.tolist()
        self.text_lists: list[list[str]] = [texts.tolist() for texts in units.texts]
        self.optima: dict = {}
        self.ranked_units: dict[tuple[int, ...], list[int]] = {}
        self.keys = {u for u, w in enumerate(units.weights) if len(w) == len(units.codes)}
        self.no_repeat = np.zeros(0, dtype=np.int64)

    # -- output -------------------------------------------------------------------------
    def _emit(self, rows: list[int], order: tuple[int, ...]) -> None:
        oid = self.orders.setdefault(order, len(self.orders))
        self.out_rows.extend(rows)
        self.out_order_ids.extend([oid] * len(rows))

    def emit_fallback(
        self, rows: np.ndarray, prefix: tuple[int, ...], rest: Sequence[int], heads=()
    ):
        """Rows ordered lexicographically under their free fields' order (`_tail`)."""
        order = self._tail(rows, rest, heads)
        if len(rows) > 1 and order:
            keys = [self.units.codes[rows, u] for u in reversed(order)]
            rows = rows[np.lexsort(keys)]
        self._emit(rows.tolist(), prefix + tuple(order))

    # -- array path ---------------------------------------------------------------------
    def solve(self, rows, rest: list[int], prefix: tuple[int, ...], depth: int):
        """Rows (an array, or a list of row numbers) over the free units `rest`."""
        n = len(rows)
        if n <= 1 or len(rest) <= 1 or self._stopped(depth) or self.keys.issuperset(rest):
            self.emit_fallback(np.asarray(rows, dtype=np.int64), prefix, rest)
            return
        if n <= SMALL_NODE:
            self.solve_small(list(rows), rest, prefix, depth)
            return
        rows = np.asarray(rows, dtype=np.int64)
        units = self.units
        codes = units.codes
        # Per unit j, its repeated values are slots off[j] + 1 ... off[j + 1] - 1 of the flat
        # count / weight / score arrays (slot off[j] is a zero, so no segment is empty).
        inv, cand, cnt, wts = [], [], [], []
        for u in rest:
            if u in self.keys:  # all distinct in the table: nothing to count
                repeated, local, counts = self.no_repeat, np.full(n, -1), self.no_repeat
            else:
                repeated, local, counts = _repeated_values(codes[rows, u], len(units.weights[u]))
            cand.append(repeated)
            inv.append(local)
            cnt.append(np.concatenate(([0.0], counts)))
            wts.append(np.concatenate(([0.0], self.units.weights[u][repeated])))
        off = np.concatenate(([0], np.cumsum([len(x) for x in cnt])))
        cnt, wts = np.concatenate(cnt), np.concatenate(wts)
        score = wts * np.maximum(cnt - 1, 0)
        slot = np.stack([np.where(i >= 0, i + off[j] + 1, -1) for j, i in enumerate(inv)], axis=1)
        alive = np.ones(n, dtype=bool)
        by_value: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        best = np.maximum.reduceat(score, off[:-1])
        node_start = len(self.out_rows)
        segments: list[tuple[tuple[int, ...], int, int]] = []
        heads: list[str] = []  # each group's first text (`tails`)
        while True:
            c = int(np.argmax(best))
            top = best[c]
            if top <= self.threshold:
                break
            best[c] = 0.0
            floor = max(float(best.max()), self.threshold)
            own = score[off[c] + 1 : off[c + 1]]
            picked = np.flatnonzero((own >= floor) & (own > self.threshold))
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
            taken, bounds = self._groups(order, starts, picked, alive)
            group_rows = rows[taken]
            block = codes[group_rows[:, None], child_rest]
            if len(bounds) == 2:
                constant = [(block == block[0]).all(axis=0).tolist()]
            else:
                same = np.repeat(block[bounds[:-1]], np.diff(bounds), axis=0) == block
                constant = np.logical_and.reduceat(same, bounds[:-1], axis=0).tolist()
            group_rows = group_rows.tolist()
            for g, same_g in enumerate(constant):
                group = group_rows[bounds[g] : bounds[g + 1]]
                lead = self._lead(
                    [rest[c], *(u for u, s in zip(child_rest, same_g, strict=True) if s)],
                    group[0],
                )
                free = [u for u, s in zip(child_rest, same_g, strict=True) if not s]
                heads.append(self._head(lead, group[0]))
                start = len(self.out_rows)
                self.solve(group, free, prefix + lead, depth + 1)
                segments.append(self._segment(start))
            alive[taken] = False
            hit = slot[taken].ravel()
            hit = hit[hit >= 0]
            cnt -= np.bincount(hit, minlength=len(cnt))
            np.multiply(wts, np.maximum(cnt - 1, 0), out=score)
            best = np.maximum.reduceat(score, off[:-1])
        self._sort_segments(node_start, segments)
        self.emit_fallback(rows[alive], prefix, rest, heads)

    @staticmethod
    def _groups(order: np.ndarray, starts: np.ndarray, picked: np.ndarray, alive: np.ndarray):
        """(positions of the alive rows of each picked value, concatenated; group bounds)."""
        if len(picked) == 1:  # most rounds take one value
            members = order[starts[picked[0]] : starts[picked[0] + 1]]
            members = members[alive[members]]
            return members, np.array([0, len(members)])
        lo, hi = starts[picked], starts[picked + 1]
        sizes = hi - lo
        index = np.repeat(lo - np.concatenate(([0], np.cumsum(sizes[:-1]))), sizes)
        members = order[index + np.arange(sizes.sum())]
        keep = alive[members]
        counts = np.bincount(np.repeat(np.arange(len(picked)), sizes)[keep], minlength=len(picked))
        return members[keep], np.concatenate(([0], np.cumsum(counts)))

    def _segment(self, start: int) -> tuple[tuple[int, ...], int, int]:
        """(sort key, start, end) of the rows emitted since `start`: the key is the first
        row's codes in leftover order (the node's prefix fields, equal in all its groups,
        do not change how its segments compare)."""
        first = self.row_lists[self.out_rows[start]]
        return tuple(first[u] for u in self.stats_cols), start, len(self.out_rows)

    def _sort_segments(self, start: int, segments: list) -> None:
        """Put a node's groups in the order leftover-order sorting would give their first
        rows. Groups start with different cells, so PHC cannot drop; neighbouring groups
        that agree on leading cells now share them (as characters and as KV blocks)."""
        if len(segments) < 2:
            return
        segments.sort(key=lambda seg: seg[0])
        rows: list[int] = []
        ids: list[int] = []
        for _, a, b in segments:
            rows += self.out_rows[a:b]
            ids += self.out_order_ids[a:b]
        self.out_rows[start:] = rows
        self.out_order_ids[start:] = ids

    def _lead(self, fields: list[int], row: int) -> tuple[int, ...]:
        """The fields leading a group (the chosen one and every field constant in it), most
        frequent value in the whole table first (ties in leftover order). Any order gives the
        group the same PHC; this one lets groups share their leading characters (and KV
        blocks) with the other groups that hold the same common values."""
        if len(fields) < 2:
            return tuple(fields)
        vals = self.row_lists[row]
        return tuple(sorted(fields, key=lambda u: (-self._freq(u)[vals[u]], self.rank[u])))

    def _freq(self, u: int) -> list[int]:
        if self.freq_lists[u] is None:
            self.freq_lists[u] = np.bincount(self.units.codes[:, u]).tolist()
        return self.freq_lists[u]

    def _stopped(self, depth: int) -> bool:
        return self.config.max_depth is not None and depth >= self.config.max_depth


def _repeated_values(column: np.ndarray, num_values: int):
    """(the codes held by 2+ rows of `column`, ascending; each row's index among them or
    -1; their counts) for codes in range(num_values): counted by `bincount` where the
    code range is within a few times the rows (no sort), else by `unique`."""
    if num_values <= 4 * len(column):
        counts = np.bincount(column, minlength=num_values)
        keep = counts > 1
        repeated = np.flatnonzero(keep)
        local = np.where(keep[column], np.cumsum(keep)[column] - 1, -1)
        return repeated, local, counts[repeated]
    uniq, inverse, counts = np.unique(column, return_inverse=True, return_counts=True)
    keep = counts > 1
    local = np.cumsum(keep) - 1
    local[~keep] = -1
    return uniq[keep], local[inverse], counts[keep]


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
