"""Two runs of one lineage at once on one $LLM_ASSETS_HOME (what the landing sensor or two
users can launch) each read what their own upstream steps wrote: no silent mixing."""

import threading

from mlflow.tracking import MlflowClient

from resources.tracking import default_tracking_uri
from tests.jobs.conftest import run_job


def test_two_runs_at_once_each_reconcile_with_their_own_source(make_defs):
    defs = make_defs()
    sizes = {"small": 60, "large": 150}
    results = {}

    def launch(name):
        results[name] = run_job(defs, "q1_job", size=sizes[name])

    threads = [threading.Thread(target=launch, args=(n,)) for n in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, size in sizes.items():
        result = results[name]
        assert result.success, name
        source = result.output_for_node("movies_source", "reviews")
        assert len(source) == size
        filtered = result.output_for_node("q1__filtered")
        answers = result.output_for_node("q1__result")
        assert len(answers) == len(filtered) == size  # every review joins one movie
        checks = result.get_asset_check_evaluations()
        assert all(c.passed for c in checks if c.check_name == "every_row_accounted_for")
    client = MlflowClient(default_tracking_uri())
    ids = [e.experiment_id for e in client.search_experiments()]
    for result in results.values():
        runs = client.search_runs(ids, filter_string=f"tags.dagster_run_id = '{result.run_id}'")
        assert len(runs) == 1
