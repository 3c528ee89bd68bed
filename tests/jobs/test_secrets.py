"""An API key given through `dg.EnvVar` reaches the server and nothing else: no log line,
no MLflow param/tag/artifact, no Dagster metadata or event, no warehouse or cache file."""

import logging
import secrets

import dagster as dg
from mlflow.tracking import MlflowClient

from jobs.definitions import build_defs
from jobs.resources import resources_for
from resources.llm_resources import OpenAIEngineResource, ResponseCacheResource
from resources.sim.server import ServerConfig, serve_in_thread
from resources.tracking import default_tracking_uri

ENV_VAR = "LLM_ASSETS_TEST_SECRET_KEY"


def test_api_key_never_leaks_from_a_pipeline_run(home, monkeypatch, caplog, capfd):
    key = f"sk-secret-{secrets.token_hex(12)}"
    monkeypatch.setenv(ENV_VAR, key)
    caplog.set_level(logging.DEBUG)
    config = ServerConfig(served_model_name="llama-2-7b", api_key=key)
    with serve_in_thread(config=config, model="llama-2-7b") as base_url:
        engine = OpenAIEngineResource(
            base_url=base_url, model="llama-2-7b", api_key=dg.EnvVar(ENV_VAR)
        )
        resources = {
            **resources_for("openai"),
            "llm_engine": engine,
            "response_cache": ResponseCacheResource(path=str(home / "responses.duckdb")),
        }
        with dg.instance_for_test() as instance:
            job = build_defs(resources).resolve_job_def("q2_job")
            config = {"ops": {"movies_source": {"config": {"size": 60}}}}
            result = job.execute_in_process(run_config=config, instance=instance)
            assert result.success
            outputs = [
                e.materialization
                for e in result.get_asset_materialization_events()
                if e.materialization.asset_key.path[-1] == "llm_outputs"
            ]
            assert outputs and outputs[0].metadata["requests_sent"].value > 0  # key worked
            events = instance.all_logs(result.run_id)
            assert key not in "".join(str(e) for e in events)
            assert key not in str(instance.get_run_by_id(result.run_id))
    client = MlflowClient(default_tracking_uri())
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs
    for run in runs:
        assert key not in str(run.data.params) + str(run.data.tags) + str(run.data.metrics)
    for path in home.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    captured = capfd.readouterr()
    assert key not in captured.out + captured.err
    assert all(key not in r.getMessage() for r in caplog.records)
