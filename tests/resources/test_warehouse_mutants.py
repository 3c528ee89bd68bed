"""Warehouse behaviour the mutation run found untested: partitioned assets' union view, asset
prefixes that need quoting, and the message for a table that
was never stored."""

import dagster as dg
import duckdb
import pandas as pd
import pytest

from resources.warehouse.store import WarehouseIOManager


@pytest.mark.parametrize("prefix", ["order", "raw-data"])
def test_an_asset_whose_prefix_needs_quoting_is_stored_and_read(tmp_path, prefix):
    """`order` is an SQL keyword, `raw-data` holds a dash: as schemas both need quoting."""
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))

    @dg.asset(key=[prefix, "x"])
    def x():
        return pd.DataFrame({"v": [1, 2, 3]})

    assert dg.materialize([x], resources={"io_manager": io}).success
    loaded = io.load_input(dg.build_input_context(asset_key=dg.AssetKey([prefix, "x"])))
    assert loaded["v"].tolist() == [1, 2, 3]


def test_a_partitioned_assets_view_holds_every_partitions_latest_rows(tmp_path):
    """Key of three parts: schema `w_sub`, view `"rows"` with the key in `_partition`."""
    database = tmp_path / "store.duckdb"
    io = WarehouseIOManager(database=str(database))
    parts = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset(key=["w", "sub", "rows"], partitions_def=parts)
    def rows(context: dg.AssetExecutionContext):
        key = context.partition_key
        return pd.DataFrame({"v": [f"{key}1", f"{key}2"]})

    for key in ("a", "b", "a"):
        assert dg.materialize([rows], resources={"io_manager": io}, partition_key=key).success
    con = duckdb.connect(str(database), read_only=True)
    try:
        got = con.execute('SELECT "_partition", v FROM w_sub."rows" ORDER BY v').fetchall()
    finally:
        con.close()
    assert got == [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")]


def test_loading_a_table_never_stored_says_how_to_get_it(tmp_path):
    io = WarehouseIOManager(database=str(tmp_path / "store.duckdb"))
    context = dg.build_input_context(asset_key=dg.AssetKey(["w", "missing"]))
    with pytest.raises(dg.Failure) as failure:
        io.load_input(context)
    message = str(failure.value)
    assert "w/missing has no stored table yet" in message
    assert message.endswith("materialize it first (select it with its downstream assets)")
