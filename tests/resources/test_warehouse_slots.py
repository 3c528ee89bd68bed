"""Which partition slots make up a partitioned asset's view (`resources.warehouse.slots`), as
properties over random histories of slots and retired keys, then on a real DuckDB file."""

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.warehouse.slots import _visible, reconcile, record_slot

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
SLOT_KEYS = st.lists(KEYS, min_size=1, max_size=3, unique=True)


@given(st.lists(SLOT_KEYS, max_size=8), st.sets(KEYS))
def test_the_view_keeps_every_live_key_and_only_needed_slots(history, retired):
    slots = [(f"s{n}", keys) for n, keys in enumerate(history)]  # newest first
    shown = _visible(slots, retired)
    shown_keys = {k for _, keys in shown for k in keys}
    every_key = {k for keys in history for k in keys}
    # no live file's rows are left out
    assert every_key - retired <= shown_keys
    # each shown slot holds a live key that no newer slot holds (it is needed)
    for slot, keys in shown:
        newer = {k for s, ks in slots[: slots.index((slot, keys))] for k in ks}
        assert set(keys) - newer - retired
    # a retired key shows only inside a slot shared with a live key
    for _, keys in shown:
        assert set(keys) - retired


def table_of(schema, name):
    from resources.warehouse.store import _table

    return _table(schema, name)


@settings(max_examples=25, deadline=None)
@given(st.lists(SLOT_KEYS, min_size=1, max_size=5), st.sets(KEYS))
def test_reconcile_retires_gone_keys_and_names_the_live_ones_to_rerun(history, live):
    """On DuckDB: after `reconcile(live)` the view's `_partition` values hold no gone key
    except beside a key `rerun` names; after running each of those alone it holds none."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA q")
    for n, keys in enumerate(reversed(history)):  # oldest first
        con.execute(f"CREATE TABLE q.s{n} AS SELECT {n} AS x")
        record_slot(con, "q", "t", f"s{n}", keys, table_of)
    out = reconcile(con, "q", live, table_of)
    every = {k for keys in history for k in keys}
    assert set(out["retired"]) == every - live and set(out["rerun"]) <= live

    def labels():
        rows = con.execute('SELECT DISTINCT "_partition" FROM q.t').fetchall()
        return [set(label.split(", ")) for (label,) in rows]

    for keys in labels():
        assert keys <= live or keys & set(out["rerun"]), (keys, out)
    for n, key in enumerate(out["rerun"]):
        con.execute(f"CREATE TABLE q.alone{n} AS SELECT 0 AS x")
        record_slot(con, "q", "t", f"alone{n}", [key], table_of)
    assert reconcile(con, "q", live, table_of) == {"retired": [], "rerun": []}
    assert all(keys <= live for keys in labels())
    assert {k for keys in labels() for k in keys} == every & live
    con.close()
