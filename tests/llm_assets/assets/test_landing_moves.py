"""Issue 36 item 3: landed files that move. A file deleted from the landing folder stops
contributing rows to the query's tables at the sensor's next look (its partition is deleted
and retired in the warehouse); a renamed file is one file (the old name retired, the new one
run), never its rows twice."""

import os
import time

import dagster as dg
import duckdb

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from resources.warehouse.store import warehouse_io_manager

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS summary FROM reviews r"


def land(path, ids, age_s=60.0):
    path.write_text("id,review\n" + "".join(f"{i},review {i}\n" for i in ids))
    when = time.time() - age_s
    os.utime(path, (when, when))


class Folder:
    """A landing query, its sensor and an instance: `look()` evaluates the sensor once, applies
    its partition changes and materializes each run it asks for."""

    def __init__(self, folder, instance, **landing):
        self.defs = llm_query_assets(
            "q", SQL, sources={"reviews": "unused.csv"}, landing={"folder": str(folder), **landing}
        )
        (self.sensor,) = self.defs.sensors
        self.instance = instance
        self.cursor = None

    def look(self):
        context = dg.build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources={"io_manager": warehouse_io_manager()},
        )
        result = self.sensor(context)
        self.cursor = result.cursor
        for change in result.dynamic_partitions_requests or []:
            if isinstance(change, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions("q_files", change.partition_keys)
            else:
                for key in change.partition_keys:
                    self.instance.delete_dynamic_partition("q_files", key)
        keys = [r.partition_key for r in result.run_requests]
        for key in keys:
            self.materialize(partition_key=key)
        return keys

    def materialize(self, **how):
        assets = list(self.defs.assets) + list(self.defs.asset_checks)
        run = dg.materialize(assets, instance=self.instance, resources=resources_for("sim"), **how)
        assert run.success
        return run


def rows(home, table):
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(f'SELECT "_partition", id FROM q.{table} ORDER BY 1, 2').fetchall()
    finally:
        con.close()


def test_a_deleted_files_rows_leave_result_and_answer(landing):
    """Red before: the sensor did not look at gone files, and a.csv's rows stayed."""
    land(landing / "a.csv", [1, 2])
    land(landing / "b.csv", [3])
    with dg.instance_for_test() as instance:
        q = Folder(landing, instance)
        assert q.look() == ["a.csv", "b.csv"]
        home = landing.parent / "home"
        assert rows(home, "result") == [("a.csv", "1"), ("a.csv", "2"), ("b.csv", "3")]
        (landing / "a.csv").unlink()
        assert q.look() == []
        assert instance.get_dynamic_partitions("q_files") == ["b.csv"]
        for table in ("result", "answer", "source_reviews"):
            assert rows(home, table) == [("b.csv", "3")], table
        # the file comes back under its name: run again, its rows are back
        land(landing / "a.csv", [1, 2], age_s=30)
        assert q.look() == ["a.csv"]
        assert rows(home, "answer") == [("a.csv", "1"), ("a.csv", "2"), ("b.csv", "3")]


def test_a_renamed_file_is_one_file(landing):
    """Red before: after a.csv became c.csv, its rows were in result twice (a.csv, c.csv)."""
    land(landing / "a.csv", [1, 2])
    with dg.instance_for_test() as instance:
        q = Folder(landing, instance)
        assert q.look() == ["a.csv"]
        (landing / "a.csv").rename(landing / "c.csv")
        assert q.look() == ["c.csv"]
        home = landing.parent / "home"
        for table in ("result", "answer"):
            assert rows(home, table) == [("c.csv", "1"), ("c.csv", "2")], table
        assert instance.get_dynamic_partitions("q_files") == ["c.csv"]


def test_a_gone_file_in_a_backfill_slot_reruns_the_others_alone(landing):
    """a.csv and b.csv ran as one table (a backfill range); a.csv goes: b.csv's rows are not
    lost (the shared slot stays) until b.csv has run alone, then only b.csv's are left."""
    land(landing / "a.csv", [1])
    land(landing / "b.csv", [2, 3])
    with dg.instance_for_test() as instance:
        q = Folder(landing, instance, max_partitions_per_run=2)
        instance.add_dynamic_partitions("q_files", ["a.csv", "b.csv"])
        range_tags = {
            "dagster/asset_partition_range_start": "a.csv",
            "dagster/asset_partition_range_end": "b.csv",
        }
        q.materialize(tags=range_tags)
        home = landing.parent / "home"
        assert {r[1] for r in rows(home, "result")} == {"1", "2", "3"}
        (landing / "a.csv").unlink()
        assert q.look() == ["b.csv"]  # b.csv again, alone (a.csv's rows shared its table)
        assert rows(home, "result") == [("b.csv", "2"), ("b.csv", "3")]
        assert q.look() == []  # nothing left to do


def test_a_missing_folder_retires_nothing(landing):
    land(landing / "a.csv", [1])
    with dg.instance_for_test() as instance:
        q = Folder(landing, instance)
        q.look()
        (landing / "a.csv").unlink()
        landing.rmdir()  # an unmounted share, not a deletion of every file
        assert q.look() == []
        assert instance.get_dynamic_partitions("q_files") == ["a.csv"]
        assert rows(landing.parent / "home", "result") == [("a.csv", "1")]
