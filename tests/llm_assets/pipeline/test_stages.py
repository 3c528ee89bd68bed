"""The pure stage functions behind the assets, on small hand-made tables."""

import pandas as pd
import pytest

from llm_assets.benchmark_queries import compile_query
from llm_assets.pipeline.filtering import locked_connection, run_filtered
from llm_assets.pipeline.plan import placeholder_columns, run_dedup, run_plan
from llm_assets.pipeline.results import accounting, run_answer, run_result
from llm_assets.pipeline.rows import INPUT, ROW, SKIP, stage_input
from llm_assets.pipeline.send import outputs_frame
from resources.engine import Response

Q2 = compile_query("q2", "movies")
CALL = Q2.llm_calls[0]


def tables():
    reviews = pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/b", "m/a", "m/b", "m/a", "m/c", "m/c"],
            "review_content": ["great", "dull", "great", "meh", "fine", None],
            "review_type": ["Fresh", "Fresh", "Fresh", "Rotten", "Fresh", "Fresh"],
            "review_id": [0, 1, 2, 3, 4, 5],
        }
    )
    movies = pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/a", "m/b", "m/c"],
            "movie_title": ["A", "B", "C"],
            "movie_info": ["info a", "info b", "info c"],
        }
    )
    return {"reviews": reviews, "movies": movies}


def test_filtered_keeps_every_joined_row_in_source_order_and_marks_predicate_skips():
    pushed = run_filtered(Q2, tables(), pushdown=True)
    assert len(pushed) == 6
    contents = pushed["review_content"].fillna("<null>").tolist()
    assert contents == ["great", "dull", "great", "meh", "fine", "<null>"]  # stored order
    assert pushed[ROW].tolist() == [0, 1, 2, 3, 4, 5]
    assert pushed[SKIP].notna().tolist() == [False, False, False, True, False, False]
    assert "review_type" in pushed[SKIP].iloc[3]
    kept = stage_input(pushed, Q2, [])
    assert kept["review_content"].fillna("<null>").tolist() == [
        "great",
        "dull",
        "great",
        "fine",
        "<null>",
    ]
    unpushed = run_filtered(Q2, tables(), pushdown=False)
    assert unpushed[SKIP].isna().all()


def fake_answers(plan, answer_of):
    return [
        Response(rid, answer_of(prompt), 10, 0, 1, 0.0, 0.0)
        for rid, prompt in zip(plan["request_id"], plan["prompt"], strict=True)
    ]


def run_all(pushdown, dedup=True, null_policy="skip", answer_of=None):
    answer_of = answer_of or (lambda p: "No" if "dull" in p else "Yes")
    base = run_filtered(Q2, tables(), pushdown)
    rows = stage_input(base, Q2, [])
    fields = [c for cs in placeholder_columns(Q2, CALL, rows).values() for c in cs]
    deduped = run_dedup(rows, fields, dedup, null_policy)
    plan = run_plan(deduped, CALL, fields, "ggr", relquery="t")
    outputs = outputs_frame(plan, fake_answers(plan, answer_of), CALL)
    result = run_result(base, Q2, [(CALL, deduped, outputs)], pushdown)
    return base, deduped, plan, outputs, result


def test_dedup_sends_each_distinct_input_once_and_maps_back():
    _, deduped, plan, outputs, result = run_all(pushdown=True)
    assert len(plan) == 3  # "great"/"info b" twice
    assert deduped.loc[deduped.review_content == "great", INPUT].nunique() == 1
    assert result["llm_1"].fillna("-").tolist() == ["Yes", "No", "Yes", "-", "Yes", "-"]
    assert sorted(plan["position"]) == [0, 1, 2]


def test_pushdown_changes_cost_not_answers():
    on = run_answer(run_all(pushdown=True)[4], Q2)
    off_base, _, off_plan, _, off_result = run_all(pushdown=False)
    off = run_answer(off_result, Q2)
    assert sorted(on["movie_title"]) == sorted(off["movie_title"]) == ["B", "B", "C"]
    assert len(off_plan) > len(run_all(pushdown=True)[2])
    dropped = off_result[~off_result.passed & (off_result.status == "answered")]
    assert any("predicate" in r for r in dropped.reason)


def test_null_fields_are_skipped_with_a_reason_and_accounted():
    _, deduped, plan, _, result = run_all(pushdown=False)
    skipped = result[result.status == "skipped"]
    assert len(skipped) == 1
    assert skipped.reason.iloc[0] == "null in LLM field 'review_content'"
    counts = accounting(result)
    assert counts["answered"] + counts["skipped"] + counts["failed"] == counts["rows_in"] == 6


def test_null_policy_fail_names_the_field():
    base = run_filtered(Q2, tables(), pushdown=False)
    with pytest.raises(ValueError, match="LLM field 'review_content' is null in 1 row"):
        run_dedup(base, ["movie_info", "review_content"], True, "fail")


def test_failed_requests_become_failed_rows():
    base = run_filtered(Q2, tables(), True)
    rows = stage_input(base, Q2, [])
    fields = [c for cs in placeholder_columns(Q2, CALL, rows).values() for c in cs]
    deduped = run_dedup(rows, fields, True)
    plan = run_plan(deduped, CALL, fields, "ggr", relquery="t")
    responses = [Response(rid, "", 0, 0, 0, 0.0, 0.0, error="HTTP 503") for rid in plan.request_id]
    outputs = outputs_frame(plan, responses, CALL)
    result = run_result(base, Q2, [(CALL, deduped, outputs)], True)
    assert result.status.tolist() == ["failed"] * 3 + ["skipped", "failed", "skipped"]
    assert set(result.reason[[0, 1, 2, 4]]) == {"HTTP 503"}
    assert "predicate" in result.reason[3] and "null in LLM field" in result.reason[5]
    assert run_answer(result, Q2).empty


def test_spec_violations_are_recorded_not_coerced():
    _, _, _, outputs, _ = run_all(pushdown=True, answer_of=lambda p: "Maybe")
    assert outputs["answer"].tolist() == ["Maybe"] * len(outputs)
    assert outputs["violation"].str.contains("not one of").all()


def test_the_pre_llm_connection_cannot_touch_files_or_change_that(tmp_path):
    import duckdb

    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    con = locked_connection()
    try:
        for sql in (
            f"SELECT * FROM read_csv('{secret}')",
            f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'",
            f"ATTACH '{tmp_path / 'evil.duckdb'}' AS evil",
            "SET enable_external_access = true",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(sql)
    finally:
        con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.csv"]


def test_send_stage_reports_a_failing_stage_before_its_error_guard_stops_it():
    """`send_stage`'s order: the caller's report (the asset's metrics and MLflow run) sees the
    stage's outputs, then the max_error_rate guard raises; both paths share this order."""
    import dataclasses

    from llm_assets.output_spec import OutputSpec
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.send import send_stage
    from llm_assets.query.parts import LLMCall
    from resources.engine import EngineWrapper, RunResult
    from resources.runner import TooManyErrors
    from resources.sim.engine import SimulatedEngine

    class Failing(EngineWrapper):
        def run(self, relquery_id, requests):
            result = self.inner.run(relquery_id, requests)
            failed = [dataclasses.replace(r, error="boom") for r in result.responses]
            return RunResult(failed, result.stats)

    call = LLMCall("llm_1", "Kids? {genre}", ("m.genre",), OutputSpec.choice(["Yes", "No"]), 2)
    plan = pd.DataFrame(
        {INPUT: [0, 1], "request_id": ["q:0", "q:1"], "prompt": ["a", "b"], "error": [None] * 2}
    )
    reported = []
    with pytest.raises(TooManyErrors, match="2 of 2 requests failed"):
        send_stage(
            Failing(SimulatedEngine()),
            "q:llm_1",
            plan,
            call,
            QueryOptions(max_error_rate=0.0),
            report=lambda outputs, outcome: reported.append(outputs["error"].tolist()),
        )
    assert reported == [["boom", "boom"]]


def test_an_unknown_null_or_context_policy_is_refused_naming_the_accepted_ones():
    """The optimizer passes' settings refuse a policy they do not know (a caller that skips
    `QueryOptions`, e.g. `run_dedup`), naming the value and the accepted ones."""
    from llm_assets.optimizer.passes import Settings

    rows = pd.DataFrame({ROW: [0], "genre": ["drama"]})
    with pytest.raises(ValueError, match=r"unknown null policy 'maybe'; expected one of"):
        run_dedup(rows, ["genre"], True, null_policy="maybe")
    with pytest.raises(ValueError, match=r"unknown context policy 'cut'; expected one of"):
        Settings(context_policy="cut")


def test_fetch_frame_is_df_less_the_dropped_columns_with_shared_strings():
    """`filtered`'s fetch: the same columns, order, dtypes and values as DuckDB's `.df()`
    (every type a predicate column can get, nulls included), equal strings one object."""
    from llm_assets.pipeline.filtering import fetch_frame

    sql = """SELECT * FROM (VALUES
        ('a', 1, TRUE, 1.5, DATE '2020-01-01', TIMESTAMP '2020-01-01 10:00', 2::HUGEINT, 'x', 3),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'x', 1),
        ('a', 2, FALSE, 2.5, DATE '2021-01-01', NULL, 5::HUGEINT, NULL, 2)
    ) t(s, i, b, d, dt, ts, h, s2, o) ORDER BY o"""
    con = locked_connection()
    expected = con.execute(sql).df().drop(columns=["o"])
    got = fetch_frame(con, sql, drop=["o"])
    pd.testing.assert_frame_equal(got, expected)
    assert got["s"][1] is got["s"][2]  # one Python object for the two 'a's
    empty = "SELECT 1 AS a, 'x' AS b WHERE FALSE"
    pd.testing.assert_frame_equal(fetch_frame(con, empty), con.execute(empty).df())
    con.close()
