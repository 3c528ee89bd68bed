"""The throwaway PostgreSQL behind the concurrent-runs tests (`benchmarks.lib.postgres`): a
Dagster instance on it keeps runs, events and schedules in Postgres; where the server cannot
start, the reason is one line (what the tests skip with)."""

import pytest

import benchmarks.lib.postgres as pg


def test_an_instance_on_the_server_stores_everything_in_postgres(postgres, tmp_path):
    instance = pg.dagster_instance(postgres.create_database("fixture_check"), tmp_path / "h")
    try:
        kinds = {
            type(s).__name__
            for s in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
        }
        assert kinds == {"PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"}
        assert instance.get_runs() == []
    finally:
        instance.dispose()


def test_missing_binaries_are_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(pg.shutil, "which", lambda name: None)
    monkeypatch.setattr(pg.glob, "glob", lambda pattern: [])
    with pytest.raises(pg.PostgresUnavailable) as caught:
        with pg.postgres_server():
            pass
    message = str(caught.value)
    assert "\n" not in message and "initdb" in message and "apt-get install postgresql" in message


def test_a_failed_start_is_one_line_with_the_log(monkeypatch):
    """A server that cannot start (here: an option postgres refuses) is reported, not hung."""
    real_run = pg._run

    def bad_options(cmd, what):
        if "start" in cmd:
            cmd = [c.replace("max_connections=200", "max_connections=-1") for c in cmd]
        real_run(cmd, what)

    monkeypatch.setattr(pg, "_run", bad_options)
    with pytest.raises(pg.PostgresUnavailable) as caught:
        with pg.postgres_server():
            pass
    message = str(caught.value)
    assert "\n" not in message and message.startswith("pg_ctl start (log ")
