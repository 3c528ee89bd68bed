"""A row a WHERE predicate removes is `skipped` with the predicate as its reason, and the
reason says what SQL saw: `is false` when the predicate was false, `is null (unknown)` when it
was NULL (issue 35, item 3: a NULL predicate was reported as false). Both places a predicate
runs are covered: pushed down into DuckDB before the LLM, and after it (`pushdown=False`)."""

import pandas as pd
import pytest

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

SQL = (
    "SELECT r.id, LLM('Summarize {review}', r.review) AS s FROM reviews r "
    "WHERE TRY_CAST(r.rating AS DOUBLE) >= 2"
)
TABLE = pd.DataFrame(
    {"id": ["1", "2", "3"], "rating": ["3", "1", "N/A"], "review": ["good", "bad", "fine"]}
)


@pytest.mark.parametrize("pushdown", [True, False])
def test_a_null_predicate_is_reported_as_null_not_false(pushdown):
    run = run_query(
        compile_sql(SQL, name="q"),
        {"reviews": TABLE},
        QueryOptions(pushdown=pushdown),
        SimulatedEngine(),
    )
    result = run.result.set_index("id")
    assert result["passed"].tolist() == [True, False, False]
    assert result.loc["1", "reason"] is None or pd.isna(result.loc["1", "reason"])
    false, null = result.loc["2", "reason"], result.loc["3", "reason"]
    assert false.startswith("predicate TRY_CAST(") and false.endswith(" is false"), false
    assert null.startswith("predicate TRY_CAST(") and null.endswith(" is null (unknown)"), null
