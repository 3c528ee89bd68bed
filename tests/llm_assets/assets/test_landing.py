"""Landing per query: each file in a query's landing folder becomes a dynamic partition and
one run of that query only; two files never overwrite each other."""

import json
import os
import time

import dagster as dg
import duckdb
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.assets.definition import QueryDefinition
from llm_assets.assets.landing import landed_files
from resources.warehouse.store import warehouse_io_manager

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS summary FROM reviews r"


def WAREHOUSE():  # noqa: N802 - reads as the resource it returns
    """The sensor's resources: the warehouse under this test's $LLM_ASSETS_HOME."""
    return {"io_manager": warehouse_io_manager()}


def sensor_of(defs):
    (sensor,) = defs.sensors
    return sensor


def age(*paths, seconds=60.0):
    """Set the files' modification time `seconds` in the past (negative: in the future)."""
    for path in paths:
        when = time.time() - seconds
        os.utime(path, (when, when))


def look(sensor, instance, cursor=None):
    """One sensor evaluation: (partition keys asked for, the cursor for the next look)."""
    result = sensor(
        dg.build_sensor_context(instance=instance, cursor=cursor, resources=WAREHOUSE())
    )
    return [r.partition_key for r in result.run_requests], result.cursor


def test_each_new_file_is_a_partition_and_one_run(landing):
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    sensor = sensor_of(defs)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # Dagster's default
    (landing / "a.csv").write_text("id,review\n1,good\n2,bad\n")
    (landing / "b.tsv").write_text("id\treview\n3\tfine\n")
    (landing / "notes.txt").write_text("not a table")
    age(landing / "a.csv", landing / "b.tsv")  # written a minute ago: settled
    with dg.instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance, resources=WAREHOUSE()))
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
    # q.result: every partition's latest rows at once, the partition key readable
    con = duckdb.connect(str(landing.parent / "home" / "warehouse.duckdb"), read_only=True)
    try:
        rows = con.execute(
            'SELECT "_partition", id FROM q.result ORDER BY "_partition", id'
        ).fetchall()
    finally:
        con.close()
    assert rows == [("a.csv", "1"), ("a.csv", "2"), ("b.tsv", "3")]  # values as written


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


def test_a_backfill_runs_several_files_as_one_table(landing):
    """`BackfillPolicy.multi_run(k)`: a range of landed files is one run that reads, plans and
    answers them as one table; each file's own partition stays as it was."""
    defs = llm_query_assets(
        "q",
        SQL,
        sources={"reviews": "unused.csv"},
        landing={"folder": str(landing), "max_partitions_per_run": 2},
    )
    with pytest.raises(ValueError, match="max_partitions_per_run must be at least 1, got 0"):
        llm_query_assets(
            "q", SQL, sources={"reviews": "unused.csv"},
            landing={"folder": str(landing), "max_partitions_per_run": 0},
        )  # fmt: skip
    assets = list(defs.assets) + list(defs.asset_checks)
    policies = {a.backfill_policy for a in defs.assets if isinstance(a, dg.AssetsDefinition)}
    assert policies == {dg.BackfillPolicy.multi_run(2)}
    names = ["a.csv", "b.csv", "c.csv"]
    for k, name in enumerate(names):
        rows = "".join(f"{10 * k + j},review {k}.{j}\n" for j in range(k + 1))
        (landing / name).write_text("id,review\n" + rows)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("q_files", names)
        run = dg.materialize(
            assets,
            instance=instance,
            resources=resources_for("sim"),
            tags={
                "dagster/asset_partition_range_start": "a.csv",
                "dagster/asset_partition_range_end": "b.csv",
            },
        )
        assert run.success
        result = run.output_for_node("q__result")
        assert sorted(result["id"]) == ["0", "10", "11"]  # both files' rows, not c.csv's
        events = [
            e.materialization for e in run.get_asset_materialization_events()
            if e.asset_key == dg.AssetKey(["q", "source_reviews"])
        ]  # fmt: skip
        assert sorted(m.partition for m in events) == ["a.csv", "b.csv"]  # one per file
        assert {m.metadata["files"].value for m in events} == {2}
        one = dg.materialize(
            assets, partition_key="c.csv", instance=instance, resources=resources_for("sim")
        )
        assert sorted(one.output_for_node("q__result")["id"]) == ["20", "21", "22"]


def step_failure(result) -> str:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure.event_specific_data.error.message.strip()


def test_a_landing_query_launched_without_a_partition_says_how_to_launch_it(landing):
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    (landing / "a.csv").write_text("id,review\n1,good\n")
    result = dg.materialize(list(defs.assets), resources=resources_for("sim"), raise_on_error=False)
    assert not result.success
    message = step_failure(result)
    assert "dg launch --partition" in message and "q_landing" in message, message


def test_a_header_only_file_stops_the_run_in_one_line(landing):
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    (landing / "empty.csv").write_text("id,review\n")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("q_files", ["empty.csv"])
        result = dg.materialize(
            list(defs.assets),
            partition_key="empty.csv",
            instance=instance,
            resources=resources_for("sim"),
            raise_on_error=False,
        )
    assert not result.success
    message = step_failure(result)
    assert "table 'reviews' has columns but no rows" in message, message


def test_a_file_still_being_written_waits_until_it_settles(landing):
    """Issue 22 item 5: a file whose size or time changes between two looks is not launched
    (its last value would be cut: `22486` read as `224`); it is once two looks
    `settle_seconds` apart see it unchanged, or once it was last written that long ago."""
    defs = llm_query_assets(
        "q",
        SQL,
        sources={"reviews": "unused.csv"},
        landing={"folder": str(landing), "settle_seconds": 0.3},
    )
    sensor = sensor_of(defs)
    half = landing / "a.csv"
    half.write_text("id,review\n1,224")
    age(half, seconds=-3600)  # a clock ahead of ours: only looks can tell it settled
    with dg.instance_for_test() as instance:
        keys, cursor = look(sensor, instance)
        assert keys == []  # first sight
        half.write_text("id,review\n1,22486\n")
        age(half, seconds=-3601)
        time.sleep(0.4)
        keys, cursor = look(sensor, instance, cursor)
        assert keys == []  # changed since the last look
        time.sleep(0.4)
        keys, cursor = look(sensor, instance, cursor)
        assert keys == ["a.csv"]  # unchanged on two looks 0.4 s apart
        assert json.loads(cursor)["launched"] == {"a.csv": half.stat().st_mtime_ns}
        assert look(sensor, instance, cursor)[0] == []  # asked for once
        # written again: run again once settled; written long ago: at first sight
        half.write_text("id,review\n1,22486\n2,7\n")
        assert look(sensor, instance, cursor)[0] == []  # just written
        age(half)
        assert look(sensor, instance, cursor)[0] == ["a.csv"]
    slow = llm_query_assets(
        "q", SQL, sources={"reviews": "unused.csv"},
        landing={"folder": str(landing), "settle_seconds": 3600},
    )  # fmt: skip
    with dg.instance_for_test() as instance:
        assert look(sensor_of(slow), instance)[0] == []  # a minute old is not an hour
    with pytest.raises(ValueError, match="settle_seconds must be 0 or more, got -1"):
        llm_query_assets(
            "q", SQL, sources={"reviews": "unused.csv"},
            landing={"folder": str(landing), "settle_seconds": -1},
        )  # fmt: skip


def test_temporary_names_are_never_read(landing):
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    names = ["a.csv.part", "b.csv.tmp", "c.csv.partial", "d.csv.crdownload", ".e.csv", "f.csv~"]
    for name in names + ["done.csv"]:
        (landing / name).write_text("id,review\n1,good\n")
        age(landing / name)
    with dg.instance_for_test() as instance:
        assert look(sensor_of(defs), instance)[0] == ["done.csv"]
    files, ignored = landed_files(
        QueryDefinition.build("q", SQL, {"reviews": "u.csv"}, landing=str(landing))
    )
    assert [p.name for p in files] == ["done.csv"] and ignored == []  # skipped silently


def test_nothing_outside_the_landing_folder_is_read(landing):
    """A link out of the folder is skipped with a warning; a partition key that is not a file
    name of the folder (`../x.csv`, an absolute path, a link out) fails the run in one line."""
    outside = landing.parent / "x.csv"
    outside.write_text("id,review\n1,secret\n")
    (landing / "a.csv").write_text("id,review\n1,good\n")
    (landing / "out.csv").symlink_to(outside)
    (landing / "alias.csv").symlink_to(landing / "a.csv")  # inside: read as a.csv
    age(landing / "a.csv", outside)
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(landing))
    with dg.instance_for_test() as instance:
        assert look(sensor_of(defs), instance)[0] == ["a.csv", "alias.csv"]
    files, ignored = landed_files(
        QueryDefinition.build("q", SQL, {"reviews": "u.csv"}, landing=str(landing))
    )
    (message,) = ignored
    assert "out.csv: a link to" in message and "outside" in message, message
    # not a plain name (even one that leads back inside), or a link out
    keys = ["../x.csv", str(outside), f"../{landing.name}/a.csv", "out.csv"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("q_files", keys)
        for key in keys:
            result = dg.materialize(
                list(defs.assets),
                partition_key=key,
                instance=instance,
                resources=resources_for("sim"),
                selection="q/source_reviews",
                raise_on_error=False,
            )
            assert not result.success
            message = step_failure(result)
            assert "\n" not in message and repr(key) in message, message
            reason = "outside the" if key == "out.csv" else "is not a file name in the"
            assert reason in message, message
            assert f"landing folder {landing.resolve()}" in message, message


def test_a_look_asks_for_at_most_max_runs_per_tick(landing):
    """Item 10: 500 landed files do not ask for 500 runs at once; each look asks for the oldest
    `max_runs_per_tick` ready files and the next looks for the rest."""
    defs = llm_query_assets(
        "q",
        SQL,
        sources={"reviews": "unused.csv"},
        landing={"folder": str(landing), "max_runs_per_tick": 4},
    )
    names = [f"f{k:02}.csv" for k in range(10)]
    for k, name in enumerate(names):
        (landing / name).write_text("id,review\n1,good\n")
        age(landing / name, seconds=100 - k)  # f00 oldest
    with dg.instance_for_test() as instance:
        asked, cursor = [], None
        for _ in range(4):
            keys, cursor = look(sensor_of(defs), instance, cursor)
            assert len(keys) <= 4
            asked.append(keys)
        assert asked == [names[:4], names[4:8], names[8:], []]
    with pytest.raises(ValueError, match="max_runs_per_tick must be at least 1, got 0"):
        llm_query_assets(
            "q", SQL, sources={"reviews": "unused.csv"},
            landing={"folder": str(landing), "max_runs_per_tick": 0},
        )  # fmt: skip


def test_a_landed_files_failed_run_names_the_file(landing):
    """Issue 35, item 3: the failure of a landed file's run said what was wrong, not in which
    file. A column the query reads is missing from this file only (the declared source has
    it): the message names the landed file and its folder first."""
    sql = SQL.replace("FROM reviews r", "FROM reviews r WHERE TRY_CAST(r.stars AS INT) > 2")
    declared = landing.parent / "declared.csv"
    declared.write_text("id,review,stars\n1,good,3\n")
    defs = llm_query_assets("q", sql, sources={"reviews": str(declared)}, landing=str(landing))
    (landing / "2026-11-29.csv").write_text("id,review\n1,good\n")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("q_files", ["2026-11-29.csv"])
        result = dg.materialize(
            list(defs.assets),
            partition_key="2026-11-29.csv",
            instance=instance,
            resources=resources_for("sim"),
            raise_on_error=False,
        )
    assert not result.success
    message = step_failure(result)
    assert f"Failure: landed file 2026-11-29.csv in {landing}: " in message, message
    assert "stars" in message and "\n" not in message, message
