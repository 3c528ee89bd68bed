"""MLflow experiments open on the runs table in the `LLM stages` view (tagged as model
development, not GenAI); what MLflow's UI does with them is in tests/jobs/test_mlflow_ui.py."""

import json

from mlflow.tracking import MlflowClient

from resources.tracking import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    RUN_NAME_COLUMN,
    VIEW_TAG,
    MLflowTracker,
)


def test_experiments_are_tagged_so_mlflow_opens_the_runs_table(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    old = client.create_experiment("made-before", artifact_location=tmp_path.as_uri())
    tracker = MLflowTracker(tracking_uri=uri)
    for name in ("made-before", "made-now"):
        links = tracker.log_run(name, "a run", {"p": 1}, {"m": 0.5}, {"t": "x"}, columns=["m"])
        assert links and "/runs/" in links.run
        eid = client.get_experiment_by_name(name).experiment_id
        assert links.table.endswith(
            f"/#/experiments/{eid}/runs?workflowType=machine_learning&viewStateShareKey=llm-assets"
        )
        tags = client.get_experiment_by_name(name).tags
        assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_the_saved_view_gains_columns_and_width_and_keeps_the_rest(tmp_path):
    tracker = MLflowTracker(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient(tracker.uri())

    def state():
        envelope = json.loads(client.get_experiment_by_name("e").tags[VIEW_TAG])
        assert envelope["name"] == "LLM stages" and envelope["createdAt"] > 0
        return json.loads(envelope["state"])

    tracker.log_run("e", "short", {}, {"a": 1.0}, {}, columns=["a"])
    first = state()
    assert first["selectedColumns"] == ["metrics.`a`"]
    envelope = json.loads(client.get_experiment_by_name("e").tags[VIEW_TAG])
    envelope["state"] = json.dumps(first | {"groupBy": "params.method"})  # changed in the UI
    client.set_experiment_tag(
        client.get_experiment_by_name("e").experiment_id, VIEW_TAG, json.dumps(envelope)
    )
    tracker.log_run("e", "a much longer run name " * 3, {}, {"b": 1.0}, {}, columns=["b", "a"])
    second = state()
    assert second["selectedColumns"] == ["metrics.`a`", "metrics.`b`"]
    assert second["columnOrder"] == [RUN_NAME_COLUMN, "metrics.`a`", "metrics.`b`"]
    assert second["columnWidths"][RUN_NAME_COLUMN] > first["columnWidths"][RUN_NAME_COLUMN]
    assert second["groupBy"] == "params.method"


def test_metrics_are_logged_to_six_significant_digits_counts_exact(tmp_path):
    """Issue 35, item 3: the UI showed float noise (`1.2767808799999998`). Six significant
    digits, never fewer than the integer part: counts and large totals stay exact."""
    tracker = MLflowTracker(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    logged = {"engine_time_s": 1.2767808799999998, "cost_usd": 0.000123456789,
              "hit": 2 / 3, "tokens": 123456789, "big": 1234567.891, "zero": 0.0,
              "negative": -0.1 - 0.2}  # fmt: skip
    links = tracker.log_run("e", "r", {}, logged, {})
    run_id = links.run.rsplit("/", 1)[1]
    got = MlflowClient(tracker.uri()).get_run(run_id).data.metrics
    assert got == {"engine_time_s": 1.27678, "cost_usd": 0.000123457, "hit": 0.666667,
                   "tokens": 123456789.0, "big": 1234568.0, "zero": 0.0,
                   "negative": -0.3}  # fmt: skip
