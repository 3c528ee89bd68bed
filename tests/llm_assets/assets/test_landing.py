"""Landing per query: each file in a query's landing folder becomes a dynamic partition and
one run of that query only; two files never overwrite each other."""

import dagster as dg
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS summary FROM reviews r"


@pytest.fixture
def landing(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    folder = tmp_path / "landing"
    folder.mkdir()
    return folder


def sensor_of(defs):
    (sensor,) = defs.sensors
    return sensor


def test_each_new_file_is_a_partition_and_one_run(landing):
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    sensor = sensor_of(defs)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # Dagster's default
    (landing / "a.csv").write_text("id,review\n1,good\n2,bad\n")
    (landing / "b.tsv").write_text("id\treview\n3\tfine\n")
    (landing / "notes.txt").write_text("not a table")
    with dg.instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance))
        keys = [r.partition_key for r in result.run_requests]
        assert keys == ["a.csv", "b.tsv"]
        (added,) = result.dynamic_partitions_requests
        assert list(added.partition_keys) == ["a.csv", "b.tsv"]
        instance.add_dynamic_partitions("q_files", keys)
        assets = list(defs.assets) + list(defs.asset_checks)
        for key, rows in (("a.csv", 2), ("b.tsv", 1)):
            run = dg.materialize(
                assets, partition_key=key, instance=instance, resources=resources_for("sim")
            )
            assert run.success
            assert len(run.output_for_node("q__result")) == rows
        # the first file's partition still holds its own rows after the second ran
        rerun = dg.materialize(
            [a for a in assets if isinstance(a, dg.AssetsDefinition)],
            partition_key="a.csv",
            instance=instance,
            resources=resources_for("sim"),
            selection="q/answer",
        )
        assert rerun.success and len(rerun.output_for_node("q__answer")) == 2


def test_landing_can_start_running_and_needs_a_table_for_joins(landing):
    defs = llm_query_assets(
        "q", SQL, sources={"reviews": "x.csv"}, landing={"folder": str(landing), "running": True}
    )
    assert sensor_of(defs).default_status == dg.DefaultSensorStatus.RUNNING
    join = (
        "SELECT LLM('Say {review} {title}', r.review, m.title) FROM reviews r "
        "JOIN movies m ON r.mid = m.mid"
    )
    with pytest.raises(ValueError, match="landing.table"):
        llm_query_assets(
            "j", join, sources={"reviews": "r.csv", "movies": "m.csv"}, landing=str(landing)
        )
