"""The optimizer passes of one LLM stage, as rules (like sqlglot's optimizer): an ordered
tuple of functions with one signature, `(StagePlan, Settings) -> StagePlan`, applied in turn
by `optimize`. A caller can list the rules, drop one or add its own:

>>> [rule.__name__ for rule in RULES]
['skip_nulls', 'dedup', 'reorder_inputs', 'render', 'fit_context']
>>> import pandas as pd
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Kids? {genre}", ["genre"]))
>>> plan = StagePlan(pd.DataFrame({"genre": ["drama", "anime", "drama"]}), ("genre",), fmt)
>>> optimize(plan, Settings()).prompts
('Kids? {genre}\\ngenre: anime', 'Kids? {genre}\\ngenre: drama')
>>> no_dedup = tuple(r for r in RULES if r is not dedup)
>>> len(optimize(plan, Settings(), rules=no_dedup).prompts)
3

The filter pushdown and the order of several LLM filters act on the whole query before any
stage has rows (`query.render.pre_llm_sql`, `planning.order_llm_filters`); these rules start
from the rows that reach one stage. Each pass's module docstring is its spec (doctested);
`tests/fixtures/optimizer/` holds a golden plan per pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llm_assets.optimizer.passes.context_fit import fit_context
from llm_assets.optimizer.passes.dedup import dedup
from llm_assets.optimizer.passes.nulls import skip_nulls
from llm_assets.optimizer.passes.plan import Settings, StagePlan
from llm_assets.optimizer.passes.render import render
from llm_assets.optimizer.passes.reorder import reorder_inputs

Rule = Callable[[StagePlan, Settings], StagePlan]

RULES: tuple[Rule, ...] = (skip_nulls, dedup, reorder_inputs, render, fit_context)
"""The passes in the order they run: which rows are sent, which share a request, the order
requests go in, their prompts, and the context-window fit."""

__all__ = [
    "RULES",
    "Rule",
    "Settings",
    "StagePlan",
    "dedup",
    "fit_context",
    "optimize",
    "render",
    "reorder_inputs",
    "skip_nulls",
]


def optimize(plan: StagePlan, settings: Settings, rules: Sequence[Rule] = RULES) -> StagePlan:
    """`plan` rewritten by each rule in `rules`, in order."""
    for rule in rules:
        plan = rule(plan, settings)
    return plan
