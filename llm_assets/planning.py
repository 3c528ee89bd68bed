"""Order a query's LLM filters cheapest first (DESIGN.md section 4, "Filter pushdown and LLM
cost in planning").

Several LLM filters in one WHERE are a conjunction, so any order gives the same rows; only
the cost differs, because a row dropped by one filter is never sent to the later ones. With
filter i costing `cost_i` per row reaching it (tokens from the plan) and keeping a fraction
`selectivity_i` of them (estimated on a small sample), the expected cost of an order is

    expected_cost = sum_i cost_i * prod_{j before i} selectivity_j        (per input row)

and, for independent filters, sorting by `rank = cost / (1 - selectivity)` ascending is
optimal: swapping adjacent filters a, b changes the cost by
`P * (cost_a * (1 - s_b) - cost_b * (1 - s_a))`, P >= 0 the fraction reaching them, so a
goes first exactly when `rank_a <= rank_b`. A filter that keeps everything (selectivity 1)
saves nothing downstream: its rank is infinite and it goes last. Ties keep the written order.

>>> estimates = {"kids": (120.0, 0.5), "fresh": (10.0, 0.9)}
>>> cheapest_first(["kids", "fresh"], estimates)
('fresh', 'kids')
>>> expected_cost(["kids", "fresh"], estimates), expected_cost(["fresh", "kids"], estimates)
(125.0, 118.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from llm_assets.query.model import LLMQuery


class FilterEstimate(NamedTuple):
    """What one LLM filter costs and keeps; a plain `(cost, selectivity)` tuple works too."""

    cost: float
    """Expected cost of the call per row that reaches it (e.g. prompt + output tokens); >= 0."""
    selectivity: float
    """Fraction of the rows reaching the filter that it keeps, in [0, 1]."""


def _checked(name: str, estimate: tuple[float, float]) -> FilterEstimate:
    cost, selectivity = (float(v) for v in estimate)
    if not (cost >= 0 and math.isfinite(cost)):
        raise ValueError(f"LLM filter {name!r}: cost must be a finite number >= 0, got {cost}")
    if not 0.0 <= selectivity <= 1.0:
        raise ValueError(
            f"LLM filter {name!r}: selectivity must be in [0, 1] (fraction of rows kept), "
            f"got {selectivity}"
        )
    return FilterEstimate(cost, selectivity)


def rank(cost: float, selectivity: float) -> float:
    """`cost / (1 - selectivity)`; infinite when the filter keeps every row (then it saves
    nothing, whatever it costs).

    >>> rank(10, 0.75), rank(0, 1.0)
    (40.0, inf)
    """
    return math.inf if selectivity >= 1.0 else cost / (1.0 - selectivity)


def expected_cost(order: Sequence[str], estimates: Mapping[str, tuple[float, float]]) -> float:
    """Expected cost per input row of running the filters in `order`: each filter's cost
    times the fraction of rows that every earlier filter kept."""
    total, reaching = 0.0, 1.0
    for name in order:
        if name not in estimates:
            raise ValueError(f"no estimate for LLM filter {name!r}; estimates: {sorted(estimates)}")
        cost, selectivity = _checked(name, estimates[name])
        total += reaching * cost
        reaching *= selectivity
    return total


def cheapest_first(
    names: Sequence[str], estimates: Mapping[str, tuple[float, float]]
) -> tuple[str, ...]:
    """`names` sorted by `rank` ascending (ties in the given order): the order of least
    `expected_cost` when the filters are independent."""
    missing = [n for n in names if n not in estimates]
    if missing:
        raise ValueError(f"no estimate for LLM filter(s) {missing}; estimates: {sorted(estimates)}")
    keyed = [(rank(*_checked(n, estimates[n])), i, n) for i, n in enumerate(names)]
    return tuple(n for _, _, n in sorted(keyed))


def filter_calls(query: LLMQuery) -> tuple[str, ...]:
    """The LLM calls that some WHERE filter applies to, in execution order."""
    filtered = {f.call_name for f in query.llm_filters}
    return tuple(c.name for c in query.llm_calls if c.name in filtered)


def order_llm_filters(query: LLMQuery, estimates: Mapping[str, tuple[float, float]]) -> LLMQuery:
    """`query` with its filtered LLM calls run cheapest first (`cheapest_first`), then the
    other calls in their written order. `estimates` maps each filtered call's name to
    `(cost, selectivity)`; estimates for other calls are ignored, unknown names rejected."""
    calls = {c.name: c for c in query.llm_calls}
    unknown = sorted(set(estimates) - set(calls))
    if unknown:
        raise ValueError(f"estimates name unknown LLM calls {unknown}; calls: {list(calls)}")
    return in_order(query, cheapest_first(filter_calls(query), estimates))


def in_order(query: LLMQuery, first: Sequence[str]) -> LLMQuery:
    """`query` with the LLM calls named in `first` run first, in that order, then the other
    calls as written (the order a run chose, e.g. the `llm_filter_order` asset's `call`
    column); its LLM filters follow their calls. Unknown names are a ValueError."""
    calls = {c.name: c for c in query.llm_calls}
    unknown = [n for n in first if n not in calls]
    if unknown:
        raise ValueError(f"unknown LLM calls {unknown} in the run order; calls: {list(calls)}")
    order = (*first, *(n for n in calls if n not in first))
    position = {name: i for i, name in enumerate(order)}
    return replace(
        query,
        llm_calls=tuple(calls[n] for n in order),
        llm_filters=tuple(sorted(query.llm_filters, key=lambda f: position[f.call_name])),
    )
