"""Issue 36 item 2: Dagster instances that share one warehouse (one `$LLM_ASSETS_HOME`).
A run is visible only in its own instance; the pruner of another instance must not take it
for finished and drop the tables it is still reading."""

import tempfile

import dagster as dg
import duckdb
import pytest

from resources.warehouse.liveness import NO_INSTANCE, Liveness, instance_identity
from resources.warehouse.store import VERSIONS, WarehouseIOManager
from tests.resources.test_warehouse import a_run_that_waits, build, failure_of, tables

NOOP = {
    "module": "dagster._core.storage.noop_compute_log_manager",
    "class": "NoOpComputeLogManager",
}


def other_instance(kind, stack_dir):
    if kind == "ephemeral":
        return dg.DagsterInstance.ephemeral()
    return dg.DagsterInstance.local_temp(
        tempfile.mkdtemp(dir=stack_dir), overrides={"compute_logs": NOOP}
    )


@pytest.mark.parametrize("kind", ["ephemeral", "another DAGSTER_HOME"])
def test_a_live_run_of_another_instance_is_not_pruned(tmp_path, kind):
    """Run A (instance one) stores 4 numbers; while it is live, three runs on another
    instance store `numbers` with one version kept. Red on the old pruner (`run is None` =
    finished): A's version was dropped and A failed 'is gone'."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"), keep_versions=1)
    mine = dg.DagsterInstance.ephemeral()
    theirs = other_instance(kind, tmp_path)

    def others():
        for n in (6, 7, 8):
            assert dg.materialize(build(n)[:1], resources={"io_manager": io}, instance=theirs)

    result = a_run_that_waits("w", io, mine, others)
    assert result.success, failure_of(result)
    assert result.output_for_node("w__total")["n"].tolist() == [4]
    # A finished, but the other instance cannot see that: its version stays (time bound)
    assert dg.materialize(build(9)[:1], resources={"io_manager": io}, instance=theirs)
    assert sum(n.startswith("numbers__r_") for n in tables(tmp_path / "store.duckdb")) == 2
    # the instance that wrote it sees A finished: its next write prunes it (and keeps the
    # other instance's, whose run it cannot see)
    a_version = "numbers__r_" + result.run_id.replace("-", "")
    assert a_version in tables(tmp_path / "store.duckdb")
    assert dg.materialize(build(10)[:1], resources={"io_manager": io}, instance=mine)
    assert a_version not in tables(tmp_path / "store.duckdb")


def test_the_time_bound_drops_an_unknown_runs_version(tmp_path):
    """With `unknown_run_keep_s=0` the other instance drops A's version at once: A stops
    with 'is gone' (the bound is what keeps it, not some other path)."""
    io = WarehouseIOManager(
        database=str(tmp_path / "store.duckdb"), keep_versions=1, unknown_run_keep_s=0
    )
    theirs = dg.DagsterInstance.ephemeral()

    def others():
        assert dg.materialize(build(6)[:1], resources={"io_manager": io}, instance=theirs)

    result = a_run_that_waits("w", io, dg.DagsterInstance.ephemeral(), others)
    assert not result.success and "is gone from the warehouse" in failure_of(result)


def test_each_version_records_the_instance_that_wrote_it(tmp_path):
    database = tmp_path / "store.duckdb"
    io = WarehouseIOManager(database=str(database))
    one, two = dg.DagsterInstance.ephemeral(), dg.DagsterInstance.ephemeral()
    for instance in (one, two):
        assert dg.materialize(build(3)[:1], resources={"io_manager": io}, instance=instance)
    con = duckdb.connect(str(database), read_only=True)
    query = f"SELECT instance_id FROM {VERSIONS} ORDER BY created"
    writers = [w for (w,) in con.execute(query).fetchall()]
    con.close()
    assert writers == [instance_identity(one), instance_identity(two)]
    assert writers[0] != writers[1]


def test_a_persistent_instances_identity_is_shared_by_every_process_on_its_storage(tmp_path):
    """Two instance objects on one DAGSTER_HOME (two processes, as far as they know) are one
    writer; another home is another."""
    home = tempfile.mkdtemp(dir=tmp_path)
    one = dg.DagsterInstance.local_temp(home)
    two = dg.DagsterInstance.local_temp(home)
    three = dg.DagsterInstance.local_temp(tempfile.mkdtemp(dir=tmp_path))
    assert instance_identity(one) == instance_identity(two) != instance_identity(three)


def test_liveness_rules():
    """Visible runs by their status; a deleted own run, or no run, may go; an unknown run
    only after the bound (`created` is a Unix time)."""
    instance = dg.DagsterInstance.ephemeral()
    live = Liveness(instance, unknown_run_keep_s=60)
    assert live.may_drop(None, None, 0) and live.may_drop("r", NO_INSTANCE, 1e12)
    assert live.may_drop("gone", live.identity, 1e12)  # own instance, run deleted
    assert not live.may_drop("gone", "instance-other", 1e12)  # another's, fresh
    assert not live.may_drop("gone", None, 1e12)  # a row from before identities
    assert live.may_drop("gone", "instance-other", 0)  # another's, older than the bound
    outside = Liveness(None, unknown_run_keep_s=60)
    assert outside.identity == NO_INSTANCE and not outside.may_drop("r", "x", 1e12)
