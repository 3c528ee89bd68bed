import itertools

import pandas as pd
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llm_assets.optimizer.bound import char_hit_upper_bound, phc_upper_bound
from llm_assets.optimizer.metrics import sorted_hits
from llm_assets.optimizer.ophr import ophr
from llm_assets.optimizer.table import encode
from tests.llm_assets.optimizer.strategies import tables

# Values that are prefixes of one another, so the rows' strings can match across cell
# boundaries ("a" + "bc" against "ab" + "c"): the hard case for the char bound.
PREFIX_CELLS = st.sampled_from(["a", "ab", "abc", "b", "ba", "bc", "c", ""])


def best_char_hits(frame: pd.DataFrame) -> tuple[int, int]:
    """(the most trie hits any schedule reaches, total characters), by enumeration: the hits
    do not depend on the row order (metrics docstring), so every per-row field order."""
    enc = encode(frame)
    n, m = enc.codes.shape
    per_row = [
        ["".join(enc.cell(r, j) for j in order) for order in itertools.permutations(range(m))]
        for r in range(n)
    ]
    best = max(sorted_hits(list(strings)) for strings in itertools.product(*per_row))
    return best, sum(len(s[0]) for s in per_row)


@given(tables(max_rows=6, max_cols=3))
@example(pd.DataFrame({"a": ["x", "x", "x"], "b": ["p", "q", "r"]}))
@settings(max_examples=150, deadline=None)
def test_phc_bound_is_never_below_the_optimum(frame):
    optimum, _ = ophr(frame)
    assert phc_upper_bound(encode(frame)) >= optimum


MISALIGNED = pd.DataFrame({"f0": ["a", "ab", "x"], "f1": ["bc", "c", "y"]})
"""Rows "a"+"bc" and "ab"+"c" are both "abc": a 3-character hit with no equal cell."""


@given(tables(max_rows=4, max_cols=3, cells=PREFIX_CELLS))
@example(MISALIGNED)
@settings(max_examples=200, deadline=None)
def test_char_bound_is_never_below_the_best_schedule(frame):
    best, total = best_char_hits(frame)
    bound = char_hit_upper_bound(encode(frame))
    assert 0.0 <= bound <= 1.0
    assert bound * total >= best - 1e-9


@given(tables(max_rows=4, max_cols=3))
@settings(max_examples=100, deadline=None)
def test_char_bound_holds_on_mixed_cells(frame):
    best, total = best_char_hits(frame)
    assert char_hit_upper_bound(encode(frame)) * total >= best - 1e-9


def test_char_bound_is_tight_when_nothing_is_shared():
    frame = pd.DataFrame({"a": ["x1", "y2", "z3"], "b": ["pp", "qq", "rr"]})
    assert char_hit_upper_bound(encode(frame)) == 0.0
    assert phc_upper_bound(encode(frame)) == 0.0


def test_char_bound_counts_a_repeated_value_once_per_repeat():
    """Three rows share "movie" (5 chars): at most two of them hit it; nothing else is
    shared, no value is a prefix of another, so the bound is 10 of 3 x 7 characters."""
    frame = pd.DataFrame({"m": ["movie"] * 3, "r": ["ab", "cd", "ef"]})
    assert char_hit_upper_bound(encode(frame)) == 10 / 21
