"""Bounded input (issue 36 item 1): each limit of `InputLimits` refuses a file over it in one
line naming the file, the limit and how to raise it, checked while the file is read; a file at
the limit loads exactly as without limits. Small limits stand in for the gigabyte defaults."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llm_assets.data import delimited, limits
from llm_assets.data.limits import InputLimits
from llm_assets.data.tables import InputError, load_table
from llm_assets.pipeline.sources import SourceSpec

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def one_line_refusal(error: Exception, path, field: str) -> str:
    message = str(error)
    assert "\n" not in message and str(path) in message, message
    assert f"the {field} limit of" in message and f"limits: {{{field}: N}}" in message, message
    return message


def write_csv(path, rows: int, columns: int = 2, cell: str = "x") -> None:
    header = ",".join(f"c{j}" for j in range(columns))
    body = "".join(",".join(f"{cell}{i}" for _ in range(columns)) + "\n" for i in range(rows))
    path.write_text(header + "\n" + body)


def test_the_defaults_are_the_documented_ones_and_bad_values_are_refused():
    assert InputLimits() == InputLimits(
        max_bytes=4 << 30, max_rows=10_000_000, max_columns=16_384, max_cell_bytes=64 << 20
    )
    with pytest.raises(ValidationError, match="max_rows"):
        InputLimits(max_rows=0)
    with pytest.raises(ValidationError, match="max_cell"):
        InputLimits(max_cells=5)  # a misspelt limit is refused, not ignored


@SETTINGS
@given(rows=st.integers(1, 40), limit=st.integers(1, 40), kind=st.sampled_from(["csv", "jsonl"]))
def test_rows_load_up_to_the_limit_and_are_refused_past_it(tmp_path, rows, limit, kind):
    path = tmp_path / f"t.{kind}"
    if kind == "csv":
        write_csv(path, rows)
    else:
        path.write_text("".join(json.dumps({"a": f"v{i}"}) + "\n" for i in range(rows)))
    if rows <= limit:
        assert load_table(path, limits={"max_rows": limit}).equals(load_table(path))
    else:
        with pytest.raises(InputError) as caught:
            load_table(path, limits={"max_rows": limit})
        one_line_refusal(caught.value, path, "max_rows")


def test_rows_are_counted_while_parsing_not_after(tmp_path, monkeypatch):
    """With blocks of 1 KiB a 5,000-row file stops at the first block past the limit."""
    path = tmp_path / "t.csv"
    write_csv(path, 5_000)
    monkeypatch.setattr(delimited, "FIRST_BLOCK", 1 << 10)
    with pytest.raises(InputError, match=r"has (\d{2,3}) rows or more") as caught:
        load_table(path, limits={"max_rows": 10})
    assert int(caught.value.args[0].split(" has ")[1].split(" rows")[0]) < 200


def test_rows_of_a_glob_count_together(tmp_path):
    for name in ("a.csv", "b.csv"):
        write_csv(tmp_path / name, 6)
    assert load_table(str(tmp_path / "*.csv"), limits={"max_rows": 12}).num_rows == 12
    with pytest.raises(InputError) as caught:
        load_table(str(tmp_path / "*.csv"), limits={"max_rows": 11})
    one_line_refusal(caught.value, tmp_path / "b.csv", "max_rows")


def test_parquet_rows_columns_and_bytes_are_refused_from_the_footer(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({f"c{j}": [f"v{i}" for i in range(50)] for j in range(4)}), path)
    assert load_table(path, limits={"max_rows": 50, "max_columns": 4}).num_rows == 50
    for field, value in (("max_rows", 49), ("max_columns", 3), ("max_bytes", 100)):
        with pytest.raises(InputError) as caught:
            load_table(path, limits={field: value})
        one_line_refusal(caught.value, path, field)


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_columns_over_the_limit_are_refused(tmp_path, kind):
    path = tmp_path / f"t.{kind}"
    table = pa.table({f"c{j}": ["v"] for j in range(20)})
    if kind == "csv":
        write_csv(path, 1, columns=20)
    elif kind == "jsonl":
        path.write_text(json.dumps({f"c{j}": "v" for j in range(20)}) + "\n")
    else:
        pq.write_table(table, path)
    assert load_table(path, limits={"max_columns": 20}).num_columns == 20
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_columns": 19})
    one_line_refusal(caught.value, path, "max_columns")


def test_a_header_of_a_million_columns_stops_at_its_first_prefix(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text(",".join("c" for _ in range(1_000_000)))  # one line, no newline
    with pytest.raises(InputError, match=r"has 3\d,\d{3} columns or more") as caught:
        load_table(path, limits={"max_columns": 100})
    one_line_refusal(caught.value, path, "max_columns")


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_a_cell_over_the_limit_is_refused_with_its_row_and_column(tmp_path, kind):
    path = tmp_path / f"t.{kind}"
    long = "é" * 50  # 100 UTF-8 bytes
    rows = ["a", "b", long, "c"]
    if kind == "csv":
        path.write_text("id,text\n" + "".join(f"{i},{v}\n" for i, v in enumerate(rows)))
    elif kind == "jsonl":
        path.write_text(
            "".join(json.dumps({"id": i, "text": v}) + "\n" for i, v in enumerate(rows))
        )
    else:
        pq.write_table(pa.table({"id": range(4), "text": rows}), path)
    assert load_table(path, limits={"max_cell_bytes": 100}).column("text").to_pylist() == rows
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_cell_bytes": 99})
    message = one_line_refusal(caught.value, path, "max_cell_bytes")
    assert "row 3 (after the header), column 'text': a cell of 100 bytes" in message


@pytest.mark.parametrize("line", ["x" * 300_000, 'a,"' + "x," * 150_000 + '"\nb'])
def test_a_header_field_over_the_cell_limit_is_refused(tmp_path, line):
    """One long line (told from its bytes), and a long quoted header name (told by the csv
    reader's field limit)."""
    path = tmp_path / "line.csv"
    path.write_text(line)
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_cell_bytes": 100_000})
    assert "line 1 (the header)" in one_line_refusal(caught.value, path, "max_cell_bytes")


@pytest.mark.parametrize("first_block", [None, 1 << 10])
def test_a_valid_cell_longer_than_a_parse_block_loads_intact(tmp_path, monkeypatch, first_block):
    """Issue 36: a long valid cell was refused with pyarrow's "straddling object" and advice to
    check the delimiter. With the first block as small as 1 KiB the parse grows its blocks."""
    if first_block is not None:
        monkeypatch.setattr(delimited, "FIRST_BLOCK", first_block)
    cell = ('line one, "quoted"\n' * 150_000)[:2_500_000]  # 2.5 MB: over pyarrow's 1 MiB blocks
    path = tmp_path / "long.csv"
    quoted = '"' + cell.replace('"', '""') + '"'
    path.write_text(f"id,text\n1,short\n2,{quoted}\n3,after\n")
    table = load_table(path)
    assert table.column("text").to_pylist() == ["short", cell, "after"]


def test_a_long_cell_over_the_limit_is_refused_truthfully(tmp_path, monkeypatch):
    monkeypatch.setattr(delimited, "FIRST_BLOCK", 1 << 10)
    path = tmp_path / "long.csv"
    path.write_text('id,text\n1,short\n2,"' + "y\n" * 20_000 + '"\n')
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_cell_bytes": 10_000})
    message = one_line_refusal(caught.value, path, "max_cell_bytes")
    assert "row 2 (after the header), column 'text': a cell of 40,000 bytes" in message
    assert "straddl" not in message and "delimiter" not in message


def test_bytes_of_a_plain_file_are_refused_from_its_size(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(path, 10)
    size = path.stat().st_size
    assert load_table(path, limits={"max_bytes": size}).num_rows == 10
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_bytes": size - 1})
    one_line_refusal(caught.value, path, "max_bytes")


@pytest.mark.parametrize("name", ["bomb.csv.gz", "bomb.jsonl.gz", "cp1252.csv.gz"])
def test_a_gzip_bomb_stops_inflating_at_the_limit(tmp_path, monkeypatch, name):
    """A 64 MiB gzip of one repeated line is refused after ~1 MiB is inflated, not at its end:
    streamed (a UTF-8 CSV), or read whole (JSON lines, and a CSV that is not UTF-8)."""
    monkeypatch.setattr(limits, "CHUNK", 1 << 16)
    monkeypatch.setattr("llm_assets.data.byte_sources.CHUNK", 1 << 16)
    path = tmp_path / name
    block = b"0123456789abcdef" * (1 << 16)  # 1 MiB
    with gzip.open(path, "wb") as out:
        out.write(b"n\xe9\n" if name.startswith("cp1252") else b"n\n")
        for _ in range(64):
            out.write(block)
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_bytes": 1 << 20})
    message = one_line_refusal(caught.value, path, "max_bytes")
    stopped = int(message.split("stopped after ")[1].split(")")[0].replace(",", ""))
    assert (1 << 20) < stopped <= (1 << 20) + (1 << 16) + 3


def test_a_source_spec_carries_its_limits_to_the_loader(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(path, 5)
    spec = SourceSpec.parse({"path": str(path), "limits": {"max_rows": 4}})
    with pytest.raises(InputError) as caught:
        spec.read()
    one_line_refusal(caught.value, path, "max_rows")
    assert SourceSpec.parse({"path": str(path), "limits": {"max_rows": 5}}).read().num_rows == 5
    with pytest.raises(ValidationError, match="max_rows"):
        SourceSpec.parse({"path": str(path), "limits": {"max_rows": -1}})


def test_one_long_line_is_refused_from_its_bytes_without_decoding_it(tmp_path, monkeypatch):
    path = tmp_path / "line.csv"
    path.write_text("x" * 3_000_000)
    sizes = []
    original = delimited.head_text

    def spy(payload, size):
        sizes.append(size)
        return original(payload, size)

    monkeypatch.setattr(delimited, "head_text", spy)
    with pytest.raises(InputError) as caught:
        load_table(path, limits={"max_cell_bytes": 1_000_000})
    one_line_refusal(caught.value, path, "max_cell_bytes")
    assert max(sizes) <= delimited._SNIFF_BYTES  # only the delimiter sniff's sample
