"""Targeted checks for pipeline behaviour the mutation report found unguarded: the filter
order report's rounding, `plan`'s prediction of a later stage, `run_query(send=False)`, the
filter order applied to a run, and reading `schema.table` from a DuckDB file."""

from unittest import mock

import duckdb
import pandas as pd
import pytest

from llm_assets.pipeline import predict
from llm_assets.pipeline.filter_order import FilterOrder
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.predict import plan_query
from llm_assets.pipeline.run import run_query
from llm_assets.pipeline.sources import read_duckdb_table
from llm_assets.sql.compiler import compile_sql
from tests.llm_assets.answering import AnsweringEngine

TWO = (
    "SELECT t.movie FROM t WHERE "
    "LLM('Long analysis: is this review of {movie} written by a professional critic who has "
    "seen many films, judging by its style, its vocabulary and its references? {review}', "
    "t.review, t.movie) = 'Yes' AND LLM('Kids? {movie}', t.movie) = 'Yes'"
)
ONE = "SELECT t.movie FROM t WHERE LLM('Kids? {movie}', t.movie) = 'Yes'"


def table(n: int = 40) -> pd.DataFrame:
    rows = [(f"m{i % 7}", f"review number {i} " + "long text " * (i % 5)) for i in range(n)]
    return pd.DataFrame(rows, columns=["movie", "review"])


def test_filter_order_report_keeps_one_decimal_of_the_expected_cost():
    order = FilterOrder(
        written=("a", "b"),
        chosen=("b", "a"),
        estimates={"a": (10.26, 0.5), "b": (3.14, 0.25)},
        sample_requests=4,
    )
    report = order.report()
    assert report["expected_tokens_per_row_written"] == 11.8  # 10.26 + 0.5 * 3.14
    assert report["expected_tokens_per_row_chosen"] == 5.7  # 3.14 + 0.25 * 10.26


@pytest.mark.parametrize("answer", ["Yes", "No"])
def test_plan_predicts_the_rows_reaching_a_later_stage_from_a_sample(answer):
    """With a sample smaller than the input, the later stage's rows are drawn from the input:
    all of them when the earlier filter keeps every sampled row, none when it keeps none."""
    query = compile_sql(TWO, name="two")
    options = QueryOptions(order_llm_filters=False)
    engine = AnsweringEngine(lambda r: answer)
    plan = plan_query(query, {"t": table()}, options, engine, sample_rows=10)
    assert plan.sample_rows == 10
    first, second = plan.stages
    assert first.rows == 40
    assert second.share == (1.0 if answer == "Yes" else 0.0)
    assert second.rows == (40 if answer == "Yes" else 0)


def test_run_query_without_send_plans_the_first_stage_and_sends_nothing():
    engine = AnsweringEngine(lambda r: "Yes")
    run = run_query(
        compile_sql(ONE, name="one"), {"t": table()}, QueryOptions(), engine, send=False
    )
    assert engine.sent == 0
    (stage,) = run.stages
    assert stage.call.name == "llm_1"
    assert len(stage.deduped) == 40
    assert stage.plan["request_id"].nunique() == 7  # one request per distinct movie


def test_a_run_sends_its_llm_filters_in_the_chosen_order():
    # the short filter drops the rows of m0..m2; the long one keeps every row
    engine = AnsweringEngine(
        lambda r: "No" if r.prompt.startswith("Kids?") and r.prompt[-1] in "012" else "Yes"
    )
    run = run_query(compile_sql(TWO, name="two"), {"t": table()}, QueryOptions(), engine)
    chosen = list(run.filter_order.chosen)
    assert chosen == ["llm_2", "llm_1"]  # the short prompt first, although written second
    assert [s.call.name for s in run.stages] == chosen
    assert run.stages[1].deduped.shape[0] < 40  # the second stage sees only kept rows


def test_read_duckdb_table_reads_the_named_schema(tmp_path):
    path = str(tmp_path / "w.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE SCHEMA s")
    con.execute("CREATE TABLE s.t AS SELECT 1 AS x")
    con.execute("CREATE TABLE main.t AS SELECT 2 AS x")
    con.close()
    assert read_duckdb_table(path, "s.t").column("x").to_pylist() == [1]
    assert read_duckdb_table(path, "main.t").column("x").to_pylist() == [2]
    assert read_duckdb_table(path, "t").column("x").to_pylist() == [2]


@pytest.mark.parametrize("kept", ["m0 m1 m2 m3 m4 m5 m6", "m1 m3"])
def test_a_later_stage_is_drawn_only_from_rows_the_earlier_stage_does_not_skip(kept):
    """A quarter of the reviews are null: the first stage (which reads `review`) skips those
    rows, so they never reach the second. With a sample smaller than the input, the second
    stage's rows are drawn from the input; none of them may be a skipped row, and when the
    first filter keeps every answered row all 30 answerable rows reach the second stage."""
    frame = table()
    frame.loc[frame.index % 4 == 0, "review"] = None
    query = compile_sql(TWO, name="two")
    options = QueryOptions(order_llm_filters=False)
    engine = AnsweringEngine(
        lambda r: "Yes" if any(f" {m}" in r.prompt for m in kept.split()) else "No"
    )
    with mock.patch.object(predict, "guarded_plan", wraps=predict.guarded_plan) as planned:
        plan = plan_query(query, {"t": frame}, options, engine, sample_rows=10)
    assert plan.sample_rows == 10
    first, second = plan.stages
    assert first.rows == 40 and first.rows_to_llm < 40  # the nulls are skipped, not sent
    drawn = planned.call_args_list[1].args[2]  # the rows planned for the second stage
    assert len(drawn) == second.rows
    assert drawn["review"].notna().all()
    if kept.count("m") == 7:
        assert second.share == 1.0 and second.rows == 30
    else:
        assert 0 < second.rows < 30
