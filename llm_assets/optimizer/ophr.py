"""Optimal Prefix Hit Recursion (ggr_mlsys.txt section 2.1): the exact PHC optimum.

Tries every split of the table into the rows R_v holding value v in field c (placed first,
c leading, recursing without c) and the other rows (recursing with all fields); memoised on
(rows, fields). Exponential: a test oracle for tables up to about 8 rows x 4 fields.
Cells are (field, value) pairs with weight len(value)^2, as in `metrics.phc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

MAX_CELLS = 40


def ophr(
    table: TableLike | EncodedTable, fields: Sequence[str] | None = None
) -> tuple[float, Schedule]:
    """(optimal PHC, a schedule reaching it). Refuses tables above `MAX_CELLS` cells."""
    enc = table if isinstance(table, EncodedTable) else encode(table, fields)
    n, m = enc.codes.shape
    if n * m > MAX_CELLS:
        raise ValueError(f"OPHR is exponential: {n} rows x {m} fields exceeds {MAX_CELLS} cells")
    codes = enc.codes.tolist()
    weight = [enc.lengths[j].tolist() for j in range(m)]

    @cache
    def best(rows: tuple[int, ...], cols: tuple[int, ...]) -> tuple[float, tuple]:
        if len(rows) <= 1 or not cols:
            return 0.0, tuple((r, cols) for r in rows)
        if len(cols) == 1:
            (c,) = cols
            ordered = tuple(sorted(rows, key=lambda r: codes[r][c]))
            counts: dict[int, int] = {}
            for r in rows:
                counts[codes[r][c]] = counts.get(codes[r][c], 0) + 1
            score = sum(weight[c][v] ** 2 * (k - 1) for v, k in counts.items())
            return score, tuple((r, cols) for r in ordered)
        top: tuple[float, tuple] = (0.0, tuple((r, cols) for r in rows))
        for c in cols:
            values = sorted({codes[r][c] for r in rows})
            for v in values:
                group = tuple(r for r in rows if codes[r][c] == v)
                if len(group) < 2:
                    continue
                rest = tuple(r for r in rows if codes[r][c] != v)
                sub_cols = tuple(x for x in cols if x != c)
                g_score, g_plan = best(group, sub_cols)
                r_score, r_plan = best(rest, cols)
                score = weight[c][v] ** 2 * (len(group) - 1) + g_score + r_score
                if score > top[0]:
                    plan = tuple((r, (c,) + order) for r, order in g_plan) + r_plan
                    top = (score, plan)
        return top

    score, plan = best(tuple(range(n)), tuple(range(m)))
    pairs = [(r, [enc.fields[j] for j in order]) for r, order in plan]
    return score, Schedule.from_pairs(pairs)
