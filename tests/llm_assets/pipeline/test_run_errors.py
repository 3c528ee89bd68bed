"""`run_query` (the CLI's path) fails a run whose error rate is over `max_error_rate`, with one
message naming the limit and the first errors, and accounts every row when the limit allows."""

import pandas as pd
import pytest

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.runner import TooManyErrors
from tests.llm_assets.assets.test_checks import FailingEngine

QUERY = compile_sql("SELECT r.id, LLM('Summarize {review}', r.review) AS s FROM reviews r")
TABLE = pd.DataFrame({"id": [1, 2, 3], "review": ["good", "bad", None]})


def test_a_dead_engine_fails_the_run_naming_max_error_rate():
    with pytest.raises(TooManyErrors, match=r"2 of 2 requests failed.*max_error_rate.*HTTP 503"):
        run_query(QUERY, {"reviews": TABLE}, QueryOptions(), FailingEngine())


def test_max_error_rate_one_accounts_every_failed_row():
    run = run_query(QUERY, {"reviews": TABLE}, QueryOptions(max_error_rate=1.0), FailingEngine())
    assert run.result["status"].tolist() == ["failed", "failed", "skipped"]
    assert run.result["reason"].notna().all()
