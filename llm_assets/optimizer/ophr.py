"""Optimal Prefix Hit Recursion (ggr_mlsys.txt section 2.1), made exact: the PHC optimum.

Why the search below is exhaustive. In any schedule, cut the rows into maximal runs of
consecutive rows that lead with the same cell (c, v). A row after a run boundary hits nothing
(its first cell differs from the previous row's), so

    PHC = sum over runs of  w(v) * (|run| - 1) + PHC of the run's rows on the fields minus c,

where runs of one row score 0. Any partition of the rows into such runs, each run a subset of
the rows holding its cell, is realisable (runs placed one after another). Hence

    OPT(R, F) = max over the run S containing the first row r of R:
                w(v) * (|S| - 1) + OPT(S, F - c) + OPT(R - S, F),

with S = {r} (score 0) or r plus any non-empty subset of the other rows holding (c, v) = r's
value in some field c. The paper's OPHR only tried S = all rows holding (c, v); the best
schedule may split them (a row of that group serves another run better), which it missed.

Memoised on (row set, field set) bitmasks. Exponential: a test oracle for tables up to about
8 rows x 4 fields. Cells are (field, value) pairs with weight len(value)^2, as in `metrics.phc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

MAX_CELLS = 40
MAX_ROWS = 10


def _subsets(items: list[int]):
    """Every non-empty subset of `items` as a bitmask."""
    for mask in range(1, 1 << len(items)):
        yield sum(1 << items[k] for k in range(len(items)) if mask >> k & 1)


def ophr(
    table: TableLike | EncodedTable, fields: Sequence[str] | None = None
) -> tuple[float, Schedule]:
    """(optimal PHC, a schedule reaching it). Refuses tables above `MAX_CELLS` cells or
    `MAX_ROWS` rows."""
    enc = table if isinstance(table, EncodedTable) else encode(table, fields)
    n, m = enc.codes.shape
    if n * m > MAX_CELLS or n > MAX_ROWS:
        raise ValueError(
            f"OPHR is exponential: {n} rows x {m} fields exceeds {MAX_CELLS} cells "
            f"or {MAX_ROWS} rows"
        )
    codes = enc.codes.tolist()
    weight = [(enc.lengths[j] ** 2).tolist() for j in range(m)]

    def rows_of(mask: int) -> list[int]:
        return [r for r in range(n) if mask >> r & 1]

    @cache
    def best(rows: int, cols: int) -> tuple[float, tuple]:
        """(optimum, plan) for row bitmask `rows` over field bitmask `cols`; a plan is a tuple
        of (row, leading fields) whose fields are then followed by the rest in column order."""
        members = rows_of(rows)
        if len(members) <= 1 or not cols:
            return 0.0, tuple((r, ()) for r in members)
        first, others = members[0], rows & ~(1 << members[0])
        score, plan = best(others, cols)
        top = (score, ((first, ()), *plan))  # `first` alone in its run
        for c in (c for c in range(m) if cols >> c & 1):
            value = codes[first][c]
            mates = [r for r in members[1:] if codes[r][c] == value]
            for subset in _subsets(mates):
                run = subset | 1 << first
                in_score, in_plan = best(run, cols & ~(1 << c))
                out_score, out_plan = best(rows & ~run, cols)
                total = weight[c][value] * run.bit_count() - weight[c][value]
                total += in_score + out_score
                if total > top[0]:
                    top = (total, tuple((r, (c, *lead)) for r, lead in in_plan) + out_plan)
        return top

    score, plan = best((1 << n) - 1, (1 << m) - 1)
    pairs = []
    for r, lead in plan:
        order = list(lead) + [j for j in range(m) if j not in lead]
        pairs.append((r, [enc.fields[j] for j in order]))
    return score, Schedule.from_pairs(pairs)
