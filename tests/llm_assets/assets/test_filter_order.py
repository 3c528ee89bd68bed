"""Several LLM filters in one WHERE run cheapest first in the Dagster lineage too: the
`llm_filter_order` asset decides the stages' order each run, the same order and the same rows
as `run_query` (the CLI's path)."""

import dagster as dg
import pandas as pd
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.data.tables import load_table
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

SQL = (
    "SELECT t.movie FROM t WHERE "
    "LLM('Long analysis: is this review of {movie} written by a professional critic who has "
    "seen many films, judging by its style, its vocabulary and its references? {review}', "
    "t.review, t.movie) = 'Yes' AND LLM('Kids? {movie}', t.movie) = 'Yes'"
)


@pytest.fixture
def table(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    path = tmp_path / "movies.csv"
    rows = [(f"m{i % 7}", f"review number {i} " + "long text " * (i % 5)) for i in range(60)]
    pd.DataFrame(rows, columns=["movie", "review"]).to_csv(path, index=False)
    return path


def test_the_lineage_runs_llm_filters_in_the_order_the_cli_chooses(table):
    defs = llm_query_assets("two", SQL, sources={"t": str(table)})
    keys = {k.to_user_string() for a in defs.assets for k in a.keys}
    assert "two/llm_filter_order" in keys
    result = dg.materialize(
        list(defs.assets) + list(defs.asset_checks), resources=resources_for("sim")
    )
    assert result.success
    chosen = result.output_for_node("two__llm_filter_order")["call"].tolist()
    assert chosen == ["llm_2", "llm_1"]  # the short prompt first, although written second
    plan = result.output_for_node("two_plan", "request_plan")
    assert plan["request_id"].str.startswith(f"two:{chosen[0]}:").all()  # stage 1 = cheapest
    rows = result.output_for_node("two__result")

    cli = run_query(
        compile_sql(SQL, name="two"), {"t": load_table(table)}, QueryOptions(), SimulatedEngine()
    )
    assert list(cli.filter_order.chosen) == chosen
    assert (
        cli.filter_order.report()["expected_tokens_per_row_chosen"]
        <= (cli.filter_order.report()["expected_tokens_per_row_written"])
    )
    assert rows["status"].tolist() == cli.result["status"].tolist()
    assert rows["passed"].tolist() == cli.result["passed"].tolist()


def test_one_filter_or_ordering_off_keeps_the_written_order(table):
    one = llm_query_assets(
        "one",
        "SELECT t.movie FROM t WHERE LLM('Kids? {movie}', t.movie) = 'Yes'",
        sources={"t": str(table)},
    )
    off = llm_query_assets("off", SQL, sources={"t": str(table)}, order_llm_filters=False)
    for defs in (one, off):
        keys = {k.path[-1] for a in defs.assets for k in a.keys}
        assert "llm_filter_order" not in keys
