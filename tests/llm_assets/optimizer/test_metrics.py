import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer import METHODS, reorder
from llm_assets.optimizer.metrics import (
    char_hit_rate,
    common_prefix_len,
    neighbour_lcps,
    phc,
    row_strings,
    token_hit_rate,
    trie_hits,
)
from llm_assets.optimizer.schedule import Schedule, validate_schedule
from llm_assets.optimizer.table import render_cell
from tests.llm_assets.optimizer.strategies import tables


def naive_trie_rate(strings):
    """Independent: a real character trie of dict nodes."""
    root: dict = {}
    hits = 0
    for s in strings:
        node, depth, matching = root, 0, True
        for ch in s:
            if matching and ch in node:
                depth += 1
            else:
                matching = False
            node = node.setdefault(ch, {})
        hits += depth
    total = sum(map(len, strings))
    return hits / total if total else 0.0


def naive_phc(frame, pairs):
    """Independent: Eq. 1-2 straight from the paper, on (field, rendered value) cells."""
    cells = [[(f, render_cell(frame.iloc[r][f])) for f in fields] for r, fields in pairs]
    total = 0
    for prev, cur in itertools.pairwise(cells):
        for a, b in zip(prev, cur, strict=True):
            if a != b:
                break
            total += len(b[1]) ** 2
    return total


def strings_of(frame, pairs):
    return ["".join(render_cell(frame.iloc[r][f]) for f in fields) for r, fields in pairs]


@given(tables(max_rows=8, max_cols=4), st.sampled_from(METHODS))
@settings(max_examples=150, deadline=None)
def test_metrics_equal_independent_recomputation(frame, method):
    schedule = reorder(frame, method=method)
    validate_schedule(schedule, len(frame), list(frame.columns))
    pairs = list(schedule)
    assert char_hit_rate(frame, schedule) == pytest.approx(
        naive_trie_rate(strings_of(frame, pairs))
    )
    assert phc(frame, schedule) == naive_phc(frame, pairs)
    assert char_hit_rate(frame, pairs) == char_hit_rate(frame, schedule)  # plain list works


@given(st.lists(st.text(alphabet="ab", max_size=6), max_size=12))
def test_trie_hits_match_brute_force(strings):
    expected = [
        max((common_prefix_len(s, t) for t in strings[:i]), default=0)
        for i, s in enumerate(strings)
    ]
    assert trie_hits(strings) == expected


@given(
    st.lists(st.text(alphabet="ab\x00\udc80\U0001f600", max_size=40), max_size=12),
    st.sampled_from([2, 7, 1 << 22]),
)
@settings(max_examples=150, deadline=None)
def test_neighbour_lcps_match_pairwise_comparison(strings, block_chars):
    """Vectorised LCPs (NUL characters, surrogates, astral code points, blocks of a few rows
    or one) equal the plain pairwise ones, sorted or not."""
    for texts in (strings, sorted(strings)):
        expected = [common_prefix_len(a, b) for a, b in itertools.pairwise(texts)]
        assert neighbour_lcps(texts, block_chars).tolist() == expected


def test_hand_computed_values():
    frame = pd.DataFrame({"a": ["xx", "xx", "y"], "b": ["p", "q", "q"]})
    pairs = [(0, ["a", "b"]), (1, ["a", "b"]), (2, ["b", "a"])]
    # strings: "xxp", "xxq", "qy": hits 0, 2, 0 of 8 characters
    assert char_hit_rate(frame, pairs) == pytest.approx(2 / 8)
    # row 1 shares a="xx" (4); row 2 starts with field b, row 1 with a: no hit
    assert phc(frame, pairs) == 4


def test_same_text_in_another_field_is_no_phc_hit():
    frame = pd.DataFrame({"a": ["v", "w"], "b": ["u", "v"]})
    assert phc(frame, [(0, ["a", "b"]), (1, ["b", "a"])]) == 0


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([(0, ["a", "b"])], "schedule has 1 rows, the table has 2"),
        ([(0, ["a", "b"]), (0, ["a", "b"])], "row 0 appears 2 times"),
        ([(0, ["a", "b"]), (5, ["a", "b"])], "row index 5 is outside"),
        ([(0, ["a", "b"]), (1, ["a"])], r"field order \['a'\] is not a permutation"),
        ([(0, ["a", "b"]), (1, ["a", "a"])], "is not a permutation"),
    ],
)
def test_validator_names_the_problem(pairs, message):
    with pytest.raises(ValueError, match=message):
        validate_schedule(pairs, 2, ["a", "b"])


def test_schedule_round_trips_pairs():
    pairs = [(2, ["b", "a"]), (0, ["a", "b"]), (1, ["b", "a"])]
    schedule = Schedule.from_pairs(pairs)
    assert list(schedule) == [(r, f) for r, f in pairs]
    assert schedule.to_pairs() == [[r, f] for r, f in pairs]
    assert schedule[1] == (0, ["a", "b"]) and len(schedule.orders) == 2


def chars(text: str) -> list[int]:
    """A tokenizer with one token per character (makes block arithmetic visible)."""
    return [ord(c) for c in text]


def test_token_hit_rate_counts_whole_blocks_only():
    # 8 tokens each; the second shares 7 with the first: one whole 4-token block
    assert token_hit_rate(["abcdefgh", "abcdefgx"], chars, block_size=4) == 4 / 16
    # a shared prefix shorter than a block earns nothing
    assert token_hit_rate(["abcx", "abcy"], chars, block_size=4) == 0.0
    # a hit never covers the last token: an identical 8-token prompt hits one block, not two
    assert token_hit_rate(["abcdefgh", "abcdefgh"], chars, block_size=4) == 4 / 16


def test_a_tokenizer_without_the_engines_block_size_is_refused():
    with pytest.raises(ValueError, match="block_size"):
        reorder(pd.DataFrame({"a": ["x", "y"]}), tokenizer=chars)
    assert reorder(pd.DataFrame({"a": ["x", "y"]}), tokenizer=chars, block_size=4).method_used


@given(st.lists(st.text(alphabet="ab", max_size=12), max_size=8))
@settings(max_examples=100, deadline=None)
def test_token_hit_rate_matches_a_direct_count(texts):
    """Each text hits the whole blocks of its longest token prefix shared with an earlier
    text, capped one token short of its length."""
    total = sum(map(len, texts))
    hits = 0
    for i, t in enumerate(texts):
        shared = max((common_prefix_len(t, u) for u in texts[:i]), default=0)
        hits += min(shared // 3, (len(t) - 1) // 3 if t else 0) * 3
    expected = hits / total if total else 0.0
    assert token_hit_rate(texts, chars, block_size=3) == pytest.approx(expected)


@given(st.integers(1, 80), st.integers(1, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_row_strings_join_each_field_order(n, n_orders, seed):
    """Few field orders over many rows are joined column-wise per order, many small ones
    gathered cell by cell: both give each row's cells in its own order."""

    rng = np.random.default_rng(seed)
    values = ["", "a", "ab", "2/5", "2000", "x y"]
    frame = pd.DataFrame({f: rng.choice(values, n) for f in ("a", "b", "c")})
    orders = [list(rng.permutation(["a", "b", "c"])) for _ in range(n_orders)]
    pairs = [(int(r), orders[int(rng.integers(n_orders))]) for r in rng.permutation(n)]
    expected = ["".join(frame.iloc[r][f] for f in fields) for r, fields in pairs]
    assert row_strings(frame, pairs) == expected
    assert row_strings(frame, pairs, sep="|") == [
        "|".join(frame.iloc[r][f] for f in fields) for r, fields in pairs
    ]
