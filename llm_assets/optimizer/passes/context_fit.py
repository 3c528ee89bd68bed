"""Pass: every prompt fits the context window the engine leaves (`Settings.max_prompt_tokens`):
a longer prompt either has its longest value cut just enough, marked ` [truncated]`
(`context_policy="truncate"`), or gets an error and is never sent (`"fail"`).

>>> import pandas as pd
>>> from llm_assets.optimizer.passes.plan import Settings, StagePlan
>>> from llm_assets.optimizer.passes.render import render
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Sum up: {text}", ["text"]), "values")
>>> plan = render(StagePlan(pd.DataFrame({"text": ["a b", "a b c d e f g h"]}), ("text",),
...                         fmt), Settings())
>>> words = lambda text: len(text.split())
>>> failed = fit_context(plan, Settings(max_prompt_tokens=6, count_tokens=words))
>>> failed.errors[0], failed.errors[1].split(" (")[0]
(None, 'prompt has 11 tokens, over the 6 the context window leaves')
>>> cut = fit_context(plan, Settings(max_prompt_tokens=6, count_tokens=words,
...                                  context_policy="truncate"))
>>> cut.prompts[1], cut.truncated
('Sum up: {text}\\na b  [truncated]', (False, True))
"""

from __future__ import annotations

from dataclasses import replace

from llm_assets.optimizer.passes.plan import Settings, StagePlan
from llm_assets.optimizer.prompts import fit_row

TOO_LONG_HINT = {
    "fail": "use 'truncate' to cut the longest field",
    "truncate": "even with the longest field cut to nothing it does not fit",
}


def fit_context(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with each prompt over `settings.max_prompt_tokens` cut to fit (`truncated`) or
    failed (`errors`); unchanged without a limit, a token counter or prompts. With
    `settings.tokens_within_chars`, a prompt no longer than the limit in characters is not
    counted (it fits whatever its count)."""
    limit, count = settings.max_prompt_tokens, settings.count_tokens
    if limit is None or count is None or not plan.prompts:
        return plan
    short = settings.tokens_within_chars
    if short and max(map(len, plan.prompts)) <= limit:
        return plan  # every prompt has at most as many tokens as characters: all fit
    prompts, truncated, errors = list(plan.prompts), list(plan.truncated), list(plan.errors)
    enc = plan.enc
    index = {f: j for j, f in enumerate(enc.fields)}
    for k, (row, order) in enumerate(plan.schedule):
        if short and len(prompts[k]) <= limit:
            continue
        n_tokens = count(prompts[k])
        if n_tokens <= limit:
            continue
        values = [enc.cell(row, index[f]) for f in order]
        fitted = None
        if settings.context_policy == "truncate":
            fitted = fit_row(plan.fmt, order, values, count, limit)
        if fitted is None:
            hint = TOO_LONG_HINT[settings.context_policy]
            errors[k] = (
                f"prompt has {n_tokens} tokens, over the {limit} the context window leaves "
                f"(context_policy={settings.context_policy!r}; {hint})"
            )
        else:
            prompts[k], truncated[k] = fitted, True
    return replace(plan, prompts=tuple(prompts), truncated=tuple(truncated), errors=tuple(errors))
