"""The safety net's scoring (`cell_hits.cell_sorted_hits` behind `schedule_hit_rate` and
`fixed_order_hit_rates`) equals the string computation it replaces: `sorted_hits` of the
joined row strings (`char_hit_rate`), and a brute-force character trie, to the last bit."""

from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer import cell_hits, encode, reorder
from llm_assets.optimizer.cell_hits import (
    CellTexts,
    cell_sorted_hits,
    fixed_order_hit_rates,
    schedule_hit_rate,
)
from llm_assets.optimizer.column_stats import column_stats_schedule
from llm_assets.optimizer.ggr import ggr_schedule
from llm_assets.optimizer.metrics import char_hit_rate, row_strings, sorted_hits
from llm_assets.optimizer.quickgreedy import quick_greedy
from llm_assets.optimizer.schedule import Schedule

# Values that are prefixes of one another (within a field and across fields), empty,
# equal texts in two fields, NUL, a lone surrogate and an astral code point (the UTF-32
# buffer), and the largest code point (the end of a prefix's range of texts).
PREFIXY = st.sampled_from(
    [
        "",
        "a",
        "ab",
        "abc",
        "b",
        "ba",
        "1",
        "10",
        "100",
        "2",
        "\x00",
        "a\x00",
        "\udc80",
        "\U0001f600",
        "a\U0010ffff",
        "\U0010ffff",
        "\U0010ffffz",
        "aa",
    ]
)


@st.composite
def prefix_tables(draw, max_rows: int = 12, max_cols: int = 4) -> pd.DataFrame:
    n_rows = draw(st.integers(min_value=1, max_value=max_rows))
    n_cols = draw(st.integers(min_value=1, max_value=max_cols))
    return pd.DataFrame(
        {f"f{j}": draw(st.lists(PREFIXY, min_size=n_rows, max_size=n_rows)) for j in range(n_cols)},
        dtype=object,
    )


def brute_force_hits(strings) -> int:
    """Each string's longest common prefix with any earlier one, summed (no sorting)."""
    total = 0
    for i, s in enumerate(strings):
        best = 0
        for t in strings[:i]:
            k = 0
            while k < min(len(s), len(t)) and s[k] == t[k]:
                k += 1
            best = max(best, k)
        total += best
    return total


@st.composite
def schedules(draw, enc):
    """A random schedule: a permutation of the rows, each row one of a few field orders."""
    n, m = enc.num_rows, len(enc.fields)
    rows = np.asarray(draw(st.permutations(range(n))), dtype=np.int64)
    perms = st.permutations(range(m)).map(lambda p: tuple(enc.fields[j] for j in p))
    orders = tuple(dict.fromkeys(draw(st.lists(perms, min_size=1, max_size=3))))
    ids = draw(st.lists(st.integers(0, len(orders) - 1), min_size=n, max_size=n))
    return Schedule(rows, np.asarray(ids, dtype=np.int32), orders)


@given(prefix_tables(), st.data())
@settings(max_examples=400, deadline=None)
def test_schedule_hit_rate_equals_string_computation(frame, data):
    enc = encode(frame)
    schedule = data.draw(schedules(enc))
    strings = row_strings(enc, schedule)
    cells = CellTexts(enc)
    orders = [[enc.fields.index(f) for f in order] for order in schedule.orders]
    positions = np.asarray(orders, dtype=np.int64)[schedule.order_ids]
    assert cell_sorted_hits(cells, schedule.rows, positions) == sorted_hits(strings)
    assert sorted_hits(strings) == brute_force_hits(strings)
    with mock.patch.object(cell_hits, "CELL_ROWS", 0):  # cells, not strings, at any size
        assert schedule_hit_rate(enc, schedule, cells) == char_hit_rate(enc, schedule)


@given(prefix_tables(), st.data())
@settings(max_examples=400, deadline=None)
def test_fixed_order_hit_rates_equal_string_computation(frame, data):
    enc = encode(frame)
    m = len(enc.fields)
    orders = data.draw(st.lists(st.permutations(range(m)), min_size=1, max_size=3))
    expected = [
        char_hit_rate(enc, Schedule.fixed(np.arange(enc.num_rows), [enc.fields[j] for j in o]))
        for o in orders
    ]
    assert fixed_order_hit_rates(enc, orders) == expected  # joined strings, few rows
    with mock.patch.object(cell_hits, "CELL_ROWS", 0):
        assert fixed_order_hit_rates(enc, orders) == expected


@given(prefix_tables(max_rows=10, max_cols=3))
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
def test_safety_net_picks_as_the_string_scores_do(frame):
    """`reorder` keeps the candidate of best `char_hit_rate` (ties: greedy, then column
    statistics, then file order, then the authors' port, which these small tables are
    within `AUTHORS_CELLS` of), with that candidate's schedule."""
    enc = encode(frame)
    candidates = {
        "ggr": ggr_schedule(enc),
        "column_stats": column_stats_schedule(enc),
        "original": Schedule.fixed(np.arange(enc.num_rows), enc.fields),
        "authors_ggr": quick_greedy(enc),
    }
    best, best_score = None, -1.0
    for name, schedule in candidates.items():
        score = char_hit_rate(enc, schedule)
        if score > best_score:
            best, best_score = name, score
    with mock.patch.object(cell_hits, "CELL_ROWS", 0):
        chosen = reorder(enc)
    assert chosen.method_used == best
    assert chosen.rows.tolist() == candidates[best].rows.tolist()
    assert chosen.orders == candidates[best].orders


@pytest.mark.parametrize(
    "columns",
    [
        {"a": ["1", "10", "1", "100", "2"], "b": ["0", "x", "05", "", "1"]},  # "1"+"05" > "10"+"x"
        {"a": ["ab", "a", "a"], "b": ["c", "bd", "bc"]},  # "abc" between "abd" and "abd"
        {"a": ["", "", "x"], "b": ["x", "", ""]},  # equal strings split differently
    ],
)
def test_prefix_values_reorder_the_strings(columns):
    enc = encode(pd.DataFrame(columns))
    for order in ([0, 1], [1, 0]):
        schedule = Schedule.fixed(np.arange(enc.num_rows), [enc.fields[j] for j in order])
        with mock.patch.object(cell_hits, "CELL_ROWS", 0):
            assert fixed_order_hit_rates(enc, [order]) == [char_hit_rate(enc, schedule)]


@pytest.mark.parametrize("cell_rows", [0, cell_hits.CELL_ROWS])
def test_file_order_wins_where_it_shares_most(cell_rows):
    """File order f0 f1 f2 shares "m/a" twice over; the greedy and column statistics lead
    with f1, whose "2" "2" shares less."""
    frame = pd.DataFrame({"f0": ["", "b", "m/a"], "f1": ["m/a", "2", "2"], "f2": ["a", "2", "ba"]})
    with mock.patch.object(cell_hits, "CELL_ROWS", cell_rows):
        chosen = reorder(frame)
    assert chosen.method_used == "original"
    assert chosen.rows.tolist() == [0, 1, 2] and chosen.orders == (("f0", "f1", "f2"),)
    assert char_hit_rate(frame, chosen) == pytest.approx(3 / 13)
