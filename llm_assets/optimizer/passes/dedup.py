"""Pass: rows whose field values are all equal share one request (exact dedup, section 4 of
the relational paper); skipped rows get none.

>>> import pandas as pd
>>> from llm_assets.optimizer.passes.plan import Settings, StagePlan
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Kids? {genre}", ["genre"]))
>>> plan = StagePlan(pd.DataFrame({"genre": ["drama", "anime", "drama"]}), ("genre",), fmt)
>>> dedup(plan, Settings()).input_ids.tolist()
[0, 1, 0]
>>> dedup(plan, Settings(dedup=False)).input_ids.tolist()
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llm_assets.optimizer.dedup import dedup_rows
from llm_assets.optimizer.passes.plan import Settings, StagePlan
from llm_assets.optimizer.table import encode


def dedup(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with `input_ids`: equal for rows whose values are equal in every field (ids in
    order of first occurrence) when `settings.dedup`, else one per row; -1 for skipped rows.
    With dedup, also `enc`: the distinct inputs coded (input k in row k, `plan.fields` in
    order), which the later passes use instead of coding the inputs again."""
    live = plan.live()
    ids = np.full(plan.n_rows, -1, dtype=np.int64)
    if not live.any():
        return replace(plan, input_ids=ids)
    if not settings.dedup:
        ids[live] = np.arange(int(live.sum()))
        return replace(plan, input_ids=ids)
    rows = plan.table if live.all() else plan.table.loc[live].reset_index(drop=True)
    coded = encode(rows, list(plan.fields))
    found = dedup_rows(coded)
    ids[live] = found.inverse
    return replace(plan, input_ids=ids, enc=coded.take(found.distinct))
