"""`filtered_rows` takes the text columns it passes through from the loaded tables by row
number (DuckDB joins, filters and sorts only row numbers): the frame is the one DuckDB gives
when it carries every column itself."""

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.pipeline import filtering
from llm_assets.sql.compiler import compile_sql

TEXT = st.one_of(
    st.none(),
    st.text(alphabet=st.sampled_from(["a", "b", " ", "\x00", "é", "\U0001f600", "1", "'"]),
            max_size=5),
)  # fmt: skip

QUERIES = [
    # one table: a typed predicate column (rating), a text column only a predicate reads
    # (tag), LLM fields, a projected non-text column
    "SELECT r.id, r.n, LLM('Ok? {review} {title}', r.review, r.title) AS ok FROM reviews r "
    "WHERE r.rating >= 2 AND r.tag <> 'x'",
    # a join on a text key, columns of both sides with one bare name (review__title)
    "SELECT r.id, m.title, LLM('Match? {review} {info}', r.review, m.info) AS ok "
    "FROM reviews r JOIN movies m ON r.title = m.title WHERE r.rating >= 2",
    # a semantic self-join (two aliases' text from one loaded table, pairs kept as rows)
    "SELECT a.id, b.id FROM reviews a JOIN reviews b "
    "ON LLM('Same? {a.review} {b.review}', a.review, b.review) = 'yes' AND a.id < b.id",
]


def tables(draw, n):
    texts = lambda k: draw(st.lists(TEXT, min_size=k, max_size=k))  # noqa: E731
    ratings = draw(st.lists(st.sampled_from(["1", "2", "3", None]), min_size=n, max_size=n))
    ratings[0] = "2"  # a column of nulls only is text: `rating >= 2` would not type-check
    reviews = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "n": pa.array([float(k) / 2 for k in range(n)]),
            "rating": pa.array(ratings, pa.string()),
            "tag": pa.array([f"tag:{t}" for t in texts(n)], pa.string()),  # never typed
            "review": pa.array(texts(n), pa.large_string()),
            "title": pa.array(
                draw(st.lists(st.sampled_from(["t1", "t2", "t3"]), min_size=n, max_size=n)),
                pa.string(),
            ),  # fmt: skip
        }
    )
    movies = pa.table({"title": ["t1", "t2", "t2"], "info": pa.array(texts(3), pa.string())})
    return {"reviews": reviews, "movies": movies}


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(QUERIES), st.booleans())
def test_text_taken_by_row_number_reads_as_duckdb_carrying_it(data, sql, pushdown):
    sources = tables(data.draw, data.draw(st.integers(1, 6)))
    query = compile_sql(sql, "q")
    taken = filtering.filtered_rows(query, sources, pushdown)
    original = filtering.passed_through_text
    filtering.passed_through_text = lambda *args: {}
    try:
        carried = filtering.filtered_rows(query, sources, pushdown)
    finally:
        filtering.passed_through_text = original
    assert original(*_args(query, sources)), "the query passes text through"
    pd.testing.assert_frame_equal(taken, carried)


def _args(query, sources):
    rows = {s.alias: f"_src_{i}" for i, s in enumerate(query.sources)}
    arrows = {s.table: sources[s.table] for s in query.sources}
    return query, arrows, filtering.predicate_only_columns(query), rows


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=40), st.integers(1, 3), st.integers(1, 30))
def test_text_objects_are_the_values_with_repeats_sharing_one_str(values, chunks, repeat):
    """`text_objects` gives each value as the str it is (None for null), whether the column
    is mostly distinct (one str per value) or repeats values (one str per distinct value)."""
    values = values * repeat
    k = max(1, len(values) // chunks)
    pieces = [values[i : i + k] for i in range(0, len(values), k)] or [[]]
    column = pa.chunked_array([pa.array(p, pa.string()) for p in pieces], pa.string())
    got = filtering.text_objects(column)
    assert got.dtype == object and got.tolist() == values
    assert all(type(v) is str for v in got if v is not None)
    if repeat > 2 and len(set(values)) < len(values) // 2:  # the dictionary path
        first = {}
        assert all(first.setdefault(v, v) is v for v in got if v is not None)
    assert filtering.text_objects(pa.array(values, pa.large_string())).tolist() == values
