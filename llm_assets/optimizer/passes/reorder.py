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

TOKEN_SCORED_INPUTS = 2_048
"""With the engine's tokenizer (`Settings.tokenize`), stages of at most this many distinct
inputs pick their order by the token hit rate of their prompts as sent, in the engine's
blocks (each candidate's prompts rendered and tokenized); larger ones by char hit rate, which
costs no tokenizing (there a whole block is a small share of what a shared prefix saves).
Measured: 833 distinct (title, review, movie_info) inputs of movies_small, GGR's pass 0.013 s
by chars, 0.21 s with the sim's approximate tokenizer, 0.66 s with Llama 3's."""


def reorder_inputs(plan: StagePlan, settings: Settings) -> StagePlan:
    """`plan` with `enc` (the distinct inputs, in the field order the prompt format reads
    them) and `schedule` (by `settings.method`). No input: both stay None.

    Invariant: with `settings.tokenize` and `block_size` the engine's and at most
    `TOKEN_SCORED_INPUTS` inputs, GGR's plan has a token hit rate of its prompts (as an
    unbounded prefix cache of that engine counts them) at least file order's."""
    order = plan.fmt.column_order(list(plan.fields))
    if plan.enc is not None:  # coded by dedup
        enc = plan.enc.select(order)
    else:
        inputs = plan.inputs()
        if len(inputs) == 0:
            return plan
        enc = encode(inputs, order)
    fixed = not (plan.fmt.reorders_fields and settings.reorder_fields)
    tokens = settings.tokenize is not None and enc.num_rows <= TOKEN_SCORED_INPUTS
    schedule = reorder(
        enc,
        method=settings.method,
        fixed_fields=fixed,
        tokenizer=settings.tokenize if tokens else None,
        block_size=settings.block_size if tokens else None,
        fmt=plan.fmt,
    )
    return replace(plan, enc=enc, schedule=schedule)
