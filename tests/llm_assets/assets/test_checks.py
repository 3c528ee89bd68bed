"""Every check and guard of a lineage fails on a corrupted input (negative tests), and passes
on the real thing."""

import dagster as dg
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.assets import checks
from llm_assets.pipeline.rows import ROW
from resources.engine import LLMEngine, Response, RunResult, RunStats
from resources.llm_resources import LLMEngineResource
from tests.llm_assets.assets.frames import outputs_of, plan_and_deduped

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS s FROM reviews r"


def test_plan_check_passes_on_a_permutation_and_fails_on_corruptions():
    plan, deduped = plan_and_deduped()
    assert checks.plan_problems(plan, deduped) == []
    duplicated = plan.assign(position=[0, 1, 1, 3])
    assert "positions are not 0..n-1" in checks.plan_problems(duplicated, deduped)
    missing = plan.iloc[:3].assign(position=range(3))
    assert any("planned inputs" in p for p in checks.plan_problems(missing, deduped))
    ragged = plan.assign(field_order=["review", "review", "review,title", "review"])
    assert checks.plan_problems(ragged, deduped)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_response_check_catches_any_lost_duplicated_or_empty_row(data):
    plan, _ = plan_and_deduped(5)
    outputs = outputs_of(plan)
    assert checks.response_problems(outputs, plan) == []
    corruption = data.draw(st.sampled_from(["drop", "duplicate", "empty", "stranger"]))
    i = data.draw(st.integers(0, 4))
    if corruption == "drop":
        bad = outputs.drop(index=i)
    elif corruption == "duplicate":
        bad = pd.concat([outputs, outputs.iloc[[i]]])
    elif corruption == "empty":
        bad = outputs.copy()
        bad.loc[i, "answer"] = None
    else:
        bad = outputs.copy()
        bad.loc[i, "request_id"] = "other:1"
    assert checks.response_problems(bad, plan)


def test_accounting_check_catches_lost_rows_and_unexplained_statuses():
    base = pd.DataFrame({ROW: range(3)})
    result = pd.DataFrame(
        {
            ROW: range(3),
            "status": ["answered", "skipped", "failed"],
            "reason": [None, "null in LLM field 'x'", "HTTP 503"],
            "passed": [True, False, False],
        }
    )
    assert checks.accounting_problems(result, base) == []
    assert checks.accounting_problems(result.iloc[:2], base)
    assert checks.accounting_problems(result.assign(status=["answered", "lost", "failed"]), base)
    assert checks.accounting_problems(result.assign(reason=[None, None, "HTTP 503"]), base)


class FailingEngine(LLMEngine):
    """Answers every request with an error (a dead server)."""

    name = "failing"
    model = "m"
    hardware = "cpu"

    def run(self, relquery_id, requests):
        responses = [Response(r.id, "", 0, 0, 0, 0.0, 0.0, error="HTTP 503") for r in requests]
        stats = RunStats("failing", "m", "cpu", len(requests), 0, 0, 0, 0.0, 0.0, len(requests))
        return RunResult(responses, stats)


class FailingEngineResource(LLMEngineResource):
    def build_engine(self):
        return FailingEngine()


@pytest.fixture
def reviews(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    path = tmp_path / "reviews.csv"
    path.write_text("id,review\n1,good\n2,bad\n3,\n")
    return path


def test_max_error_rate_fails_llm_outputs_naming_the_errors(reviews):
    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
    resources = {**resources_for("sim"), "llm_engine": FailingEngineResource()}
    result = dg.materialize(list(defs.assets), resources=resources, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "max_error_rate" in str(failure.event_specific_data.error)
    assert "HTTP 503" in str(failure.event_specific_data.error)


def test_max_error_rate_one_keeps_every_failed_row_accounted(reviews):
    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, max_error_rate=1.0)
    resources = {**resources_for("sim"), "llm_engine": FailingEngineResource()}
    result = dg.materialize(list(defs.assets) + list(defs.asset_checks), resources=resources)
    assert result.success
    rows = result.output_for_node("q__result")
    assert rows["status"].tolist() == ["failed", "failed", "skipped"]
    assert all(
        c.passed
        for c in result.get_asset_check_evaluations()
        if c.check_name == "every_row_accounted_for"
    )
