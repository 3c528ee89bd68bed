"""The versioned DuckDB warehouse: each materialization is its own table, the view points at
the latest, a step reads its own run's upstream, old versions are dropped."""

import dagster as dg
import duckdb
import pandas as pd
import pytest

import resources.warehouse.store as warehouse
from resources.warehouse.store import WarehouseIOManager, warehouse_io_manager


def build(n_rows, prefix="w"):
    @dg.asset(key=[prefix, "numbers"])
    def numbers():
        return pd.DataFrame({"x": range(n_rows)})

    @dg.asset(key=[prefix, "total"], ins={"numbers": dg.AssetIn([prefix, "numbers"])})
    def total(numbers: pd.DataFrame):
        return pd.DataFrame({"n": [len(numbers)]})

    return [numbers, total]


def tables(database):
    con = duckdb.connect(str(database), read_only=True)
    try:
        return sorted(
            name
            for (name,) in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'w'"
            ).fetchall()
        )
    finally:
        con.close()


def test_versions_are_kept_per_run_and_pruned(tmp_path):
    database = tmp_path / "store.duckdb"
    io = WarehouseIOManager(database=str(database), keep_versions=2)
    with dg.instance_for_test() as instance:
        for n in (3, 5, 7, 9):
            result = dg.materialize(build(n), resources={"io_manager": io}, instance=instance)
            assert result.output_for_node("w__total")["n"].tolist() == [n]
    names = tables(database)
    assert names.count("numbers") == names.count("total") == 1  # the latest views
    assert sum(n.startswith("numbers__r_") for n in names) == 2
    con = duckdb.connect(str(database), read_only=True)
    assert con.execute('SELECT count(*) FROM w."numbers"').fetchone()[0] == 9
    con.close()


@pytest.mark.parametrize("prefix", ["w", "Main"])
def test_a_step_reads_its_own_runs_upstream_not_the_latest(tmp_path, prefix):
    """Run A stores 4 numbers; while it runs, run B stores 6 (the latest); run A's next step
    still reads A's 4. Reading outside a run gets the latest. `Main` is DuckDB's schema
    `main` (names compare case-insensitively): A's own version is found there too."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))
    other_run = build(6, prefix)[:1]

    @dg.asset(key=[prefix, "numbers"])
    def numbers():
        return pd.DataFrame({"x": range(4)})

    @dg.asset(key=[prefix, "meanwhile"], deps=[numbers])
    def meanwhile():
        assert dg.materialize(other_run, resources={"io_manager": io}).success
        return pd.DataFrame({"done": [True]})

    @dg.asset(
        key=[prefix, "total"], ins={"numbers": dg.AssetIn([prefix, "numbers"])}, deps=[meanwhile]
    )
    def total(numbers: pd.DataFrame):
        return pd.DataFrame({"n": [len(numbers)]})

    result = dg.materialize([numbers, meanwhile, total], resources={"io_manager": io})
    assert result.output_for_node(f"{prefix}__total")["n"].tolist() == [4]
    context = dg.build_input_context(asset_key=dg.AssetKey([prefix, "numbers"]))
    assert len(io.load_input(context)) == 6


def a_run_that_waits(prefix, io, instance, meanwhile_body):
    """Run A stores 4 numbers, then `meanwhile_body()` runs while A is live, then A sums."""

    @dg.asset(key=[prefix, "numbers"])
    def numbers():
        return pd.DataFrame({"x": range(4)})

    @dg.asset(key=[prefix, "meanwhile"], deps=[numbers])
    def meanwhile():
        meanwhile_body()
        return pd.DataFrame({"done": [True]})

    @dg.asset(
        key=[prefix, "total"], ins={"numbers": dg.AssetIn([prefix, "numbers"])}, deps=[meanwhile]
    )
    def total(numbers: pd.DataFrame):
        return pd.DataFrame({"n": [len(numbers)]})

    return dg.materialize(
        [numbers, meanwhile, total],
        resources={"io_manager": io},
        instance=instance,
        raise_on_error=False,
    )


def test_a_live_runs_version_survives_pruning_by_other_runs(tmp_path):
    """Issue 22 item 1: with one version kept, three runs storing `numbers` while run A is
    live used to drop A's version, and A's next step read the latest run's rows."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"), keep_versions=1)
    instance = dg.DagsterInstance.ephemeral()

    def others():
        for n in (6, 7, 8):
            assert dg.materialize(build(n)[:1], resources={"io_manager": io}, instance=instance)

    result = a_run_that_waits("w", io, instance, others)
    assert result.output_for_node("w__total")["n"].tolist() == [4]
    names = tables(tmp_path / "store.duckdb")
    assert sum(n.startswith("numbers__r_") for n in names) == 2  # the latest and A's, kept
    assert dg.materialize(build(9)[:1], resources={"io_manager": io}, instance=instance)
    names = tables(tmp_path / "store.duckdb")
    assert sum(n.startswith("numbers__r_") for n in names) == 1  # A finished: pruned now


def test_a_version_gone_fails_the_step_instead_of_reading_the_latest(tmp_path):
    database = tmp_path / "store.duckdb"
    io = WarehouseIOManager(database=str(database))
    instance = dg.DagsterInstance.ephemeral()

    def lose_a_version():
        assert dg.materialize(build(6)[:1], resources={"io_manager": io}, instance=instance)
        live = [r.run_id.replace("-", "") for r in instance.get_runs() if not r.is_finished]
        mine = [n for n in tables(database) if n.startswith("numbers__r_") and n[11:] in live]
        con = duckdb.connect(str(database))
        con.execute(f'DROP TABLE w."{mine[0]}"')  # run A's own version
        con.close()

    result = a_run_that_waits("w", io, instance, lose_a_version)
    assert not result.success
    message = failure_of(result)
    assert "is gone from the warehouse" in message and "w/numbers" in message, message


def failure_of(result) -> str:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    error = failure.event_specific_data.error
    while error.cause is not None:
        error = error.cause
    return error.message.strip()


def builtin_names() -> set[str]:
    """DuckDB's own catalogs and schemas, as a fresh in-memory connection has them."""
    con = duckdb.connect()
    try:
        databases = con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
        schemas = con.execute("SELECT schema_name FROM duckdb_schemas()").fetchall()
    finally:
        con.close()
    return {name for (name,) in databases + schemas}


def test_reserved_schemas_are_what_duckdb_cannot_host_and_are_refused_in_one_line(
    tmp_path, monkeypatch
):
    """Without the guard, an asset under each of DuckDB's built-in names is stored and read
    back unless the name is one of RESERVED_SCHEMAS (held to the DuckDB in use: an upgrade
    that changes its names turns this red). With it, each is refused in one line, any case."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))
    names = builtin_names() | warehouse.RESERVED_SCHEMAS
    with monkeypatch.context() as patch:
        patch.setattr(warehouse, "RESERVED_SCHEMAS", frozenset())
        broken = {
            name
            for name in names
            if not dg.materialize(
                build(3, name), resources={"io_manager": io}, raise_on_error=False
            ).success
        }
    assert broken == warehouse.RESERVED_SCHEMAS and "main" in names - broken
    for name in sorted(warehouse.RESERVED_SCHEMAS) + ["TEMP", "System"]:
        result = dg.materialize(build(3, name), resources={"io_manager": io}, raise_on_error=False)
        message = failure_of(result)
        assert "\n" not in message and f"schema {name!r} is a name DuckDB reserves" in message


def test_columns_differing_only_in_case_are_refused_not_renamed(tmp_path):
    """DuckDB would store `Review` beside `review` as `Review_1`: refused in one line."""

    @dg.asset(key=["w", "t"])
    def t() -> pd.DataFrame:
        return pd.DataFrame({"review": ["a"], "Review": ["A"]})

    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))
    result = dg.materialize([t], resources={"io_manager": io}, raise_on_error=False)
    message = failure_of(result)
    assert "'review' and 'Review' differ only in case" in message and "\n" not in message


def test_tables_are_replaced_when_columns_or_types_change_and_empty_ones_are_kept(tmp_path):
    frames = iter(
        [
            pd.DataFrame({"a": [1, 2], "error": [None, None]}),
            pd.DataFrame({"a": [3], "error": ["HTTP 503"], "extra": ["x"]}),
            pd.DataFrame({"a": pd.Series([], dtype="int64")}),
        ]
    )

    @dg.asset(key=["g", "t"])
    def t() -> pd.DataFrame:
        return next(frames)

    @dg.asset(key=["g", "u"], ins={"t": dg.AssetIn(["g", "t"])})
    def u(t: pd.DataFrame) -> pd.DataFrame:
        return t.assign(n=len(t))

    io = warehouse_io_manager(str(tmp_path / "db" / "w.duckdb"))
    seen = []
    for _ in range(3):
        result = dg.materialize([t, u], resources={"io_manager": io})
        assert result.success
        seen.append(result.output_for_node("g__u"))
    assert seen[1]["error"].tolist() == ["HTTP 503"] and "extra" in seen[1]
    assert seen[2].empty and list(seen[2].columns) == ["a", "n"]


@pytest.mark.parametrize("prefix", [warehouse.CATALOG, warehouse.CATALOG.upper()])
def test_a_key_prefix_named_like_the_attached_catalog_is_refused_in_one_line(
    prefix, tmp_path, monkeypatch
):
    """Without the guard (names never compare equal) DuckDB cannot store such an asset
    ("Ambiguous reference to catalog or schema"); with it, one line naming the way out."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))
    with monkeypatch.context() as patch:
        patch.setattr(warehouse, "duckdb_fold", lambda name: object())
        result = dg.materialize(build(3, prefix), resources={"io_manager": io},
                                raise_on_error=False)  # fmt: skip
        assert "Ambiguous reference to catalog or schema" in failure_of(result)
    result = dg.materialize(build(3, prefix), resources={"io_manager": io}, raise_on_error=False)
    message = failure_of(result)
    assert "\n" not in message and f"schema {prefix!r} is the name the warehouse" in message
    assert "rename the key's prefix" in message
