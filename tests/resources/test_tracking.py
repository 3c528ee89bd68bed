"""MLflow experiments open on the runs table (tagged as model development, not GenAI)."""

from mlflow.tracking import MlflowClient

from resources.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, MLflowTracker


def test_experiments_are_tagged_so_mlflow_opens_the_runs_table(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    old = client.create_experiment("made-before", artifact_location=tmp_path.as_uri())
    tracker = MLflowTracker(tracking_uri=uri)
    for name in ("made-before", "made-now"):
        url = tracker.log_run(name, "a run", {"p": 1}, {"m": 0.5}, {"t": "x"})
        assert url and "/runs/" in url
        tags = client.get_experiment_by_name(name).tags
        assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
