"""The partition slots of the warehouse's partitioned assets, and the union view over them.

A run over partitions (landed files) stores one table per asset for the keys it covers: a
slot. `<schema>."<asset>"` is the union of the latest slots, newest first, the slot's key(s)
in `_partition`. A slot is left out when every one of its keys is covered by a newer slot or
retired. A key is retired when its landed file is gone from the folder (`reconcile`: the
landing sensor calls it with the files it sees), so a deleted or renamed file stops
contributing rows; a slot is written for a key again (the file came back) un-retires it.

A slot of several keys (a backfill run over a range of files) holds their rows in one table,
not told apart by file: when some of its keys are retired and others live, it stays in the
view until each live key has a newer slot of its own; `reconcile` names those keys so their
files are run again, alone. No row of a live file is ever left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import duckdb
from sqlglot import exp

SLOTS = "_llm_assets_partition_slots"
RETIRED = "_llm_assets_retired_partitions"

TableOf = Callable[[str, str], exp.Table]
"""(schema, table name) -> the fully qualified table."""


def _ensure(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {SLOTS} "
        "(schema_name VARCHAR, asset VARCHAR, slot VARCHAR, keys VARCHAR[], created DOUBLE)"
    )
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {RETIRED} "
        "(schema_name VARCHAR, asset VARCHAR, partition_key VARCHAR, retired DOUBLE)"
    )


def record_slot(con, schema: str, asset: str, slot: str, keys: list[str], table_of: TableOf):
    """Record that `slot` now holds the latest rows of `keys` (live again if retired) and
    rebuild the asset's union view."""
    _ensure(con)
    con.execute(
        f"DELETE FROM {SLOTS} WHERE schema_name = ? AND asset = ? AND slot = ?",
        [schema, asset, slot],
    )
    con.execute(
        f"INSERT INTO {SLOTS} VALUES (?, ?, ?, ?, ?)", [schema, asset, slot, keys, time.time()]
    )
    con.execute(
        f"DELETE FROM {RETIRED} "
        "WHERE schema_name = ? AND asset = ? AND list_contains(?, partition_key)",
        [schema, asset, keys],
    )
    union_view(con, schema, asset, table_of)


def _slots(con, schema: str, asset: str) -> list[tuple[str, list[str]]]:
    return con.execute(
        f"SELECT slot, keys FROM {SLOTS} WHERE schema_name = ? AND asset = ? ORDER BY created DESC",
        [schema, asset],
    ).fetchall()


def _retired(con, schema: str, asset: str) -> set[str]:
    rows = con.execute(
        f"SELECT partition_key FROM {RETIRED} WHERE schema_name = ? AND asset = ?",
        [schema, asset],
    ).fetchall()
    return {key for (key,) in rows}


def _visible(slots, retired: set[str]) -> list[tuple[str, list[str]]]:
    """The slots of the view, newest first: each with a key neither retired nor covered."""
    covered: set[str] = set()
    shown = []
    for slot, keys in slots:
        if set(keys) - covered - retired:
            shown.append((slot, keys))
        covered |= set(keys)
    return shown


def union_view(con, schema: str, asset: str, table_of: TableOf) -> None:
    """`<schema>."<asset>"` over the visible slots (module docstring); with none visible, the
    newest slot's columns and no rows."""
    slots = _slots(con, schema, asset)
    if not slots:
        return
    shown = _visible(slots, _retired(con, schema, asset))
    parts = [
        exp.select(
            exp.alias_(exp.Literal.string(", ".join(keys)), "_partition", quoted=True), exp.Star()
        ).from_(table_of(schema, slot))
        for slot, keys in shown
    ]
    if not parts:
        newest = slots[0][0]
        parts = [
            exp.select(exp.alias_(exp.Literal.string(""), "_partition", quoted=True), exp.Star())
            .from_(table_of(schema, newest))
            .where(exp.false())
        ]
    union = " UNION ALL BY NAME ".join(p.sql(dialect="duckdb") for p in parts)
    view = table_of(schema, asset).sql(dialect="duckdb")
    con.execute(f"CREATE OR REPLACE VIEW {view} AS {union}")


def reconcile(con, schema: str, live: Iterable[str], table_of: TableOf) -> dict[str, list[str]]:
    """Retire, in every partitioned asset of `schema`, the keys whose file is not in `live`
    (the files in the landing folder now), and rebuild the views that changed. Returns
    {"retired": keys newly retired, "rerun": live keys whose rows sit only in a slot shared
    with a retired key (run each alone to let that slot go)}. Writes nothing when nothing
    changed."""
    _ensure(con)
    live = set(live)
    retired_now: set[str] = set()
    rerun: set[str] = set()
    assets = [
        a for (a,) in con.execute(
            f"SELECT DISTINCT asset FROM {SLOTS} WHERE schema_name = ?", [schema]
        ).fetchall()
    ]  # fmt: skip
    for asset in sorted(assets):
        slots = _slots(con, schema, asset)
        retired = _retired(con, schema, asset)
        gone = {k for _, keys in slots for k in keys} - live - retired
        if gone:
            con.executemany(
                f"INSERT INTO {RETIRED} VALUES (?, ?, ?, ?)",
                [[schema, asset, key, time.time()] for key in sorted(gone)],
            )
            union_view(con, schema, asset, table_of)
            retired_now |= gone
        dead = retired | gone
        covered: set[str] = set()
        for _, keys in _visible(slots, dead):
            if len(keys) > 1 and set(keys) & dead:
                rerun |= set(keys) - dead - covered
            covered |= set(keys)
    return {"retired": sorted(retired_now), "rerun": sorted(rerun)}
