"""Runs of one lineage at once on one $LLM_ASSETS_HOME (what the landing sensor or several
users can launch) each read what their own upstream steps wrote: no silent mixing. Every test
asserts how many runs ran: a run whose thread died (e.g. creating its run in Dagster's
storage) fails the test instead of leaving it fewer results to check.

Dagster's storage: each run on its own ephemeral instance (two runs), one on-disk SQLite
instance (five runs: `dagster dev`'s storage, which takes concurrent writers on disk; the
in-memory ephemeral one does not: "database table is locked"), and one instance on a real
PostgreSQL server (eight runs: what a deployment launching many runs at once uses)."""

import sqlite3
from collections import Counter

import dagster as dg
import pytest

# imported before the threads start: two threads importing it for the first time at once race
# ("partially initialized module 'sqlalchemy.orm.exc'"), which failed a run when this test ran
# first in a fresh process (Dagster imports it lazily)
import sqlalchemy.orm  # noqa: F401
from mlflow.tracking import MlflowClient

from benchmarks.lib.concurrent_runs import at_once, spread_sizes
from benchmarks.lib.postgres import NOOP_COMPUTE_LOGS, dagster_instance
from resources.tracking import default_tracking_uri
from resources.warehouse.store import WarehouseIOManager, warehouse_io_manager
from tests.jobs.conftest import run_job


def assert_all_ran(results: dict, errors: dict, count: int) -> None:
    """Every one of `count` launches returned a successful run (none died, none failed)."""
    assert not errors, f"{len(errors)} of {count} runs died: {errors}"
    assert sorted(results) == list(range(count)), f"{len(results)} of {count} runs ran"
    failed = [k for k, r in results.items() if not r.success]
    assert not failed, f"runs {failed} of {count} failed"


def assert_own_rows(result, size: int) -> None:
    """The run's result holds exactly its own source's reviews, each once (row by row)."""
    source = result.output_for_node("movies_source", "reviews")
    assert len(source) == size
    assert len(result.output_for_node("q1__filtered")) == size
    answers = result.output_for_node("q1__result")
    assert Counter(answers["review_content"]) == Counter(source["review_content"])
    assert set(answers["status"]) == {"answered"}


def test_two_runs_at_once_each_reconcile_with_their_own_source(make_defs):
    defs = make_defs()
    sizes = [60, 150]
    results, errors = at_once(lambda k: run_job(defs, "q1_job", size=sizes[k]), len(sizes))
    assert_all_ran(results, errors, len(sizes))
    for k, size in enumerate(sizes):
        result = results[k]
        assert_own_rows(result, size)  # every review joins one movie
        checks = result.get_asset_check_evaluations()
        assert all(c.passed for c in checks if c.check_name == "every_row_accounted_for")
    client = MlflowClient(default_tracking_uri())
    ids = [e.experiment_id for e in client.search_experiments()]
    for result in results.values():
        runs = client.search_runs(ids, filter_string=f"tags.dagster_run_id = '{result.run_id}'")
        assert len(runs) == 1


def pruning_defs(make_defs):
    database = warehouse_io_manager().database
    return make_defs(io_manager=WarehouseIOManager(database=database, keep_versions=1))


def on_disk_instance(tmp_path):
    (tmp_path / "dagster_home").mkdir()
    return dg.DagsterInstance.local_temp(
        str(tmp_path / "dagster_home"), overrides={"compute_logs": NOOP_COMPUTE_LOGS}
    )


@pytest.mark.slow
def test_five_runs_at_once_keep_their_own_versions_through_pruning(make_defs, tmp_path):
    """Issue 22 item 1: with five runs of different sizes at once and only one version kept
    per table, pruning used to drop a live run's `filtered` and its next step read another
    run's rows. Versions of unfinished runs are kept; each run sees only its own rows. One
    instance on disk (SQLite), so the runs see each other's status."""
    defs = pruning_defs(make_defs)
    sizes = [20, 35, 50, 65, 80]
    instance = on_disk_instance(tmp_path)
    try:
        results, errors = at_once(
            lambda k: run_job(defs, "q1_job", size=sizes[k], instance=instance), len(sizes)
        )
    finally:
        instance.dispose()
    assert_all_ran(results, errors, len(sizes))
    for k, size in enumerate(sizes):
        assert_own_rows(results[k], size)


def test_a_run_that_does_not_start_fails_the_count(make_defs, tmp_path):
    """Issue 36: three of five threads died creating their runs ("database table is locked")
    and the test passed on the two left. Here one run's creation fails the way SQLite did:
    the count names it, and the test of all runs cannot pass."""
    defs = pruning_defs(make_defs)
    instance = on_disk_instance(tmp_path)
    storage = instance.run_storage
    add_run, calls = storage.add_run, []

    def add_run_once_locked(*args, **kwargs):  # where Dagster's SQLite storage raised
        calls.append(1)
        if len(calls) == 2:
            raise sqlite3.OperationalError("database table is locked")
        return add_run(*args, **kwargs)

    storage.add_run = add_run_once_locked
    try:
        results, errors = at_once(
            lambda k: run_job(defs, "q1_job", size=20 + k, instance=instance), 3
        )
    finally:
        instance.dispose()
    assert len(results) == 2 and list(errors.values()) == [
        "OperationalError: database table is locked"
    ]
    with pytest.raises(AssertionError, match="1 of 3 runs died"):
        assert_all_ran(results, errors, 3)


@pytest.mark.slow
def test_eight_runs_at_once_on_postgres_each_hold_their_own_rows(make_defs, tmp_path, postgres):
    """Eight runs of distinct sizes at once on one Dagster instance whose run, event-log and
    schedule storage is a real PostgreSQL, one warehouse version kept per table: 8 of 8 run,
    and every result row is its own source's."""
    defs = pruning_defs(make_defs)
    sizes = spread_sizes(80, 8)
    assert len(set(sizes)) == 8
    url = postgres.create_database(f"dagster_{tmp_path.name.lower()}")
    instance = dagster_instance(url, tmp_path / "dagster_home")
    try:
        results, errors = at_once(
            lambda k: run_job(defs, "q1_job", size=sizes[k], instance=instance), len(sizes)
        )
        assert {r.run_id for r in instance.get_runs()} == {r.run_id for r in results.values()}
    finally:
        instance.dispose()
    assert_all_ran(results, errors, len(sizes))
    for k, size in enumerate(sizes):
        assert_own_rows(results[k], size)


def test_the_fault_matrix_fails_a_case_where_a_run_did_not_run():
    """`benchmarks.faults` acceptance: 7 of 8 runs is a failure even with 0 lost, 0 mixed."""
    from benchmarks.faults import _acceptance

    def result(ran):
        row = {"lost": 0, "mixed": 0, "runs_ran": ran, "runs_at_once": 8}
        return {"settings": {"chunk_size": 10}, "faults": {"concurrent-runs-8-postgres": row}}

    assert _acceptance(result(8)) == []
    assert _acceptance(result(7)) == ["concurrent-runs-8-postgres: 7 of 8 runs ran"]
