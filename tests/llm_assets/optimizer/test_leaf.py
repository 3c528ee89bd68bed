import gc

import numpy as np
import pytest
from hypothesis import given, settings

from llm_assets.optimizer.leaf import MAX_CELLS, exact_runs
from llm_assets.optimizer.metrics import phc
from llm_assets.optimizer.ophr import ophr
from llm_assets.optimizer.schedule import Schedule, validate_schedule
from llm_assets.optimizer.table import encode
from tests.llm_assets.optimizer.strategies import STRING_CELLS, tables


def run_leaf(enc):
    weights = [(enc.lengths[j] ** 2).tolist() for j in range(len(enc.fields))]
    return exact_runs(enc.codes.T.tolist(), weights)


def as_schedule(enc, plan) -> Schedule:
    pairs = []
    for row, lead in plan:
        rest = [j for j in range(len(enc.fields)) if j not in lead]
        pairs.append((row, [enc.fields[j] for j in (*lead, *rest)]))
    return Schedule.from_pairs(pairs)


@given(tables(max_rows=8, max_cols=5, cells=STRING_CELLS))
@settings(max_examples=150, deadline=None)
def test_exact_leaf_reaches_ophr(frame):
    """Two implementations of the optimum (bitmask search with cuts vs `ophr`) agree, and
    the plan is a valid schedule scoring what the search says."""
    enc = encode(frame)
    found = run_leaf(enc)
    if found is None:  # beyond MAX_CELLS
        repeated = sum(
            len(set(enc.codes[:, j].tolist())) < len(frame) for j in range(enc.codes.shape[1])
        )
        assert len(frame) * repeated > MAX_CELLS
        return
    score, plan = found
    schedule = as_schedule(enc, plan)
    validate_schedule(schedule, len(frame), list(frame.columns))
    assert phc(enc, schedule) == score
    if len(frame) * len(frame.columns) <= 40:
        assert score == ophr(enc)[0]


@given(tables(max_rows=7, max_cols=4))
@settings(max_examples=60, deadline=None)
def test_exact_leaf_reaches_ophr_on_mixed_cells(frame):
    enc = encode(frame)
    score, plan = run_leaf(enc)
    assert phc(enc, as_schedule(enc, plan)) == score == ophr(enc)[0]


def test_exact_leaf_refuses_tables_beyond_its_cells():
    codes = np.zeros((6, 8), dtype=int).tolist()  # 8 rows x 6 repeated fields = 48 cells
    assert exact_runs(codes, [[1.0]] * 6) is None
    distinct = [list(range(8))] * 6  # nothing repeats: 0 cells to search
    assert exact_runs(distinct, [[1.0] * 8] * 6) == (0.0, [(r, ()) for r in range(8)])


def test_exact_leaf_refuses_columns_of_different_lengths():
    with pytest.raises(ValueError, match="one value per row"):
        exact_runs([[0, 0], [0, 0, 1]], [[1.0, 1.0]] * 2)


def test_exact_leaf_leaves_no_reference_cycle():
    """GGR runs thousands of leaves: their memo must go with reference counting, not wait
    for the cyclic collector (measured ~10% of GGR's time when it did). With the cycle,
    each call left dozens of objects to it; other threads of a test session may leave a
    few of their own meanwhile, so the check is on 100 calls."""
    table = [[0, 0, 1, 1], [1, 1, 1, 2], [0, 1, 0, 1]]  # 3 fields x 4 rows
    weights = [[4.0, 4.0], [1.0, 9.0, 9.0], [1.0, 1.0]]
    gc.collect()
    gc.disable()
    try:
        for _ in range(100):
            assert exact_runs(table, weights) is not None
        assert gc.collect() < 1000  # with the cycle: 6,500
    finally:
        gc.enable()
