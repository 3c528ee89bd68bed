import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.data.skewed import skewed_table
from llm_assets.optimizer import GGRConfig, reorder
from llm_assets.optimizer.column_stats import column_stats_schedule
from llm_assets.optimizer.ggr import SMALL_NODE, _repeated_values, detect_fds, ggr_schedule
from llm_assets.optimizer.metrics import char_hit_rate, phc, row_strings, token_hit_rate
from llm_assets.optimizer.ophr import ophr
from llm_assets.optimizer.schedule import validate_schedule
from llm_assets.optimizer.table import encode
from resources.sim.block_cache import BLOCK_SIZE
from tests.llm_assets.optimizer.strategies import tables


@given(tables(max_rows=7, max_cols=4))
@settings(max_examples=200, deadline=None)
def test_ggr_is_valid_and_never_beats_the_optimum(frame):
    schedule = ggr_schedule(frame)
    validate_schedule(schedule, len(frame), list(frame.columns))
    optimum, _ = ophr(frame)
    assert phc(frame, schedule) <= optimum


def random_table(rng, n_rows, n_cols):
    alphabet = np.array(["x", "yy", "zzz", "wwww", "q"], dtype=object)
    return pd.DataFrame(
        {
            f"f{j}": alphabet[rng.integers(0, int(rng.integers(2, 6)), size=n_rows)]
            for j in range(n_cols)
        }
    )


def ratios_to_optimum(rng, n_rows, n_cols, n_tables):
    ratios = []
    for _ in range(n_tables):
        enc = encode(random_table(rng, n_rows, n_cols))
        optimum, _ = ophr(enc)
        ratios.append(phc(enc, ggr_schedule(enc)) / optimum if optimum else 1.0)
    return np.array(ratios)


def test_ggr_is_close_to_ophr_on_1000_random_7x4_tables():
    """Issue 14's target: mean >= 0.995 of the optimum and >= 0.9 at worst. Such tables are
    within GGR's exact leaves (`leaf.exact_runs`, written apart from `ophr`): measured mean
    and worst 1.0. The greedy with a one-group rollout reached mean 0.9955, worst 0.864
    (the worst needs a value's rows split three ways)."""
    ratios = ratios_to_optimum(np.random.default_rng(14), 7, 4, 1000)
    print(f"GGR / OPHR PHC: mean {ratios.mean():.4f}, min {ratios.min():.4f}")
    assert ratios.mean() >= 0.995, ratios.mean()
    assert ratios.min() >= 0.9, ratios.min()


def test_ggr_splits_a_value_three_ways_where_the_optimum_does():
    """The 0.864 table above: the optimum runs f3 = "yy" as two runs and a row apart."""
    frame = pd.DataFrame(
        {
            "f0": ["yy", "zzz", "zzz", "x", "wwww", "x", "wwww"],
            "f1": ["zzz", "yy", "wwww", "q", "wwww", "zzz", "yy"],
            "f2": ["x", "x", "yy", "yy", "yy", "x", "yy"],
            "f3": ["yy", "yy", "yy", "yy", "yy", "x", "yy"],
        }
    )
    assert ophr(frame)[0] == 59
    assert phc(frame, ggr_schedule(frame)) == 59  # the greedy with rollout reached 51


@pytest.mark.parametrize(
    ("n_rows", "n_cols", "seed"), [(10, 4, 5), (10, 4, 6), (9, 4, 2), (10, 3, 7)]
)
def test_ggr_is_within_0_9_of_ophr_on_9_and_10_row_tables(n_rows, n_cols, seed):
    """Issue 24's target: >= 0.9 of the optimum on small tables. 9- and 10-row tables are
    beyond the exact leaves; there GGR looks one group ahead (`SmallNodes._lookahead`:
    the group whose both parts, solved exactly, do best). Measured on these 100-table sets,
    worst before -> after: 0.818 -> 0.984 (10 x 4, seed 5), 0.775 -> 0.954 (seed 6), 0.758
    -> 0.961 (9 x 4), 0.869 -> 0.976 (10 x 3); means 0.975-0.988 -> >= 0.9988. Over 2,600
    random 9- and 10-row tables the worst was 0.94 (0.71 before)."""
    ratios = ratios_to_optimum(np.random.default_rng(seed), n_rows, n_cols, 100)
    assert ratios.mean() >= 0.995, ratios.mean()
    assert ratios.min() >= 0.9, ratios.min()


def test_the_lookahead_takes_a_smaller_group_first_where_that_does_best():
    """A 10-row table where the greedy's best value (f3 = "yy", 6 rows, HITCOUNT 20) leaves
    49 of the optimum's 69; taking f1 = "zzz" (3 rows, 18) first reaches it."""
    frame = pd.DataFrame(
        {
            "f0": ["yy", "q", "x", "x", "yy", "zzz", "zzz", "yy", "zzz", "yy"],
            "f1": ["zzz", "wwww", "yy", "zzz", "zzz", "yy", "x", "yy", "x", "wwww"],
            "f2": ["q", "yy", "wwww", "yy", "zzz", "zzz", "yy", "q", "q", "yy"],
            "f3": ["x", "zzz", "x", "yy", "yy", "x", "yy", "yy", "yy", "yy"],
        }
    )
    assert ophr(frame)[0] == 69
    assert phc(frame, ggr_schedule(frame)) == 69


def claims_frame(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """FEVER-like: all-distinct claims sharing entity-led prefixes, all-distinct JSON
    evidence (longer than the claims), a short label, a numeric id."""
    rng = np.random.default_rng(seed)
    entities = ["Nikolaj Coster-Waldau", "Roman Atwood", "History of art", "Adrienne Bailon"]
    claims = [f"{entities[k % 4]} is the {k}th claim." for k in range(n)]
    evidence = [
        json.dumps([[[int(a), int(b), "Page_" + str(int(c)), 0]]])
        for a, b, c in rng.integers(100_000, 999_999, size=(n, 3))
    ]
    return pd.DataFrame(
        {
            "id": rng.choice(np.arange(10_000, 99_999), n, replace=False).astype(str),
            "label": rng.choice(["SUPPORTS", "REFUTES"], n),
            "claim": claims,
            "evidence": evidence,
        }
    )


def test_leftover_fields_sharing_prefixes_go_before_all_distinct_ones():
    """Issue 14's largest loss: the leftover order put an all-distinct JSON column ahead of
    all-distinct claims whose values share prefixes; moving the claims ahead is what wins."""
    frame = claims_frame()
    assert len(set(frame["claim"])) == len(set(frame["evidence"])) == len(frame)
    schedule = ggr_schedule(frame)
    for _, fields in schedule:
        assert fields.index("claim") < fields.index("evidence")
        assert fields.index("claim") < fields.index("id")


@given(tables(max_rows=8, max_cols=4))
@settings(max_examples=150, deadline=None)
def test_ggr_never_loses_to_file_order_or_column_statistics(frame):
    enc = encode(frame)
    best = reorder(enc)
    validate_schedule(best, len(frame), list(frame.columns))
    rate = char_hit_rate(enc, best)
    for other in ("original", "column_stats"):
        assert rate >= char_hit_rate(enc, reorder(enc, method=other))
    assert best.method_used in ("ggr", "original", "column_stats", "authors_ggr")
    assert rate >= char_hit_rate(enc, ggr_schedule(enc))


def test_safety_net_returns_the_file_order_when_it_is_best():
    """Column statistics put the long all-distinct text first; GGR's greedy (HITCOUNT 0 for
    every value) falls back to the leftover order; file order keeps the shared link first."""
    frame = pd.DataFrame(
        {
            "link": ["m/a", "m/a", "m/b", "m/b"],
            "review": ["alpha beta gamma delta", "zeta eta theta iota", "kappa", "lambda mu"],
        }
    )
    schedule = reorder(frame)
    assert char_hit_rate(frame, schedule) >= char_hit_rate(frame, reorder(frame, method="original"))
    assert schedule.method_used in ("ggr", "original")


def test_per_row_field_order_beats_a_fixed_order():
    """Figure 1b of the paper: three fields, each with one group of x equal values on
    disjoint rows. Any fixed order hits one group; GGR hits all three."""
    x = 5
    rows = []
    for group in range(3):
        for i in range(x):
            row = [f"u{group}{i}{j}" for j in range(3)]
            row[group] = f"shared-{group}"
            rows.append(row)
    frame = pd.DataFrame(rows, columns=["a", "b", "c"])
    weight = len("shared-0") ** 2 * (x - 1)
    assert phc(frame, ggr_schedule(frame)) == 3 * weight
    assert phc(frame, column_stats_schedule(frame)) == weight


def test_fds_are_detected_and_kept_adjacent():
    frame = pd.DataFrame(
        {
            "id": ["1", "2", "3", "4"],
            "movie": ["m1", "m1", "m2", "m2"],
            "info": ["long info one", "long info one", "info two", "info two"],
        }
    )
    assert detect_fds(encode(frame)) == [["movie", "info"]]
    schedule = ggr_schedule(frame)
    for _, fields in schedule:
        assert abs(fields.index("movie") - fields.index("info")) == 1
        assert fields[-1] == "id"


def test_given_fds_must_name_known_fields():
    frame = pd.DataFrame({"a": ["1"], "b": ["2"]})
    with pytest.raises(KeyError, match=r"unknown field\(s\) \['zz'\]"):
        ggr_schedule(frame, config=GGRConfig(fds=[["a", "zz"]]))


def test_early_stopping_falls_back_to_statistics():
    frame = skewed_table(500, 5, seed=3)
    full = ggr_schedule(frame)
    shallow = ggr_schedule(frame, config=GGRConfig(max_depth=1))
    stopped = ggr_schedule(frame, config=GGRConfig(min_score=float("inf")))
    for schedule in (full, shallow, stopped):
        validate_schedule(schedule, len(frame), list(frame.columns))
    assert phc(frame, full) >= phc(frame, shallow)
    assert len(stopped.orders) == 1  # no group formed: one statistics order for all rows


def test_array_and_small_paths_agree_on_quality():
    """Sub-tables above SMALL_NODE rows use arrays, below it plain Python: the same greedy."""
    frame = skewed_table(SMALL_NODE * 4, 6, seed=11)
    enc = encode(frame)
    big = phc(enc, ggr_schedule(enc))
    pieces = [
        frame.iloc[i : i + SMALL_NODE].reset_index(drop=True)
        for i in range(0, 4 * SMALL_NODE, SMALL_NODE)
    ]
    assert big >= sum(phc(p, ggr_schedule(p)) for p in pieces)


def test_ggr_beats_column_stats_on_skewed_data():
    frame = skewed_table(5_000, 10, seed=1)
    assert phc(frame, reorder(frame, method="ggr")) > phc(
        frame, reorder(frame, method="column_stats")
    )


def test_token_aware_weights_change_the_choice():
    """Row 0 can share "a" with row 1 or "b" with row 2, not both. By characters the long
    "a" wins; by (fake) tokens "a" is worth nothing and the multi-token "b" wins."""
    frame = pd.DataFrame({"a": ["a" * 20, "a" * 20, "p"], "b": ["x y z w", "k", "x y z w"]})

    def tokens(text: str) -> int:
        return len(text.split()) if " " in text else 0

    by_tokens_enc = encode(frame, token_length=tokens)
    assert phc(frame, ggr_schedule(frame)) == 400
    assert phc(by_tokens_enc, ggr_schedule(frame, token_length=tokens)) == 16
    assert phc(by_tokens_enc, ggr_schedule(frame)) == 0


def four_tokens_per_char(text: str) -> list[int]:
    return [ord(c) for c in text for _ in range(4)]


@given(tables(max_rows=8, max_cols=4))
@settings(max_examples=60, deadline=None)
def test_with_a_tokenizer_ggr_never_loses_in_token_hit_rate(frame):
    enc = encode(frame, token_length=lambda text: len(four_tokens_per_char(text)))

    def rate(schedule):
        return token_hit_rate(
            row_strings(enc, schedule, sep="\n"), four_tokens_per_char, BLOCK_SIZE
        )

    best = reorder(frame, tokenizer=four_tokens_per_char, block_size=BLOCK_SIZE)
    validate_schedule(best, len(frame), list(frame.columns))
    for other in ("original", "column_stats"):
        assert rate(best) >= rate(reorder(enc, method=other))
    assert rate(best) >= rate(ggr_schedule(enc))


@given(st.lists(st.integers(0, 30), max_size=40), st.integers(0, 200))
@settings(max_examples=200, deadline=None)
def test_repeated_values_by_bincount_or_unique_agree_with_a_count(values, extra):
    """Both ways of counting a node's values (bincount over the code range, or a sort where
    that range is far larger than the node) give the repeated codes, each row's index among
    them and their counts."""
    column = np.array(values, dtype=np.int32)
    num_values = max(values, default=-1) + 1 + extra  # small extra: bincount; large: unique
    counts = {v: values.count(v) for v in values}
    repeated = sorted(v for v, k in counts.items() if k > 1)
    found, local, found_counts = _repeated_values(column, num_values)
    assert found.tolist() == repeated
    assert local.tolist() == [repeated.index(v) if v in repeated else -1 for v in values]
    assert found_counts.tolist() == [counts[v] for v in repeated]


def test_identical_rows_beyond_an_exact_leaf_stay_together():
    """Nine identical rows in a 13-row table: the greedy's group has no free field left
    (every field leads it), and its rows must still come out, together."""
    frame = pd.DataFrame(
        {
            "a": ["x"] * 9 + ["y", "y", "z", "z"],
            "b": ["p"] * 9 + ["q", "r", "r", "q"],
            "c": ["1"] * 9 + ["2", "3", "2", "3"],
        }
    )
    schedule = ggr_schedule(frame, config=GGRConfig(fds=None))
    validate_schedule(schedule, len(frame), list(frame.columns))
    at = {row: k for k, row in enumerate(schedule.rows.tolist())}
    places = sorted(at[r] for r in range(9))
    assert places == list(range(places[0], places[0] + 9))


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=30),
    st.data(),
)
@settings(max_examples=200, deadline=None)
def test_groups_gathers_the_alive_rows_of_each_picked_value(values, data):
    """The array path's gather (one picked value, or several) against a plain loop: the
    alive rows holding each picked value, value after value, with the group bounds."""
    from llm_assets.optimizer.ggr import _Greedy

    inv = np.array(values)
    order = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[order], np.arange(7))
    alive = np.array(data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values))))
    picked = np.array(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)))
    members, bounds = _Greedy._groups(order, starts, picked, alive)
    expected = [[i for i in range(len(values)) if values[i] == p and alive[i]] for p in picked]
    assert members.tolist() == [i for group in expected for i in group]
    assert bounds.tolist() == np.cumsum([0, *map(len, expected)]).tolist()
