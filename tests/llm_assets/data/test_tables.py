"""The one table loader: what is written in the file is what comes back (text and nulls),
and bad input gets one line naming the file, the line and the column."""

import json
import re

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llm_assets.data.tables import InputError, load_table, predicate_types
from llm_assets.sql.syntax import duckdb_fold

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
TRICKY = [
    "007", "0042", "TRUE", "true", "False", "1.50", "12345678901234567891", "NaN", "None",
    "null", "NA", "N/A", "-0", "1e5", " padded ", "", '"', '""', "a,b", "a\tb", "a;b", "a|b",
    "line\nbreak", "cr\r\nlf", "ls\u2028ps\u2029nel\x85", "caf\u00e9", "\u201ccurly\u201d",
    "\u20ac5", "\u65e5\u672c",
]  # fmt: skip
SPECIAL = ',\t;|"\r\n'


def encodable(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


CP1252_TEXT = "".join(c for c in map(chr, range(0x20, 0x2200)) if encodable(c, "cp1252"))


def cell_text(alphabet=None):
    chars = st.characters(codec="utf-8") if alphabet is None else st.sampled_from(alphabet)
    tricky = [t for t in TRICKY if alphabet is None or encodable(t, "cp1252")]
    return st.one_of(st.sampled_from(tricky), st.text(chars, max_size=12), st.text(SPECIAL + "ab"))


def tables(alphabet=None):
    """(names, rows): 1-4 non-blank column names, unique also as DuckDB compares them (ASCII
    case ignored), and 0-8 rows of text or None."""

    def with_rows(names):
        cell = st.one_of(st.none(), cell_text(alphabet))
        row = st.lists(cell, min_size=len(names), max_size=len(names))
        return st.tuples(st.just(names), st.lists(row, max_size=8))

    name = (
        st.text(st.sampled_from("abcxyz _-\u00e9\"',\t"), min_size=1)
        if alphabet
        else st.text(min_size=1)
    )
    name = name.filter(lambda n: n.strip() and "\ufeff" not in n and "\x00" not in n)
    return st.lists(name, min_size=1, max_size=4, unique_by=duckdb_fold).flatmap(with_rows)


def write_delimited(path, names, rows, delimiter, encoding, quote_plain, newline):
    """Our own writer: a null is an empty unquoted cell, every other cell is quoted (doubling
    quotes) unless `quote_plain` is False and it holds no special character."""

    def cell(value):
        if value is None:
            return ""
        if quote_plain or not value or set(value) & set(SPECIAL):
            return '"' + value.replace('"', '""') + '"'
        return value

    lines = [delimiter.join(cell(v) for v in row) for row in [names, *rows]]
    path.write_bytes((newline.join(lines) + newline).encode(encoding))


def as_rows(table):
    return [list(r.values()) for r in table.to_pylist()]


@SETTINGS
@given(
    table=tables(),
    delimiter=st.sampled_from(",\t;|"),
    suffix=st.sampled_from([".csv", ".tsv", ".csv.gz"]),
    quote_plain=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
    bom=st.booleans(),
)
def test_utf8_delimited_text_comes_back_exactly(
    tmp_path, table, delimiter, suffix, quote_plain, newline, bom
):
    names, rows = table
    path = tmp_path / f"t{suffix}"
    write_delimited(
        path, names, rows, delimiter, "utf-8-sig" if bom else "utf-8", quote_plain, newline
    )
    if suffix.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(path.read_bytes()))
    explicit = delimiter if suffix == ".tsv" and delimiter != "\t" else None
    loaded = load_table(path, delimiter=explicit)
    assert loaded.column_names == names
    assert all(pa.types.is_string(t) for t in loaded.schema.types)
    assert as_rows(loaded) == rows


@SETTINGS
@given(
    table=tables(CP1252_TEXT),
    delimiter=st.sampled_from(",\t"),
    suffix=st.sampled_from([".csv", ".tsv"]),
)
def test_cp1252_delimited_text_comes_back_exactly(tmp_path, table, delimiter, suffix):
    names, rows = table
    path = tmp_path / f"t{suffix}"
    write_delimited(path, names, rows, delimiter, "cp1252", True, "\r\n")
    data = path.read_bytes()
    # a file holding a valid multi-byte UTF-8 sequence is read as UTF-8 (UTF-8 is preferred)
    assume(data.decode("utf-8", "ignore").isascii())
    explicit = None if suffix == ".csv" or delimiter == "\t" else delimiter
    loaded = load_table(path, delimiter=explicit)
    assert loaded.column_names == names and as_rows(loaded) == rows
    assert as_rows(load_table(path, encoding="cp1252", delimiter=delimiter)) == rows


def test_quoted_empty_is_empty_text_and_unquoted_empty_is_null(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('only\n""\n\nx\n')
    assert load_table(path).column("only").to_pylist() == ["", None, "x"]
    path.write_text('a,b\n"",\n,""\n')
    assert as_rows(load_table(path)) == [["", None], [None, ""]]


def test_real_rotten_tomatoes_shape_cp1252_tsv_as_tsv_and_as_csv(tmp_path):
    header = "id\treview\trating\tfresh\tcritic\ttop_critic\tpublisher\tdate"
    lines = [
        header,
        "007\t\u201cA triumph\u201d \u2013 caf\u00e9 society\t3/5\tfresh\tAnn\tTRUE\tThe Times\t"
        "November 10, 2000",
        "0042\t\t\trotten\t\tFALSE\t\t",
        '12345678901234567891\tSaid "5 stars"\tNaN\tfresh\tNone\tTRUE\tnull\t2001-01-01',
    ]
    data = ("\r\n".join(lines) + "\r\n").encode("cp1252")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    for name in ("reviews.tsv", "reviews.csv"):
        (tmp_path / name).write_bytes(data)
        table = load_table(tmp_path / name)
        assert table.column_names == header.split("\t")
        rows = as_rows(table)
        assert rows[0][:3] == ["007", "\u201cA triumph\u201d \u2013 caf\u00e9 society", "3/5"]
        assert rows[1] == ["0042", None, None, "rotten", None, "FALSE", None, None]
        assert rows[2][:6] == [
            "12345678901234567891",
            'Said "5 stars"',
            "NaN",
            "fresh",
            "None",
            "TRUE",
        ]


# --- JSON and Parquet ---------------------------------------------------------------------

JSON_NUMBER = st.from_regex(
    r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)


@SETTINGS
@given(table=tables(), keep_nulls=st.booleans(), as_list=st.booleans(), ascii=st.booleans())
def test_json_text_and_nulls_come_back_exactly(tmp_path, table, keep_nulls, as_list, ascii):
    names, rows = table
    assume(rows or as_list is False)
    records = [
        {k: v for k, v in zip(names, row, strict=True) if keep_nulls or v is not None}
        for row in rows
    ]
    assume(all(records) and set(names) == {k for r in records for k in r})
    path = tmp_path / ("t.json" if as_list else "t.jsonl")
    if as_list:
        text = json.dumps(records, ensure_ascii=ascii, indent=1)
    else:
        text = "".join(json.dumps(r, ensure_ascii=ascii) + "\n" for r in records)
    path.write_text(text, encoding="utf-8")
    loaded = load_table(path)
    assert sorted(loaded.column_names) == sorted(names)
    assert loaded.select(names).to_pylist() == [dict(zip(names, r, strict=True)) for r in rows]


@SETTINGS
@given(number=JSON_NUMBER, flag=st.booleans(), nested=st.lists(JSON_NUMBER, max_size=3))
def test_json_numbers_booleans_and_nested_values_keep_their_text(tmp_path, number, flag, nested):
    inner = "{" + f'"xs": [{", ".join(nested)}], "k": {{"t": true, "n": null}}' + "}"
    (tmp_path / "t.ndjson").write_text(
        f'{{"n": {number}, "b": {json.dumps(flag)}, "o": {inner}, "nan": NaN}}\n'
    )
    row = load_table(tmp_path / "t.ndjson").to_pylist()[0]
    compact = '{"xs":[' + ",".join(nested) + '],"k":{"t":true,"n":null}}'
    assert row == {"n": number, "b": "true" if flag else "false", "o": compact, "nan": "NaN"}


def test_json_lines_split_only_at_newlines(tmp_path):
    text = "ls\u2028ps\u2029nel\x85"
    (tmp_path / "t.jsonl").write_text(json.dumps({"a": text}, ensure_ascii=False) + "\r\n")
    assert load_table(tmp_path / "t.jsonl").to_pylist() == [{"a": text}]


@SETTINGS
@given(table=tables())
def test_parquet_keeps_its_types_and_nulls(tmp_path, table):
    names, rows = table
    columns = {n: pa.array([r[i] for r in rows], pa.string()) for i, n in enumerate(names)}
    columns["count \u2116"] = pa.array([i if i % 3 else None for i in range(len(rows))], pa.int64())
    assume("count \u2116" not in names)
    written = pa.table(columns)
    pq.write_table(written, tmp_path / "t.parquet")
    assert load_table(tmp_path / "t.parquet").equals(written)
    pq.write_table(written, tmp_path / "t.data")
    assert load_table(tmp_path / "t.data", format="parquet").equals(written)


def test_glob_reads_every_match_in_sorted_order(tmp_path):
    for name, body in [
        ("b.tsv", "x\ty\n3\t\n"),
        ("a.tsv", "x\ty\n1\t2\n"),
        ("c.tsv", "y\tx\n6\t5\n"),
    ]:
        (tmp_path / name).write_text(body)
    table = load_table(tmp_path / "*.tsv")
    assert as_rows(table) == [["1", "2"], ["3", None], ["5", "6"]]


# --- one-line errors ----------------------------------------------------------------------


def one_line_error(path, *facts, **options) -> str:
    with pytest.raises(InputError) as caught:
        load_table(path, **options)
    message = str(caught.value)
    assert "\n" not in message and str(path).split("*")[0] in message, message
    for fact in facts:
        assert re.search(fact, message), (fact, message)
    return message


def test_missing_file_and_glob_matching_nothing(tmp_path):
    one_line_error(tmp_path / "nope.csv", "not found")
    one_line_error(tmp_path / "data" / "*.tsv", "no file matches")


def test_unknown_extension_lists_the_accepted_ones(tmp_path):
    (tmp_path / "t.xlsx").write_text("a\n1\n")
    one_line_error(tmp_path / "t.xlsx", r"expected one of \.csv, \.tsv, .*\.jsonl.*format=")


def test_empty_file(tmp_path):
    (tmp_path / "t.csv").write_text("\n")
    one_line_error(tmp_path / "t.csv", "empty")


def test_duplicate_column_names(tmp_path):
    (tmp_path / "t.csv").write_text("id,review,id\n1,a,2\n")
    one_line_error(tmp_path / "t.csv", "line 1, column 3", "'id' appears twice", "also column 1")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_column_names_differing_only_in_case_are_one_line_errors(tmp_path, suffix):
    """DuckDB compares column names ignoring ASCII case: `r.Review` would read `review`'s
    values. Every format is refused in one line naming both columns; names that differ in
    non-ASCII case (`ä`, `Ä`) are distinct to DuckDB and load."""
    path = tmp_path / f"t{suffix}"
    columns = {"id": ["1"], "review": ["lower"], "Review": ["UPPER"]}
    if suffix == ".csv":
        path.write_text("id,review,Review\n1,lower,UPPER\n")
    elif suffix == ".jsonl":
        path.write_text(json.dumps({k: v[0] for k, v in columns.items()}) + "\n")
    else:
        pq.write_table(pa.table(columns), path)
    place = "line 1, column 3" if suffix == ".csv" else "column 3"
    one_line_error(path, place, re.escape("'Review' differs from column 2 ('review') only in case"))
    pq.write_table(pa.table({"ä": ["lower"], "Ä": ["UPPER"]}), tmp_path / "u.parquet")
    assert load_table(tmp_path / "u.parquet").column_names == ["ä", "Ä"]


def test_empty_column_name(tmp_path):
    (tmp_path / "t.tsv").write_text("id\t \treview\n1\t2\t3\n")
    one_line_error(tmp_path / "t.tsv", "line 1, column 2 has an empty name")


def test_ragged_row_names_the_line_and_field_counts(tmp_path):
    (tmp_path / "t.csv").write_text('a,b,c\n1,"two\nlines",3\n4,5\n')
    one_line_error(tmp_path / "t.csv", "line 4", "expected 3 fields", "got 2", "delimiter")


def test_undecodable_bytes_under_an_explicit_encoding(tmp_path):
    (tmp_path / "t.csv").write_bytes("a,review\n1,ok\n2,caf\u00e9\n".encode("cp1252"))
    one_line_error(
        tmp_path / "t.csv", r"line 3, column 2 \('review'\)", "0xe9", "utf-8", encoding="utf-8"
    )


def test_bytes_neither_utf8_nor_cp1252(tmp_path):
    (tmp_path / "t.tsv").write_bytes(b"a\tb\nx\ty\x81\n")
    one_line_error(tmp_path / "t.tsv", r"line 2, column 2 \('b'\)", "0x81", "encoding=")
    (tmp_path / "u.tsv").write_bytes(b"a\tb\nx\ty\n\x8dx\ty\n")
    one_line_error(tmp_path / "u.tsv", r"line 3, column 1 \('a'\)", "0x8d")


def test_empty_json_key_and_unreadable_parquet(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"a": 1}\n{"": 2}\n')
    one_line_error(tmp_path / "t.jsonl", "column 2 has an empty name")
    (tmp_path / "t.parquet").write_text("not parquet")
    one_line_error(tmp_path / "t.parquet", "not a readable Parquet file")


def test_a_bom_is_dropped_under_an_explicit_encoding_too(tmp_path):
    (tmp_path / "t.csv").write_bytes("\ufeffid,x\n1,2\n".encode("utf-8"))
    assert load_table(tmp_path / "t.csv", encoding="utf-8").column_names == ["id", "x"]


def test_json_line_that_is_not_an_object(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"a": 1}\n\n[1, 2]\n')
    one_line_error(tmp_path / "t.jsonl", "line 3", "expected a JSON object, got a list")
    (tmp_path / "u.jsonl").write_text('{"a": 1}\n{"a": \n')
    one_line_error(tmp_path / "u.jsonl", "line 2", "invalid JSON")
    (tmp_path / "v.jsonl").write_text('{"a": 1}\n{"a": 2}, {"a": 3}\n')
    one_line_error(
        tmp_path / "v.jsonl", "line 2, column 9: invalid JSON", "one JSON object per line"
    )


def test_glob_files_with_different_columns(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "b.csv").write_text("x,z\n1,2\n")
    message = one_line_error(tmp_path / "*.csv", "differ", "same columns")
    assert "b.csv" in message


def test_unknown_format_option(tmp_path):
    with pytest.raises(InputError, match="unknown format 'xls'; expected one of csv, tsv"):
        load_table(tmp_path / "t.csv", format="xls")


# --- types for predicates -----------------------------------------------------------------


def test_a_column_of_one_table_is_typed_once_and_a_new_table_afresh(monkeypatch):
    """The type check and the filter both type a query's predicate columns: each column of
    a loaded table is scanned once. A table built later (even at a freed table's address)
    is typed from its own values."""
    from llm_assets.data import sql_types

    scanned = []
    scan = sql_types._scan_types
    monkeypatch.setattr(
        sql_types, "_scan_types", lambda t, cols: scanned.append(list(cols)) or scan(t, cols)
    )
    table = pa.table({"a": ["1", "2"], "b": ["x", "y"]})
    assert predicate_types(table, ["a"]) == {"a": "BIGINT"}
    assert predicate_types(table, ["b", "a"]) == {"b": "VARCHAR", "a": "BIGINT"}
    assert scanned == [["a"], ["b"]]
    key = id(table)
    del table  # its entry goes with it: a later table at the same address is typed afresh
    assert key not in sql_types._TYPED
    for k in range(20):
        values = ["1", "2"] if k % 2 else ["x", "2"]
        fresh = pa.table({"a": values})
        assert predicate_types(fresh, ["a"]) == {"a": "BIGINT" if k % 2 else "VARCHAR"}
        del fresh


def test_predicate_types_of_typical_columns():
    table = pa.table(
        {
            "rating": ["3", "4.5", None, "NaN"],
            "verified": ["True", "false", None, "TRUE"],
            "count": ["1", "2", "-3", None],
            "flag": ["0", "1", "1", "0"],
            "zip": ["007", "0042", "12", "1"],
            "big id": ["12345678901234567891", "1", "2", "3"],
            "day": ["2020-01-01", "1999-12-31", None, None],
            'when "ts"': ["2020-01-01 10:00:00", "2020-01-02 00:00:01", None, None],
            "select": pa.array([None, None, None, None], pa.string()),
            "n": pa.array([1, 2, 3, 4]),
        }
    )
    assert predicate_types(table, table.column_names) == {
        "rating": "DOUBLE",
        "verified": "BOOLEAN",
        "count": "BIGINT",
        "flag": "BIGINT",
        "zip": "VARCHAR",
        "big id": "HUGEINT",
        "day": "DATE",
        'when "ts"': "TIMESTAMP",
        "select": "VARCHAR",
    }


SNIFFABLE = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.integers(0, 999).map(lambda i: f"{i:04d}"),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(str),
    st.sampled_from(["true", "false", "TRUE", "False", "yes", "no", "NaN", "1e5", "-0", "+5"]),
    st.dates().map(str),
    st.datetimes().map(lambda d: d.isoformat(sep=" ", timespec="seconds")),
    st.integers(10**19, 10**25).map(str),
    st.sampled_from(["abc", "x y", "None", "null", "NA"]),
    st.none(),
)


@SETTINGS
@given(columns=st.lists(st.lists(SNIFFABLE, min_size=1, max_size=6), min_size=1, max_size=3))
def test_predicate_types_agree_with_duckdbs_csv_sniffer(tmp_path, columns):
    """Wherever DuckDB's own CSV reader types a column, we give the same type; every value of
    a column we type casts to that type (CAST, not TRY_CAST)."""
    height = max(map(len, columns))
    names = [f"c{i}" for i in range(len(columns))]
    rows = [[c[r] if r < len(c) else None for c in columns] for r in range(height)]
    path = tmp_path / "t.csv"
    write_delimited(path, names, rows, ",", "utf-8", False, "\n")
    table = load_table(path)
    ours = predicate_types(table, names)
    with duckdb.connect() as con:
        sniffed = {
            r[0]: r[1] for r in con.execute("DESCRIBE FROM read_csv(?)", [str(path)]).fetchall()
        }
        for name, type_name in ours.items():
            if sniffed[name] != "VARCHAR":
                assert type_name == sniffed[name], (name, columns)
            values = [v for v in table.column(name).to_pylist() if v is not None]
            for value in values:
                con.execute(f"SELECT CAST(? AS {type_name})", [value])  # raises if it cannot


def test_delimiter_detection_prefers_the_delimiter_whose_quoting_is_clean(tmp_path):
    (tmp_path / "t.csv").write_text('_\t","\n')  # tab-separated; the second name is ","
    assert load_table(tmp_path / "t.csv").column_names == ["_", ","]
    (tmp_path / "u.csv").write_text('a;b\n"x,1";2\n"y,2";3\n')
    assert as_rows(load_table(tmp_path / "u.csv")) == [["x,1", "2"], ["y,2", "3"]]


@SETTINGS
@given(
    rows=st.lists(st.text(alphabet="abc é€ñ", min_size=1, max_size=8), min_size=2, max_size=6),
    where=st.data(),
    stray=st.sampled_from([b"\xe9", b"\x80", b"\xff", b"\xc3"]),
)
def test_one_stray_byte_in_a_utf8_file_is_named_or_replaced_alone(tmp_path, rows, where, stray):
    """Issue 22 item 3: a UTF-8 file with one stray byte used to be re-read as Windows-1252,
    garbling every accented character. It is UTF-8 (preferred): the byte is an error naming
    line and column, or with encoding_errors='replace' U+FFFD in that cell only."""
    assume(any(not r.isascii() for r in rows))  # the file is recognisably UTF-8
    k = where.draw(st.integers(0, len(rows) - 1))
    cells = [r.encode() for r in rows]
    cells[k] += stray + b"x"
    path = tmp_path / "t.csv"
    path.write_bytes(b"review\n" + b"".join(c + b"\n" for c in cells))
    one_line_error(path, f"line {k + 2}, column 1", "otherwise UTF-8", "encoding_errors")
    replaced = load_table(path, encoding_errors="replace").column("review").to_pylist()
    expected = list(rows)
    expected[k] = rows[k] + "\ufffdx"
    assert replaced == expected


def test_encoding_errors_is_checked():
    with pytest.raises(InputError, match="encoding_errors 'ignore'"):
        load_table(__file__, format="csv", encoding_errors="ignore")


def test_first_row_reads_a_prefix_and_agrees_with_reading_the_whole_text():
    """`first_row` reads a doubling prefix (no 4-byte copy of a whole file): a header
    longer than the first prefix, quoted newlines, a broken header and a bad later row give
    what the csv reader gives on the whole text."""
    import csv
    import io

    from llm_assets.data import delimited

    def whole(text: str, delimiter: str) -> list[str]:
        try:
            return next(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), [])
        except csv.Error:
            return []

    wide = ",".join(f"column_{i}" for i in range(20_000))  # > 64K characters
    texts = [
        wide + "\n1,2\n",
        wide,
        '"a\nb",c\r\n1,2\n' + "x" * 100_000,
        '"' + "q" * 200_000 + '",b\n1,2\n',  # over the csv field limit: [] either way
        "a,b\n\x00,1\n",
        "",
        "a,b",
    ]
    for text in texts:
        assert delimited.first_row(text, ",") == whole(text, ","), text[:40]
