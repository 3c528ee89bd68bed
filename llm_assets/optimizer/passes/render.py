"""Pass: one prompt per scheduled input, exactly as it will be sent (`PromptFormat`): values
reach the prompt as the table holds them. Without a reorder pass, inputs go in file order
with the fields as given.

>>> import pandas as pd
>>> from llm_assets.optimizer.passes.plan import Settings, StagePlan
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Kids? {genre}", ["genre"]))
>>> plan = render(StagePlan(pd.DataFrame({"genre": ["drama", "anime"]}), ("genre",), fmt),
...               Settings())
>>> plan.prompts
('Kids? {genre}\\ngenre: drama', 'Kids? {genre}\\ngenre: anime')
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llm_assets.optimizer import encode
from llm_assets.optimizer.passes.plan import Settings, StagePlan
from llm_assets.optimizer.prompts import render_prompts
from llm_assets.optimizer.schedule import Schedule


def render(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with `prompts` in schedule order (and `truncated` / `errors` all clear)."""
    enc, schedule = plan.enc, plan.schedule
    if schedule is None:
        inputs = plan.inputs()
        if len(inputs) == 0:
            return replace(plan, prompts=(), truncated=(), errors=())
        enc = encode(inputs, plan.fmt.column_order(list(plan.fields)))
        schedule = Schedule.fixed(np.arange(enc.num_rows), enc.fields)
    prompts = tuple(render_prompts(enc, schedule, plan.fmt))
    n = len(prompts)
    return replace(
        plan,
        enc=enc,
        schedule=schedule,
        prompts=prompts,
        truncated=(False,) * n,
        errors=(None,) * n,
    )
