"""MLflow tracking of LLM stage materializations (one MLflow run per `llm_outputs`).

Default store: `sqlite:///$LLM_ASSETS_HOME/mlflow.db` (`./.llm_assets/` by default), the
artifact root beside it. An unreachable or broken store never fails the pipeline: `log_run`
logs a warning and returns None. Only the params, metrics and tags passed in are logged
(no environment, no config dump), so secrets cannot leak through this path.

Experiments are tagged `mlflow.experimentKind = custom_model_development`, so MLflow 3 opens
them on the runs table with their metrics (not the GenAI view, where latency, tokens and cost
would read "No data"). Several processes logging to one sqlite store at once (two runs) are
serialised by a lock file beside the store: creating a fresh store is not safe concurrently.
"""

from __future__ import annotations

import fcntl
import logging
import math
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from resources.home import llm_assets_home

log = logging.getLogger(__name__)

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
"""What MLflow 3's UI calls "Model training": the runs table with metric columns."""


@contextmanager
def _store_lock(uri: str):
    """An exclusive lock on `<store>.lock` for a sqlite store (no-op for other stores)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def default_tracking_uri() -> str:
    return f"sqlite:///{llm_assets_home() / 'mlflow.db'}"


class MLflowTracker(dg.ConfigurableResource):
    """Logs one MLflow run per call to `log_run`."""

    tracking_uri: str | None = None
    """MLflow tracking URI; default sqlite under $LLM_ASSETS_HOME."""
    ui_url: str = "http://127.0.0.1:5000"
    """Where `make mlflow-ui` serves the UI; used to build run links."""
    enabled: bool = True
    """Turn tracking off entirely."""

    def uri(self) -> str:
        return self.tracking_uri or default_tracking_uri()

    def log_run(
        self,
        experiment: str,
        run_name: str,
        params: Mapping[str, object],
        metrics: Mapping[str, float],
        tags: Mapping[str, str],
    ) -> str | None:
        """Log a finished run; return its UI link, or None (with a warning) on failure."""
        if not self.enabled:
            return None
        try:
            with _store_lock(self.uri()):
                return self._log(experiment, run_name, params, metrics, tags)
        except Exception as exc:  # noqa: BLE001 - tracking must never fail the pipeline
            log.warning("MLflow tracking at %s failed, run not logged: %s", self.uri(), exc)
            return None

    def _log(self, experiment, run_name, params, metrics, tags) -> str:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        uri = self.uri()
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            artifacts = None
            if uri.startswith("sqlite:///"):
                artifacts = (Path(uri.removeprefix("sqlite:///")).parent / "mlruns").as_uri()
            experiment_id = client.create_experiment(
                experiment,
                artifact_location=artifacts,
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
            )
        if found is not None and EXPERIMENT_KIND_TAG not in found.tags:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        run = client.create_run(experiment_id, run_name=run_name)
        now = int(time.time() * 1000)
        client.log_batch(
            run.info.run_id,
            metrics=[
                Metric(k, float(v), now, 0)
                for k, v in metrics.items()
                if v is not None and math.isfinite(float(v))
            ],
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, str(v)) for k, v in tags.items()],
        )
        client.set_terminated(run.info.run_id)
        return f"{self.ui_url}/#/experiments/{experiment_id}/runs/{run.info.run_id}"
