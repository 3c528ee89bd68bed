"""Every query lineage materialized in-process on small data, with the real DuckDB, Great
Expectations, MLflow (sqlite) and the simulated engine."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from mlflow.tracking import MlflowClient

from jobs.defs.benchmark_queries import BENCHMARKS
from llm_assets.benchmark_queries import TABLES, compile_query
from resources.tracking import MLflowTracker, default_tracking_uri
from tests.conftest import shared_file
from tests.jobs.conftest import run_job

ROOT = Path(__file__).resolve().parents[2]
METRICS = {
    "wall_time_s",
    "engine_time_s",
    "token_hit_rate",
    "prompt_tokens",
    "cached_tokens",
    "n_requests",
    "rows_to_llm",
    "dedup_ratio",
    "cost_usd_self_hosted",
    "cost_usd_openai_gpt4o_mini",
}


def materialized(result, name):
    return {
        e.materialization.asset_key.to_user_string(): {
            k: v.value for k, v in e.materialization.metadata.items()
        }
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] == name
    }


def assert_all_checks_passed(result):
    evaluations = result.get_asset_check_evaluations()
    assert evaluations
    failed = [(e.asset_key.to_user_string(), e.check_name) for e in evaluations if not e.passed]
    assert not failed


@pytest.mark.parametrize("group", sorted(BENCHMARKS))
def test_query_job_runs_every_stage_and_logs_to_mlflow(make_defs, group):
    query_name, dataset = BENCHMARKS[group]
    result = run_job(make_defs(), f"{group}_job")
    assert result.success
    assert_all_checks_passed(result)
    outputs = materialized(result, "llm_outputs")
    assert list(outputs) == [f"{group}/llm_outputs"]
    meta = outputs[f"{group}/llm_outputs"]
    assert meta["n_requests"] > 0 and 0 < meta["token_hit_rate"] < 1
    assert "/runs?workflowType=machine_learning&viewStateShareKey=" in meta["mlflow_runs_table"]
    (counts,) = materialized(result, "result").values()
    assert counts["answered"] + counts["skipped"] + counts["failed"] == counts["rows_in"]
    client = MlflowClient(default_tracking_uri())
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.dagster_run_id = '{result.run_id}'",
    )
    assert len(runs) == len(compile_query(query_name, dataset).llm_calls)
    for run in runs:
        assert METRICS <= set(run.data.metrics)
        assert run.data.params["engine"] == "sim" and run.data.params["query"] == group
        assert run.data.params["data"] == ", ".join(
            f"{t}=asset:{dataset}/{t}" for t in sorted(TABLES[dataset])
        )
        assert run.data.tags["asset_key"].startswith(group)
        assert run.info.run_name.startswith(f"ggr dedup pushdown · {group}/llm_outputs")


def test_ladder_switches_change_cost_not_rows(make_defs):
    defs = make_defs()
    best = run_job(defs, "q2_job", size=300)
    worst = run_job(
        defs,
        "q2_job",
        size=300,
        resources={
            "options": {"config": {"method": "original", "dedup": False, "pushdown": False}},
            "llm_engine": {"config": {"enable_prefix_caching": False}},
        },
    )
    assert best.success and worst.success
    b = materialized(best, "llm_outputs")["q2/llm_outputs"]
    w = materialized(worst, "llm_outputs")["q2/llm_outputs"]
    assert w["token_hit_rate"] == 0 and b["token_hit_rate"] > 0.3
    assert w["n_requests"] > b["n_requests"]
    assert w["engine_time_s"] > 2 * b["engine_time_s"]
    b_rows = best.output_for_node("q2__answer")
    w_rows = worst.output_for_node("q2__answer")
    assert sorted(b_rows["movie_title"]) == sorted(w_rows["movie_title"])


def test_a_bad_option_or_engine_choice_in_run_config_fails_before_any_llm_call(make_defs):
    defs = make_defs()
    result = run_job(defs, "q1_job", size=20, resources={"options": {"config": {"method": "fast"}}})
    assert not result.success and not materialized(result, "llm_outputs")
    text = " ".join(str(e.event_specific_data) for e in result.all_events)
    line = "QueryOptionsResource.method='fast': Input should be 'original', 'column_stats' or 'ggr'"
    assert line in text
    with pytest.raises(dg.DagsterInvalidConfigError, match="gpu.*'A100-40GB'"):
        run_job(defs, "q1_job", size=20, resources={"llm_engine": {"config": {"gpu": "V100"}}})


def test_unreachable_mlflow_warns_and_the_pipeline_succeeds(make_defs, caplog):
    defs = make_defs(tracker=MLflowTracker(tracking_uri="sqlite:////proc/no/such/dir/m.db"))
    result = run_job(defs, "q1_job", size=60)
    assert result.success
    meta = materialized(result, "llm_outputs")["q1/llm_outputs"]
    assert "mlflow_run" not in meta
    assert any("MLflow tracking" in r.message for r in caplog.records)


def test_q1_on_the_real_movies_table(make_defs):
    path = shared_file("data", "movies_small.csv")
    result = run_job(make_defs(), "q1_job", movies=[str(path)])
    assert result.success
    assert_all_checks_passed(result)
    (counts,) = materialized(result, "result").values()
    assert counts["rows_in"] == 1019 and counts["failed"] == 0


def test_q5_on_the_real_squad_table(make_defs):
    path = shared_file("data", "squad_v2_dev_half.csv")
    result = run_job(make_defs(), "q5_job", squad=[str(path)])
    assert result.success
    assert_all_checks_passed(result)
    (counts,) = materialized(result, "result").values()
    assert counts["rows_in"] == 6078 and counts["answered"] == 6078 - 3168


def test_dagster_job_execute_cli(tmp_path, home):
    config = tmp_path / "run.yaml"
    config.write_text("ops:\n  movies_source:\n    config:\n      size: 80\n")
    dagster = Path(sys.executable).with_name("dagster")
    (tmp_path / "dagster").mkdir()
    proc = subprocess.run(
        [
            str(dagster),
            "job",
            "execute",
            "-m",
            "jobs.definitions",
            "-j",
            "q1_job",
            "-c",
            str(config),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RUN_SUCCESS" in proc.stdout + proc.stderr
