"""MLflow tracking of LLM stage materializations (one MLflow run per `llm_outputs`).

Default store: `sqlite:///$LLM_ASSETS_HOME/mlflow.db` (`./.llm_assets/` by default), the
artifact root beside it. An unreachable or broken store never fails the pipeline: `log_run`
logs a warning and returns None. Only the params, metrics and tags passed in are logged
(no environment, no config dump), so secrets cannot leak through this path; metrics to six
significant digits (`shown`).

What MLflow 3.17's UI reads (its bundle, mlflow/server/js/build/static/js/main.*.js): an
experiment opens on the GenAI "Overview" or on the runs table by the sidebar's *workflow type*
(URL `?workflowType=`, else localStorage `mlflow.workflowType_v1`, else GenAI), not by the
`mlflow.experimentKind` tag; and the runs table shows only Source, Models and Dataset until
columns are picked, or a saved view (experiment tag `mlflow.sharedViewState.<id>`, opened by
`?viewStateShareKey=<id>` or from "Views") picks them. So each experiment keeps the saved view
`LLM stages` (the metrics passed as `columns`, the run names wide enough to read whole), and
`RunLinks.table` opens it on the runs table. The `mlflow.experimentKind =
custom_model_development` tag stays: later MLflow UIs set the workflow type from it.

Several processes logging to one sqlite store at once (two runs) are serialised by a lock file
beside the store: creating a fresh store is not safe concurrently.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import dagster as dg

from resources.home import llm_assets_home

log = logging.getLogger(__name__)

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
"""What MLflow 3's UI calls "Model training": the runs table with metric columns."""
VIEW_ID = "llm-assets"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
"""The experiment's saved view: MLflow's envelope {name, createdAt, updatedAt, state}, where
`state` is the runs page's UI state as JSON (selectedColumns, columnOrder, columnWidths)."""
VIEW_NAME = "LLM stages"
RUN_NAME_COLUMN = "attributes.`Run Name`"
"""MLflow's column ids: `attributes.`Run Name``, `metrics.`<key>``, `params.`<key>``."""


class RunLinks(NamedTuple):
    run: str
    """The run's page."""
    table: str
    """The experiment's runs table in the `LLM stages` view."""


def metric_column(key: str) -> str:
    return f"metrics.`{key}`"


def _width(text: str, least: int, most: int) -> int:
    """Pixels a column needs to show `text` whole (MLflow's 13px font, with its padding)."""
    return max(least, min(most, 7 * len(text) + 56))


def view_tag(old: str | None, run_name: str, columns: Sequence[str], now_ms: int) -> str | None:
    """The saved view with `columns` (metric keys) added and the run-name column wide enough
    for `run_name`; None when `old` already has both. What else the view holds (changed in
    the UI: grouping, more columns, wider ones) is kept.

    >>> v = json.loads(json.loads(view_tag(None, "ggr · q1", ["token_hit_rate"], 1))["state"])
    >>> v["selectedColumns"], v["columnWidths"]["attributes.`Run Name`"]
    (['metrics.`token_hit_rate`'], 240)
    """
    envelope, state = {"name": VIEW_NAME, "createdAt": now_ms}, {}
    if old is not None:
        try:
            envelope = json.loads(old)
            state = json.loads(envelope["state"])
        except (ValueError, KeyError, TypeError):  # not a view we can read: start afresh
            envelope, state = {"name": VIEW_NAME, "createdAt": now_ms}, {}
    before = json.dumps(state, sort_keys=True)
    selected = state.setdefault("selectedColumns", [])
    order = state.setdefault("columnOrder", [RUN_NAME_COLUMN])
    widths = state.setdefault("columnWidths", {})
    for column in map(metric_column, columns):
        if column not in selected:
            selected.append(column)
        if column not in order:
            order.append(column)
        widths.setdefault(column, _width(column.split("`")[1], 110, 260))
    widths[RUN_NAME_COLUMN] = max(widths.get(RUN_NAME_COLUMN, 0), _width(run_name, 240, 720))
    if old is not None and json.dumps(state, sort_keys=True) == before:
        return None
    envelope |= {"updatedAt": now_ms, "state": json.dumps(state)}
    return json.dumps(envelope)


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


def shown(value: float) -> float:
    """`value` to six significant digits, never fewer than its integer part (counts and
    large totals stay exact): what MLflow's UI shows, without float noise.

    >>> shown(1.2767808799999998), shown(0.000123456789), shown(1234567.891), shown(968)
    (1.27678, 0.000123457, 1234568.0, 968.0)
    """
    value = float(value)
    if value == 0 or value.is_integer():
        return value
    return round(value, max(0, 5 - math.floor(math.log10(abs(value)))))


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

    def table_url(self, experiment_id: str) -> str:
        """The runs table (not the GenAI overview) in the `LLM stages` view."""
        query = f"workflowType=machine_learning&viewStateShareKey={VIEW_ID}"
        return f"{self.ui_url}/#/experiments/{experiment_id}/runs?{query}"

    def log_run(
        self,
        experiment: str,
        run_name: str,
        params: Mapping[str, object],
        metrics: Mapping[str, float],
        tags: Mapping[str, str],
        columns: Sequence[str] = (),
    ) -> RunLinks | None:
        """Log a finished run; return its UI links, or None (with a warning) on failure.
        `columns`: metric keys the experiment's runs table shows."""
        if not self.enabled:
            return None
        try:
            with _store_lock(self.uri()):
                return self._log(experiment, run_name, params, metrics, tags, columns)
        except Exception as exc:  # noqa: BLE001 - tracking must never fail the pipeline
            log.warning("MLflow tracking at %s failed, run not logged: %s", self.uri(), exc)
            return None

    def _log(self, experiment, run_name, params, metrics, tags, columns) -> RunLinks:
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
        old_tags = found.tags if found is not None else {}
        if found is not None and EXPERIMENT_KIND_TAG not in old_tags:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        now = int(time.time() * 1000)
        view = view_tag(old_tags.get(VIEW_TAG), run_name, columns, now)
        if view is not None:
            client.set_experiment_tag(experiment_id, VIEW_TAG, view)
        run = client.create_run(experiment_id, run_name=run_name)
        client.log_batch(
            run.info.run_id,
            metrics=[
                Metric(k, shown(v), now, 0)
                for k, v in metrics.items()
                if v is not None and math.isfinite(float(v))
            ],
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, str(v)) for k, v in tags.items()],
        )
        client.set_terminated(run.info.run_id)
        return RunLinks(
            run=f"{self.ui_url}/#/experiments/{experiment_id}/runs/{run.info.run_id}",
            table=self.table_url(experiment_id),
        )
