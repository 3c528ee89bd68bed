"""Pass: the order the distinct inputs are sent in, and each one's field order, chosen for
the prefix cache (`optimizer.reorder`: GGR by default, never worse than file order or column
statistics). Under `inline` prompts, or with `Settings.reorder_fields` off, fields stay in the
written order and only rows move.

>>> import pandas as pd
>>> from llm_assets.optimizer.passes.plan import Settings, StagePlan
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Fit? {genre} {age}", ["genre", "age"]))
>>> table = pd.DataFrame({"genre": ["drama", "anime", "drama"], "age": ["9", "9", "12"]})
>>> plan = reorder_inputs(StagePlan(table, ("genre", "age"), fmt), Settings())
>>> [(row, order) for row, order in plan.schedule]
[(0, ['genre', 'age']), (2, ['genre', 'age']), (1, ['age', 'genre'])]
"""

from __future__ import annotations

from dataclasses import replace

from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.passes.plan import Settings, StagePlan


def reorder_inputs(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with `enc` (the distinct inputs, in the field order the prompt format reads
    them) and `schedule` (by `settings.method`). No input: both stay None."""
    order = plan.fmt.column_order(list(plan.fields))
    if plan.enc is not None:  # coded by dedup
        enc = plan.enc.select(order)
    else:
        inputs = plan.inputs()
        if len(inputs) == 0:
            return plan
        enc = encode(inputs, order)
    fixed = not (plan.fmt.reorders_fields and settings.reorder_fields)
    schedule = reorder(enc, method=settings.method, fixed_fields=fixed)
    return replace(plan, enc=enc, schedule=schedule)
