"""LLM filters cheapest first: the rank order is optimal (brute force over every permutation),
the expected cost is what running the filters costs, and the query keeps its meaning."""

from __future__ import annotations

import doctest
import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llm_assets.planning as planning_module
from llm_assets.planning import (
    cheapest_first,
    expected_cost,
    filter_calls,
    order_llm_filters,
    rank,
)
from llm_assets.sql.compiler import compile_sql

ESTIMATE = st.tuples(
    st.floats(0, 1000, allow_nan=False),
    st.one_of(st.floats(0, 1, allow_nan=False), st.sampled_from([0.0, 1.0])),
)
ESTIMATES = st.lists(ESTIMATE, min_size=1, max_size=6).map(
    lambda es: {f"f{i}": e for i, e in enumerate(es)}
)


def test_doctests() -> None:
    assert doctest.testmod(planning_module).failed == 0


@settings(max_examples=300, deadline=None)
@given(estimates=ESTIMATES)
def test_rank_order_is_optimal_against_brute_force(estimates) -> None:
    chosen = expected_cost(cheapest_first(list(estimates), estimates), estimates)
    best = min(expected_cost(p, estimates) for p in itertools.permutations(estimates))
    assert chosen <= best + 1e-9 * max(1.0, best)


@settings(max_examples=30, deadline=None)
@given(estimates=ESTIMATES, seed=st.integers(0, 2**32 - 1))
def test_expected_cost_is_the_cost_of_running_the_filters(estimates, seed) -> None:
    """Rows drawn at random, each filter keeping a row independently with its selectivity:
    the mean cost per row is `expected_cost` within twelve standard errors."""
    order = list(estimates)
    rng = random.Random(seed)
    n = 2000
    spent = 0.0
    for _ in range(n):
        for name in order:
            cost, selectivity = estimates[name]
            spent += cost
            if rng.random() >= selectivity:
                break
    total_cost = sum(c for c, _ in estimates.values())
    tolerance = 6 * total_cost / math.sqrt(n) + 1e-9
    assert abs(spent / n - expected_cost(order, estimates)) <= tolerance


def test_keeping_everything_goes_last_and_zero_division_is_guarded() -> None:
    estimates = {"all": (1.0, 1.0), "free_all": (0.0, 1.0), "some": (500.0, 0.99)}
    assert rank(0.0, 1.0) == math.inf
    assert cheapest_first(["all", "free_all", "some"], estimates) == ("some", "all", "free_all")
    assert cheapest_first(["b", "a"], {"a": (5.0, 0.5), "b": (5.0, 0.5)}) == ("b", "a")


@pytest.mark.parametrize(
    ("estimates", "message"),
    [
        ({"f": (-1.0, 0.5)}, "cost must be a finite number >= 0, got -1.0"),
        ({"f": (1.0, 1.5)}, r"selectivity must be in \[0, 1\]"),
        ({"f": (float("nan"), 0.5)}, "cost must be a finite number"),
        ({}, r"no estimate for LLM filter\(s\) \['f'\]"),
    ],
)
def test_bad_estimates_are_named(estimates, message) -> None:
    with pytest.raises(ValueError, match=message):
        cheapest_first(["f"], estimates)


SQL = (
    "SELECT LLM('Summary of {review}', r.review) AS summary FROM reviews r "
    "WHERE LLM('Is {review} long?', r.review) = 'Yes' AND r.rating > 2 "
    "AND LLM('Is {review} positive?', r.review) = 'Positive' "
    "AND LLM('Is {review} about {genre}?', r.review, r.genre) != 'No'"
)


def test_order_llm_filters_reorders_only_the_filters() -> None:
    query = compile_sql(SQL)
    assert filter_calls(query) == ("llm_1", "llm_2", "llm_3")
    estimates = {"llm_1": (300.0, 0.5), "llm_2": (100.0, 0.2), "llm_3": (50.0, 1.0)}
    ordered = order_llm_filters(query, estimates)
    assert [c.name for c in ordered.llm_calls] == ["llm_2", "llm_1", "llm_3", "summary"]
    assert [f.call_name for f in ordered.llm_filters] == ["llm_2", "llm_1", "llm_3"]
    # the same calls, filters, predicates and projection: only the order changed
    assert set(ordered.llm_calls) == set(query.llm_calls)
    assert set(ordered.llm_filters) == set(query.llm_filters)
    assert (ordered.predicates, ordered.projection) == (query.predicates, query.projection)
    written = expected_cost(filter_calls(query), estimates)
    chosen = expected_cost(filter_calls(ordered), estimates)
    assert (written, chosen) == (300.0 + 0.5 * 100.0 + 0.1 * 50.0, 100.0 + 0.2 * 300.0 + 0.1 * 50)
    assert chosen < written
    with pytest.raises(ValueError, match=r"unknown LLM calls \['nope'\]"):
        order_llm_filters(query, {**estimates, "nope": (1.0, 0.5)})
    with pytest.raises(ValueError, match=r"no estimate for LLM filter\(s\) \['llm_3'\]"):
        order_llm_filters(query, {"llm_1": (1.0, 0.5), "llm_2": (1.0, 0.5)})


def test_a_run_order_naming_an_unknown_call_is_refused():
    """`in_order` (the run order the filter-order asset chose) names only the query's calls."""
    from llm_assets.planning import in_order

    query = compile_sql(
        "SELECT r.id FROM reviews r WHERE LLM('Kids? {review}', r.review) = 'Yes'", name="q"
    )
    assert [c.name for c in in_order(query, ["llm_1"]).llm_calls] == ["llm_1"]
    with pytest.raises(ValueError, match=r"unknown LLM calls \['nope'\] in the run order"):
        in_order(query, ["nope"])
