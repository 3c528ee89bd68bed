"""The Dagster checks of a lineage (not only the pure functions behind them) fail on corrupted
frames: each blocking check, invoked directly as Dagster allows, returns passed=False."""

import pandas as pd
import pytest

from llm_assets import llm_query_assets
from llm_assets.pipeline.rows import ROW
from tests.llm_assets.assets.frames import outputs_of, plan_and_deduped

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS s FROM reviews r"
N = 4


@pytest.fixture(scope="module")
def lineage_checks():
    # an upstream asset: definition load reads no file (a missing one is refused there)
    defs = llm_query_assets("q", SQL, sources={"reviews": {"asset": "raw/reviews"}})
    return {key.name: check for check in defs.asset_checks for key in check.check_keys}


def frames():
    plan, deduped = plan_and_deduped(N)
    base = pd.DataFrame({ROW: range(N)})
    result = pd.DataFrame(
        {
            ROW: range(N),
            "status": ["answered"] * N,
            "reason": [None] * N,
            "passed": [True] * N,
            "s": ["a"] * N,  # the LLM call's answers
        }
    )
    return deduped, plan, outputs_of(plan), base, result


def test_plan_is_a_permutation_fails_on_a_repeated_position(lineage_checks):
    check = lineage_checks["plan_is_a_permutation"]
    deduped, plan, *_ = frames()
    assert check(request_plan=plan, deduped=deduped).passed
    bad = check(request_plan=plan.assign(position=[0, 1, 1, 3]), deduped=deduped)
    assert not bad.passed and "positions are not 0..n-1" in bad.metadata["problems"].text


def test_one_response_per_request_fails_on_a_lost_answer(lineage_checks):
    check = lineage_checks["one_response_per_request"]
    _, plan, outputs, *_ = frames()
    assert check(llm_outputs=outputs, plan=plan).passed
    assert not check(llm_outputs=outputs.iloc[1:], plan=plan).passed


def test_every_row_accounted_for_fails_on_a_lost_row(lineage_checks):
    check = lineage_checks["every_row_accounted_for"]
    *_, base, result = frames()
    assert check(result=result, base=base).passed
    bad = check(result=result.iloc[:-1], base=base)
    assert not bad.passed and "rows" in bad.metadata["problems"].text
