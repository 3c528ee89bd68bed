"""The pure checks name exactly what is wrong (the problems land in the Dagster check's
metadata), and only that: one corruption at a time, the whole list compared. Written for the
survivors of the first mutation run (benchmarks/results/mutation.md)."""

import dagster as dg
import pandas as pd

from llm_assets.assets import checks
from llm_assets.assets.definition import QueryDefinition
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.rows import INPUT, ROW, SKIP
from resources.expectations import GXValidator
from tests.llm_assets.assets.frames import outputs_of


def plan_and_deduped(n: int, inputs: list[int] | None = None):
    inputs = list(range(n)) if inputs is None else inputs
    deduped = pd.DataFrame({ROW: range(len(inputs)), INPUT: inputs})
    planned = sorted(i for i in set(inputs) if i >= 0)
    plan = pd.DataFrame(
        {
            "position": range(len(planned)),
            INPUT: planned,
            "request_id": [f"q:{i}" for i in planned],
            "field_order": ["review,title"] * len(planned),
        }
    )
    return plan, deduped


def test_plan_problems_one_at_a_time() -> None:
    plan, deduped = plan_and_deduped(4)
    assert checks.plan_problems(plan, deduped) == []
    assert checks.plan_problems(plan.assign(position=[0, 1, 1, 3]), deduped) == [
        "positions are not 0..n-1"
    ]
    assert checks.plan_problems(plan.assign(position=[1, 2, 3, 4]), deduped) == [
        "positions are not 0..n-1"
    ]
    missing = plan.iloc[:3]
    assert checks.plan_problems(missing, deduped) == [
        "planned inputs differ from the distinct inputs"
    ]
    reordered = plan.assign(field_order=["review,title", "title,review"] * 2)
    assert checks.plan_problems(reordered, deduped) == []
    ragged = plan.assign(field_order=["review,title", "review", "review,title", "title,review"])
    assert checks.plan_problems(ragged, deduped) == [
        "field order ['review'] is not a permutation of the fields ['review', 'title']"
    ]


def test_plan_problems_leave_out_skipped_rows_and_an_empty_plan() -> None:
    # rows skipped before the LLM carry input -1 and are planned nowhere; equal rows share one
    plan, deduped = plan_and_deduped(0, [2, -1, 0, 2, 1, -1])
    assert list(plan[INPUT]) == [0, 1, 2]
    assert checks.plan_problems(plan, deduped) == []
    empty, all_skipped = plan_and_deduped(0, [-1, -1])
    assert checks.plan_problems(empty, all_skipped) == []


def test_response_problems_one_at_a_time() -> None:
    plan, _ = plan_and_deduped(5)
    outputs = outputs_of(plan)
    assert checks.response_problems(outputs, plan) == []
    assert checks.response_problems(outputs.drop(index=2), plan) == [
        "4 output rows for 5 planned requests"
    ]
    twice = pd.concat([outputs, outputs.iloc[[3, 1, 4, 0]]])
    assert checks.response_problems(twice, plan) == [
        "9 output rows for 5 planned requests",
        "request ids answered twice: ['q:3', 'q:1', 'q:4']",
    ]
    strangers = outputs.assign(request_id=["q:0", "x:9", "x:2", "x:5", "x:1"])
    assert checks.response_problems(strangers, plan) == [
        "answers to unplanned requests: ['x:1', 'x:2', 'x:5']"
    ]
    empty = outputs.assign(answer=[None, "a", None, "a", "a"])
    assert checks.response_problems(empty, plan) == ["2 rows with neither an answer nor an error"]
    errors = outputs.assign(
        answer=[None, "a", None, "a", "a"], error=["503", None, "x", None, None]
    )
    assert checks.response_problems(errors, plan) == []


def accounted(statuses: list[str], reasons: list[str | None]) -> pd.DataFrame:
    n = len(statuses)
    return pd.DataFrame(
        {
            ROW: range(n),
            "status": statuses,
            "reason": reasons,
            "passed": [s == "answered" for s in statuses],
        }
    )


def test_accounting_problems_one_at_a_time() -> None:
    base = pd.DataFrame({ROW: range(3)})
    good = accounted(["answered", "skipped", "failed"], [None, "null in 'x'", "HTTP 503"])
    assert checks.accounting_problems(good, base) == []
    assert checks.accounting_problems(good.iloc[:2], base) == ["result has 2 rows, its input 3"]
    other_rows = good.assign(**{ROW: [0, 1, 7]})
    assert checks.accounting_problems(other_rows, base) == ["result has 3 rows, its input 3"]
    lost = good.assign(status=["answered", "lost", "gone"])
    assert checks.accounting_problems(lost, base) == [
        "statuses sum to 1, rows in 3",
        "unknown statuses ['gone', 'lost']",
    ]
    unexplained = accounted(["answered", "skipped", "failed"], [None, None, None])
    assert checks.accounting_problems(unexplained, base) == [
        "2 skipped/failed rows without a reason"
    ]
    answered_with_reason = accounted(["answered"] * 3, ["fine", None, None])
    assert checks.accounting_problems(answered_with_reason, base) == []


SQL = "SELECT r.id, LLM('Summarize {review} {title}', r.review, r.title) AS s FROM reviews r"


def query_definition(**options) -> QueryDefinition:
    return QueryDefinition.build("q", SQL, {"reviews": "reviews.csv"}, **options)


def test_result_passes_only_without_problems_and_joins_them() -> None:
    ok = checks._result([], rows=3)
    assert ok.passed and ok.metadata["problems"].value == "none" and ok.metadata["rows"].value == 3
    bad = checks._result(["a", "b"])
    assert not bad.passed and bad.metadata["problems"].value == "a; b"


def test_the_fields_check_sits_on_the_base_asset_only() -> None:
    qdef = query_definition()
    (spec,) = checks.fields_check_specs(qdef, "filtered")
    assert (spec.name, spec.asset_key, spec.blocking) == (
        checks.FIELDS_CHECK,
        dg.AssetKey(["q", "filtered"]),
        True,
    )
    assert checks.fields_check_specs(qdef, "retrieved") == []


def test_template_columns_expand_retrieved_columns() -> None:
    qdef = query_definition()
    plain = pd.DataFrame(columns=["id", "title", "review", "review_1"])
    assert checks.template_columns(qdef, plain) == ["review", "title"]
    retrieved = pd.DataFrame(columns=["review_2", "id", "review_1", "title"])
    assert checks.template_columns(qdef, retrieved) == ["review_1", "review_2", "title"]
    assert checks.template_columns(qdef, pd.DataFrame(columns=["id"])) == ["review", "title"]


def test_fields_check_fails_on_a_missing_column_and_on_nulls_the_policy_refuses() -> None:
    gx = GXValidator()
    frame = pd.DataFrame({"review": ["good", None], "title": ["a", "b"], SKIP: [None] * 2})
    fail = checks.fields_check(
        query_definition(null_policy="fail"), frame, QueryOptions(null_policy="fail"), gx
    )
    assert not fail.passed and fail.check_name == checks.FIELDS_CHECK
    assert fail.metadata["null_counts"].value == str({"review": 1, "title": 0})
    assert fail.metadata["null_policy"].value == "fail"
    skip = checks.fields_check(query_definition(), frame, QueryOptions(null_policy="skip"), gx)
    assert skip.passed
    skipped_row = frame.assign(**{SKIP: [None, "null in 'review'"]})
    counted = checks.fields_check(
        query_definition(), skipped_row, QueryOptions(null_policy="fail"), gx
    )
    assert counted.passed and counted.metadata["null_counts"].value == str(
        {"review": 0, "title": 0}
    )
    missing = checks.fields_check(
        query_definition(), frame.drop(columns="title"), QueryOptions(), gx
    )
    assert not missing.passed
    complete = frame.assign(review=["good", "bad"]).drop(columns="title")
    strict = QueryOptions(null_policy="fail")
    assert not checks.fields_check(query_definition(), complete, strict, gx).passed
    no_skip_column = frame.drop(columns=SKIP)
    assert checks.fields_check(query_definition(), no_skip_column, QueryOptions(), gx).passed
