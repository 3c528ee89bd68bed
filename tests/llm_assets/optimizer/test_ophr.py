import itertools
from functools import cache

import pandas as pd
import pytest
from hypothesis import given, settings

from llm_assets.optimizer.metrics import phc
from llm_assets.optimizer.ophr import ophr
from llm_assets.optimizer.schedule import validate_schedule
from llm_assets.optimizer.table import encode
from tests.llm_assets.optimizer.strategies import STRING_CELLS, tables


def brute_force_phc(frame: pd.DataFrame) -> float:
    """The optimum over every row order x every per-row field order. PHC sums a score per
    pair of neighbouring (row, field order)s, so the enumeration is a dynamic programme over
    (rows used, last row, its field order): every sequence is covered, none is skipped."""
    enc = encode(frame)
    n, m = enc.codes.shape
    orders = list(itertools.permutations(range(m)))
    cells = [[tuple((j, int(enc.codes[r, j])) for j in o) for o in orders] for r in range(n)]
    weight = [enc.lengths[j] ** 2 for j in range(m)]

    def pair(a: tuple, b: tuple) -> float:
        total = 0.0
        for (ja, va), (jb, vb) in zip(a, b, strict=True):
            if (ja, va) != (jb, vb):
                break
            total += weight[ja][va]
        return total

    @cache
    def best(used: int, last: int, order: int) -> float:
        if used == (1 << n) - 1:
            return 0.0
        return max(
            pair(cells[last][order], cells[r][o]) + best(used | 1 << r, r, o)
            for r in range(n)
            if not used >> r & 1
            for o in range(len(orders))
        )

    return max(best(1 << r, r, o) for r in range(n) for o in range(len(orders)))


@given(tables(max_rows=5, max_cols=3, cells=STRING_CELLS))
@settings(max_examples=60, deadline=None)
def test_ophr_is_the_optimum(frame):
    score, schedule = ophr(frame)
    validate_schedule(schedule, len(frame), list(frame.columns))
    assert phc(frame, schedule) == score
    assert score == brute_force_phc(frame)


@given(tables(max_rows=4, max_cols=3))
@settings(max_examples=40, deadline=None)
def test_ophr_is_the_optimum_on_mixed_cells(frame):
    score, schedule = ophr(frame)
    assert phc(frame, schedule) == score == brute_force_phc(frame)


def test_the_best_schedule_may_split_a_values_rows():
    """Rows 0, 1, 3, 4 hold "yy" in f0, but the optimum runs only three of them together:
    row 1 serves better next to row 4 (they share "wwww" in f1). Taking every row of a value
    at once (the paper's OPHR) reaches 29, not 33."""
    frame = pd.DataFrame(
        {
            "f0": ["yy", "yy", "wwww", "yy", "yy"],
            "f1": ["x", "wwww", "zzz", "yy", "wwww"],
            "f2": ["zzz", "yy", "zzz", "q", "zzz"],
        }
    )
    score, schedule = ophr(frame)
    assert score == brute_force_phc(frame) == 33
    assert phc(frame, schedule) == 33


def test_ophr_refuses_large_tables():
    with pytest.raises(ValueError, match="exponential"):
        ophr(pd.DataFrame({"a": range(50), "b": range(50)}))
