"""Small well-formed frames of one lineage's stages, for the checks' negative tests to
corrupt: the deduplicated rows, their request plan and the engine's outputs."""

import pandas as pd

from llm_assets.pipeline.rows import INPUT, ROW


def plan_and_deduped(n: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(request plan, deduplicated rows) of `n` distinct rows, none skipped, one request
    each, in input order."""
    deduped = pd.DataFrame({ROW: range(n), INPUT: range(n), "_skip": [None] * n})
    plan = pd.DataFrame(
        {
            "position": range(n),
            INPUT: range(n),
            "request_id": [f"q:{i}" for i in range(n)],
            "field_order": ["review"] * n,
        }
    )
    return plan, deduped


def outputs_of(plan: pd.DataFrame) -> pd.DataFrame:
    """One answer per planned request, no error."""
    n = len(plan)
    return pd.DataFrame(
        {"request_id": plan["request_id"], "answer": ["a"] * n, "error": [None] * n}
    )
