"""Pass: rows with a null in a field the call reads are skipped with the reason, sent with
an empty value, or refused, as `Settings.null_policy` says.

>>> import pandas as pd
>>> from llm_assets.optimizer.passes.plan import Settings, StagePlan
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Kids? {genre}", ["genre"]))
>>> plan = StagePlan(pd.DataFrame({"genre": ["drama", None]}), ("genre",), fmt)
>>> tuple(skip_nulls(plan, Settings()).skip)
(None, "null in LLM field 'genre'")
>>> tuple(skip_nulls(plan, Settings(null_policy="empty")).skip)
(None, None)
>>> skip_nulls(plan, Settings(null_policy="fail"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: LLM field 'genre' is null in 1 row(s) (first: row 1); set null_policy to ...
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from llm_assets.optimizer.passes.plan import Settings, StagePlan


def skip_nulls(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with `skip` set: the first null field of each row names the reason (`skip`),
    nothing is skipped (`empty`), or a null anywhere is a one-line ValueError (`fail`)."""
    skip = pd.Series(plan.skipped(), index=plan.table.index, dtype=object)
    if settings.null_policy != "empty":
        for name in plan.fields:
            nulls = plan.table[name].isna()
            if settings.null_policy == "fail" and nulls.any():
                first = plan.row_id(int(nulls.to_numpy().nonzero()[0][0]))
                raise ValueError(
                    f"LLM field {name!r} is null in {int(nulls.sum())} row(s) (first: row "
                    f"{first}); set null_policy to 'skip' or 'empty' to handle them"
                )
            skip = skip.where(~(nulls & skip.isna()), f"null in LLM field {name!r}")
    return replace(plan, skip=skip.to_numpy(dtype=object))
