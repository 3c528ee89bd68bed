"""Several LLM filters run cheapest first: each is sent a seeded sample of the rows that reach
it, and they are ordered by prompt tokens per row / (1 - share kept) (`llm_assets.planning`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import call_max_tokens, plan_stage
from llm_assets.pipeline.rows import stage_input
from llm_assets.pipeline.send import outputs_frame, requests_from_plan
from llm_assets.query.model import LLMQuery
from resources.engine import LLMEngine

SAMPLE_ROWS = 32
"""Rows per LLM filter sent first to estimate its selectivity (when a query has several)."""


@dataclass(frozen=True)
class FilterOrder:
    """The LLM filters' written and chosen order, with their estimates (cost in prompt
    tokens per row reaching the filter, selectivity from a sample) and expected costs."""

    written: tuple[str, ...]
    chosen: tuple[str, ...]
    estimates: dict[str, tuple[float, float]]
    sample_requests: int

    def report(self) -> dict:
        from llm_assets.planning import expected_cost

        return {
            "written_order": list(self.written),
            "chosen_order": list(self.chosen),
            "estimates": {
                k: {"tokens_per_row": round(c, 1), "selectivity": round(s, 4)}
                for k, (c, s) in self.estimates.items()
            },
            "expected_tokens_per_row_written": round(
                expected_cost(self.written, self.estimates), 1
            ),
            "expected_tokens_per_row_chosen": round(expected_cost(self.chosen, self.estimates), 1),
            "sample_requests": self.sample_requests,
        }


def estimate_filter_order(
    query: LLMQuery,
    base: pd.DataFrame,
    options: QueryOptions,
    engine: LLMEngine,
    sample_rows: int = SAMPLE_ROWS,
) -> FilterOrder | None:
    """Send each LLM filter a seeded sample of the rows (at most `sample_rows`), and order
    the filters by cost / (1 - selectivity); None when the query has fewer than two."""
    from llm_assets.planning import cheapest_first, filter_calls

    names = filter_calls(query)
    if len(names) < 2:
        return None
    rows = stage_input(base, query, [])
    sample = rows.sample(min(sample_rows, len(rows)), random_state=0) if len(rows) else rows
    by_name = {c.name: c for c in query.llm_calls}
    estimates, sent = {}, 0
    for name in names:
        call = by_name[name]
        _, plan = plan_stage(query, call, sample, options, engine, f"{query.name}:sample")
        requests = requests_from_plan(plan, call, call_max_tokens(call, options))
        result = engine.run(f"{query.name}:sample:{name}", requests) if requests else None
        sent += len(requests)
        if result is None or not result.responses:
            estimates[name] = (0.0, 1.0)
            continue
        outputs = outputs_frame(plan, result.responses, call)
        answers = outputs["answer"].dropna()
        kept = sum(all(f.keeps(a) for f in query.filters_for(name)) for a in answers)
        tokens = result.stats.prompt_tokens + result.stats.output_tokens
        per_row = tokens / len(sample)  # duplicates share a request: cost per row reaching
        estimates[name] = (per_row, kept / len(answers) if len(answers) else 1.0)
    return FilterOrder(names, cheapest_first(names, estimates), estimates, sent)
