"""Issue 36 item 4: typed Parquet values reach the prompt as the table holds them, as their SQL
text: a date without a time, a timestamp in its own zone, a decimal with its scale, binary as
hex, a duration as ISO 8601 (before: `2024-02-29 00:00:00`, UTC, `1.1`, a `bytearray(...)`
repr, `0 days 00:00:05`)."""

import datetime as dt
import decimal
import re
from zoneinfo import ZoneInfo

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.data.tables import load_table
from llm_assets.optimizer.table import iso_duration, render_cell
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

ZONES = ["Europe/Paris", "America/New_York", "Asia/Kolkata", "UTC"]
SQL = (
    "SELECT r.id, LLM('Row: {id} {d} {ts} {price} {blob} {dur}', r.id, r.d, r.ts, r.price, "
    "r.blob, r.dur) AS a FROM reviews r"
)
DATES = st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))
INSTANTS = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC))
DECIMALS = st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False, allow_infinity=False)
DURATIONS = st.timedeltas(dt.timedelta(days=-(10**5)), dt.timedelta(days=10**5))


def prompts_of(path, home) -> list[str]:
    query = compile_sql(SQL, name="q")
    run = run_query(
        query, {"reviews": load_table(path)}, QueryOptions(method="original"),
        SimulatedEngine(), send=False,
    )  # fmt: skip
    return list(run.stages[0].plan["prompt"])


def duckdb_text(values, kind: pa.DataType) -> list[str]:
    """DuckDB's own `CAST(v AS VARCHAR)` of each value (the SQL engine's text for it)."""
    with duckdb.connect() as con:
        con.register("t", pa.table({"v": pa.array(values, kind)}))
        return [row[0] for row in con.execute("SELECT CAST(v AS VARCHAR) FROM t").fetchall()]


def offset_text(offset: dt.timedelta) -> str:
    """`+HH:MM`, or `+HH:MM:SS` for a local mean time (Paris before 1911: +00:09:21)."""
    seconds = int(offset.total_seconds())
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"
    return text + (f":{seconds % 60:02d}" if seconds % 60 else "")


def iso_to_microseconds(text: str) -> int:
    match = re.fullmatch(r"(-?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text)
    assert match and text not in ("P", "-P") and not text.endswith("T"), text
    sign, days, hours, minutes, seconds = match.groups()
    total = decimal.Decimal(seconds or 0) + 60 * int(minutes or 0) + 3600 * int(hours or 0)
    total += 86_400 * int(days or 0)
    return int(total * 10**6) * (-1 if sign else 1)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(DATES, INSTANTS, DECIMALS, st.binary(max_size=6), DURATIONS),
        min_size=1,
        max_size=4,
    ),  # fmt: skip
    zone=st.sampled_from(ZONES),
)
def test_typed_parquet_values_reach_the_prompt_as_their_sql_text(tmp_path, monkeypatch, rows, zone):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    dates, instants, prices, blobs, durations = map(list, zip(*rows, strict=True))
    path = tmp_path / "typed.parquet"
    table = pa.table(
        {
            "id": [f"r{i}" for i in range(len(rows))],
            "d": pa.array(dates, pa.date32()),
            "ts": pa.array(instants, pa.timestamp("us", tz=zone)),
            "price": pa.array(prices, pa.decimal128(10, 2)),
            "blob": pa.array(blobs, pa.binary()),
            "dur": pa.array(durations, pa.duration("us")),
        }
    )
    pq.write_table(table, path)
    prompts = prompts_of(path, tmp_path)
    assert len(prompts) == len(rows)  # (each row's id makes its prompt distinct)
    price_text = duckdb_text(prices, pa.decimal128(10, 2))
    for prompt in prompts:
        fields = dict(line.split(": ", 1) for line in prompt.splitlines()[1:])
        i = int(fields["id"].removeprefix("r"))
        assert fields["d"] == dates[i].isoformat(), fields
        local = instants[i].astimezone(ZoneInfo(zone))
        assert dt.datetime.fromisoformat(fields["ts"]) == instants[i], fields
        assert fields["ts"].endswith(offset_text(local.utcoffset())), fields  # its own zone
        assert fields["price"] == price_text[i], fields  # DuckDB's text: the scale kept
        assert fields["blob"] == "\\x" + blobs[i].hex(), fields
        assert iso_to_microseconds(fields["dur"]) == durations[i] // dt.timedelta(microseconds=1)


@given(st.timedeltas(dt.timedelta(days=-(10**6)), dt.timedelta(days=10**6)))
def test_durations_read_back_from_their_iso_text(value):
    assert iso_to_microseconds(iso_duration(value)) == value // dt.timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (decimal.Decimal("1.10"), "1.10"),
        (decimal.Decimal("1E-7"), "0.0000001"),
        (dt.date(2024, 2, 29), "2024-02-29"),
        (bytearray(b"\x00\xff"), "\\x00ff"),
        (dt.timedelta(0), "PT0S"),
        (dt.timedelta(seconds=-5), "-PT5S"),
        (dt.timedelta(days=2), "P2D"),
    ],
)
def test_typed_values_render_as_sql_text(value, text):
    assert render_cell(value) == text
