"""Row identity, and which rows reach each LLM stage (no Dagster here; assets wrap these).

Row identity: `filtered` holds every row of the join, numbered `_row` (ROW) = 0..n-1 in stored
order; every later table refers to rows by `_row` and to distinct LLM inputs by `_input_id`
(INPUT). Row accounting: each row of `filtered` ends in `result` with exactly one `status`:
`answered` (every LLM stage it reached answered it), `skipped` (with a `reason`: a pushed-down
predicate removed it before the LLM, or a null in an LLM field under the skip policy) or
`failed` (with the engine's or the planner's error).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from llm_assets.query import LLMQuery
from llm_assets.query_parts import LLMCall

ROW = "_row"
INPUT = "_input_id"
SKIP = "_skip"
"""In `filtered`: why a pushed-down predicate removed the row (None: kept)."""


def stage_input(
    base: pd.DataFrame,
    query: LLMQuery,
    previous: Sequence[tuple[LLMCall, pd.DataFrame, pd.DataFrame]],
) -> pd.DataFrame:
    """The rows the next LLM stage runs on: `base` rows no pushed-down predicate removed,
    that every earlier stage answered and whose answers passed that stage's LLM filters, with
    the answers as columns."""
    rows = base[base[SKIP].isna()].drop(columns=[SKIP]) if SKIP in base else base
    for call, deduped, outputs in previous:
        answers = answers_by_row(deduped, outputs)
        rows = rows.merge(answers, on=ROW, how="inner")
        rows = rows[rows["_error"].isna() & rows["_skip"].isna()]
        rows = rows.drop(columns=["_error", "_skip"]).rename(columns={"_answer": call.name})
        for f in query.filters_for(call.name):
            rows = rows[rows[call.name].map(lambda a, f=f: passes_filter(f, a)).astype(bool)]
    return rows.reset_index(drop=True)


def answers_by_row(deduped: pd.DataFrame, outputs: pd.DataFrame) -> pd.DataFrame:
    """Per row of `deduped`: `_answer`, `_error` and `_skip` (skip reason) of its input."""
    joined = deduped[[ROW, INPUT, "_skip"]].merge(
        outputs[[INPUT, "answer", "error"]], on=INPUT, how="left"
    )
    return pd.DataFrame(
        {
            ROW: joined[ROW],
            "_answer": joined["answer"],
            "_error": joined["error"].where(joined["_skip"].isna(), None),
            "_skip": joined["_skip"],
        }
    )


def passes_filter(llm_filter, answer) -> bool:
    """An LLM filter keeps `answer` (an answer that is not text, e.g. a failed row, never)."""
    return isinstance(answer, str) and llm_filter.keeps(answer)
