"""The exact PHC optimum of a small sub-table, for GGR's leaves (`ggr_small.EXACT_ROWS`).

Same recursion as `ophr` (see its docstring for why it is exhaustive): the run holding the
lowest row r is r alone, or r plus any non-empty subset of the rows sharing r's value in a
field c, recursing inside the run without c and after it on the other rows. Written apart
from `ophr` (bitmask states, three cuts below), so the test comparing GGR with `ophr`
checks two implementations against each other. The cuts keep it exact:

- fields where no value repeats among the state's rows earn nothing and are dropped from
  the state (more states coincide in the memo);
- a field constant over the state's rows leads all of them: moving a cell every row holds to
  the front of every row keeps each neighbour pair's common prefix and adds that cell;
- a state's total HITCOUNT (`bound.phc_upper_bound` on its rows) bounds what it can earn:
  a run whose gain plus the bounds of its two parts cannot beat the best found is skipped,
  so is the lowest row alone when the other rows' bound cannot, and the search of a state
  stops when it reaches its bound.

Cost: at most 2^rows x 2^fields states, each trying up to 2^(rows-1) runs per field; only
fields with a repeated value count, and tables above `MAX_CELLS` (rows x such fields) are
refused, so one call is bounded (8 rows x 4 fields: at most a few thousand states; measured
median 59 states on random 7 x 4 tables, at most 197; on the 4.3k leaves of a 28k x 10
skewed table median 5, 99th percentile 84, at most 169).
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_CELLS = 40
"""Largest rows x (fields with a repeated value) searched; larger tables return None."""

Plan = list[tuple[int, tuple[int, ...]]]


def exact_runs(columns: Sequence[Sequence[int]], weights: Sequence[Sequence[float]]):
    """(optimal PHC, plan) of the table whose fields hold the value codes `columns` (one
    sequence per field, all of the rows' length), `weights[c][v]` the weight of value v in
    field c; None when the table is beyond `MAX_CELLS`. The plan lists (row, lead) in
    schedule order: each row leads with the fields in `lead` (in that order); its other
    fields may follow in any order."""
    n = len(columns[0]) if columns else 0
    if any(len(column) != n for column in columns):
        raise ValueError("exact_runs: the columns must have one value per row each")
    # groups[k]: (row mask, weight) of each value held by 2+ rows in field fields[k].
    fields, groups = [], []
    for c, column in enumerate(columns):
        if len(set(column)) == n:
            continue
        masks: dict[int, int] = {}
        for r, v in enumerate(column):
            masks[v] = masks.get(v, 0) | 1 << r
        found = [(mask, weights[c][v]) for v, mask in masks.items() if mask & (mask - 1)]
        fields.append(c)
        groups.append(found)
    m = len(fields)
    if n * m > MAX_CELLS:
        return None
    flat = [(1 << k, mask, w) for k in range(m) for mask, w in groups[k]]
    facts: dict[int, tuple[float, int, int, float]] = {}
    memo: dict[int, tuple[float, tuple | None]] = {}

    def state(rows: int, cols: int) -> tuple[float, int, int, float]:
        """(gain of the fields constant over `rows`, those fields, the fields with a
        repeated value but not constant, their total HITCOUNT) among `cols`."""
        key = rows << m | cols
        found = facts.get(key)
        if found is None:
            size = rows.bit_count()
            const_gain, const, useful, bound = 0.0, 0, 0, 0.0
            for bit, mask, w in flat:
                if cols & bit:
                    inside = (mask & rows).bit_count()
                    if inside == size:
                        const_gain += w * (size - 1)
                        const |= bit
                    elif inside > 1:
                        useful |= bit
                        bound += w * (inside - 1)
            found = facts[key] = (const_gain, const, useful, bound)
        return found

    def upper(rows: int, cols: int) -> float:
        """Total HITCOUNT of `rows` over `cols`: no schedule of them earns more."""
        const_gain, _, _, bound = state(rows, cols)
        return const_gain + bound

    def solve(rows: int, cols: int) -> float:
        key = rows << m | cols
        hit = memo.get(key)
        if hit is not None:
            return hit[0]
        const_gain, const, useful, bound = state(rows, cols)
        if const:
            best = (const_gain + solve(rows, useful), ("const", const, useful))
        elif not useful:
            best = (0.0, None)
        else:
            best = search(rows, useful, bound)
        memo[key] = best
        return best[0]

    def search(rows: int, useful: int, bound: float) -> tuple[float, tuple]:
        """Best plan of `rows` (no constant field): runs holding the lowest row, each
        field's largest run first, then that row alone (unless the other rows' bound cannot
        beat the best run); stops on reaching `bound`."""
        first = rows & -rows
        rest = rows ^ first
        best: tuple = (-1.0, None)
        for k in range(m):
            if not useful >> k & 1:
                continue
            inner = useful & ~(1 << k)
            for mask, w in groups[k]:
                if not mask & first:
                    continue
                mates = sub = mask & rest
                while sub:
                    run = sub | first
                    gain = w * sub.bit_count()
                    if gain + upper(run, inner) + upper(rows ^ run, useful) > best[0]:
                        total = gain + solve(run, inner) + solve(rows ^ run, useful)
                        if total > best[0]:
                            best = (total, ("run", k, run, inner, useful))
                            if total >= bound:
                                return best
                    sub = (sub - 1) & mates
                break
        if upper(rest, useful) <= best[0]:  # that row alone cannot do better
            return best
        alone = solve(rest, useful)
        return best if best[0] >= alone else (alone, ("alone", rest, useful))

    def plan(rows: int, cols: int) -> Plan:
        """The rows of the state in schedule order, each with its lead, from the choices
        `solve` memoised (a stack of states still to lay out, each with the lead its
        enclosing runs give it)."""
        out: Plan = []
        todo = [(rows, cols, ())]
        while todo:
            rows, cols, lead = todo.pop()
            choice = memo.get(rows << m | cols, (0.0, None))[1]
            if choice is None:
                out.extend((r, lead) for r in range(n) if rows >> r & 1)
            elif choice[0] == "const":
                const = tuple(fields[k] for k in range(m) if choice[1] >> k & 1)
                todo.append((rows, choice[2], lead + const))
            elif choice[0] == "alone":
                out.append(((rows & -rows).bit_length() - 1, lead))
                todo.append((choice[1], choice[2], lead))
            else:
                _, k, run, inner, useful = choice
                todo.append((rows ^ run, useful, lead))
                todo.append((run, inner, (*lead, fields[k])))
        return out

    everything = ((1 << n) - 1, (1 << m) - 1)
    try:
        return solve(*everything), plan(*everything)
    finally:
        # The nested functions hold each other (a reference cycle through their closures):
        # unbound here, the memo goes with reference counting instead of waiting for the
        # cyclic collector (GGR runs thousands of leaves; left cyclic, they cost it ~10%).
        state = upper = solve = search = plan = None
