import itertools

import pandas as pd
import pytest
from hypothesis import given, settings

from llm_assets.optimizer.metrics import phc
from llm_assets.optimizer.ophr import ophr
from llm_assets.optimizer.schedule import validate_schedule
from tests.llm_assets.optimizer.strategies import STRING_CELLS, tables


def brute_force_phc(frame):
    """Every row order x every per-row field order: the true optimum, by enumeration."""
    fields = list(frame.columns)
    orders = list(itertools.permutations(fields))
    best = 0.0
    for rows in itertools.permutations(range(len(frame))):
        for per_row in itertools.product(orders, repeat=len(rows)):
            best = max(best, phc(frame, list(zip(rows, map(list, per_row), strict=True))))
    return best


@given(tables(max_rows=4, max_cols=2, cells=STRING_CELLS))
@settings(max_examples=40, deadline=None)
def test_ophr_is_the_optimum(frame):
    score, schedule = ophr(frame)
    validate_schedule(schedule, len(frame), list(frame.columns))
    assert phc(frame, schedule) == score
    assert score == brute_force_phc(frame)


def test_ophr_refuses_large_tables():
    with pytest.raises(ValueError, match="exponential"):
        ophr(pd.DataFrame({"a": range(50), "b": range(50)}))
