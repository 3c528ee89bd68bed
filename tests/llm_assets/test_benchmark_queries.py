"""The benchmark queries: each compiles to the expected model and runs on tiny DuckDB tables."""

from __future__ import annotations

import doctest
import re

import duckdb
import pytest

import llm_assets.benchmark_queries as queries_module
from llm_assets.benchmark_queries import DATASETS, QUERIES, TABLES, compile_query, pairs
from llm_assets.output_spec import OutputSpec
from llm_assets.query.parts import Aggregate, Join, LLMFilter, Retrieval, Source
from llm_assets.sql.outputs import MAX_TOKENS_TEXT
from tests.conftest import shared_file
from tests.llm_assets.test_query import run_fake

YES_NO = OutputSpec.choice(["Yes", "No"])
TEXT = OutputSpec.text()
SCORE = OutputSpec.number(0, 5)
MOVIES = (Source("r", "reviews"), Source("m", "movies"))
MOVIES_JOIN = (Join("r", "rotten_tomatoes_link", "m", "rotten_tomatoes_link"),)
PRODUCTS = (Source("r", "reviews"), Source("p", "metadata"))
PRODUCTS_JOIN = (Join("r", "asin", "p", "asin"),)
M_FIELDS = ("m.movie_info", "r.review_content")
P_FIELDS = ("r.reviewText", "p.description")
KIDS = LLMFilter("llm_1", "=", "Yes")

# (query, dataset) -> sources, joins, predicate SQL, calls (name, fields, output, max_tokens),
# filters, projection, aggregate
EXPECTED = {
    ("q1", "movies"): (
        MOVIES,
        MOVIES_JOIN,
        [],
        [("llm_1", M_FIELDS, TEXT, MAX_TOKENS_TEXT)],
        (),
        ("llm_1",),
        None,
    ),
    ("q1", "products"): (
        PRODUCTS,
        PRODUCTS_JOIN,
        [],
        [("llm_1", P_FIELDS, TEXT, MAX_TOKENS_TEXT)],
        (),
        ("llm_1",),
        None,
    ),
    ("q2", "movies"): (
        (Source("m", "movies"), Source("r", "reviews")),
        MOVIES_JOIN,
        ['"r"."review_type" = \'Fresh\''],
        [("llm_1", M_FIELDS, YES_NO, 2)],
        (KIDS,),
        ("m.movie_title",),
        None,
    ),
    ("q2", "products"): (
        PRODUCTS,
        PRODUCTS_JOIN,
        ['"r"."verified" = TRUE'],
        [("llm_1", ("p.description", "r.reviewText"), YES_NO, 2)],
        (KIDS,),
        ("r.asin",),
        None,
    ),
    ("q3", "movies"): (
        MOVIES,
        MOVIES_JOIN,
        ['"r"."review_type" = \'Fresh\''],
        [("llm_1", M_FIELDS, YES_NO, 2), ("llm_2", M_FIELDS, TEXT, MAX_TOKENS_TEXT)],
        (KIDS,),
        ("llm_2",),
        None,
    ),
    ("q3", "products"): (
        PRODUCTS,
        PRODUCTS_JOIN,
        ['"r"."verified" = TRUE'],
        [
            ("llm_1", ("p.description", "r.reviewText"), YES_NO, 2),
            ("llm_2", P_FIELDS, TEXT, MAX_TOKENS_TEXT),
        ],
        (KIDS,),
        ("llm_2",),
        None,
    ),
    ("q4", "movies"): (
        MOVIES,
        MOVIES_JOIN,
        [],
        [("llm_1", ("r.review_content", "m.movie_info"), SCORE, 3)],
        (),
        ("m.movie_title", "avg_score"),
        Aggregate.of(("m.movie_title",), "AVG", "llm_1", "avg_score"),
    ),
    ("q4", "products"): (
        PRODUCTS,
        PRODUCTS_JOIN,
        [],
        [("llm_1", P_FIELDS, SCORE, 3)],
        (),
        ("r.asin", "avg_score"),
        Aggregate.of(("r.asin",), "AVG", "llm_1", "avg_score"),
    ),
    ("q5", "squad"): (
        (Source("s", "squad"),),
        (),
        ['NOT "s"."is_impossible"'],
        [("llm_1", ("context", "s.question"), TEXT, MAX_TOKENS_TEXT)],
        (),
        ("llm_1",),
        None,
    ),
}


def test_doctests() -> None:
    assert doctest.testmod(queries_module).failed == 0


def test_registry_covers_the_benchmark() -> None:
    assert pairs() == list(EXPECTED)
    assert {d for _, d in pairs()} == set(DATASETS)


@pytest.mark.parametrize(("query", "dataset"), list(EXPECTED))
def test_compiles_to_expected_model(query: str, dataset: str) -> None:
    sources, joins, predicates, calls, filters, projection, aggregate = EXPECTED[query, dataset]
    q = compile_query(query, dataset)
    assert q.name == query
    assert q.sources == sources
    assert q.joins == joins
    assert [p.sql for p in q.predicates] == predicates
    assert [(c.name, c.fields, c.output, c.max_tokens) for c in q.llm_calls] == calls
    assert q.llm_filters == filters
    assert q.projection == projection
    assert q.aggregate == aggregate
    expected_retrievals = (
        (Retrieval("context", "s.question", 3, "s.context"),) if query == "q5" else ()
    )
    assert q.retrievals == expected_retrievals
    # every column read is a column of the dataset's tables
    tables = {s.alias: TABLES[dataset][s.table] for s in q.sources}
    for column in q.columns_needed():
        alias, name = column.split(".")
        assert name in tables[alias], column


def test_q3_is_q2_filter_then_q1_projection() -> None:
    for dataset in ("movies", "products"):
        q1, q2, q3 = (compile_query(q, dataset) for q in ("q1", "q2", "q3"))
        assert q3.llm_calls[0].template == q2.llm_calls[0].template
        assert q3.llm_calls[1].template == q1.llm_calls[0].template
        assert q3.predicates == q2.predicates


def _design_sql() -> dict[str, str]:
    text = shared_file("DESIGN.md").read_text()
    section = text[text.index("## 7.") :]
    start = section.index("```sql") + len("```sql")
    block = section[start : section.index("```", start)]
    statements = {}
    for chunk in block.split(";"):
        lines = [ln for ln in chunk.strip().splitlines() if not ln.startswith("--")]
        comments = re.findall(r"-- (Q\d)", chunk)
        if lines and comments:
            statements[comments[-1].lower()] = " ".join(" ".join(lines).split())
    return statements


def test_movies_and_squad_sql_is_design_section_7_verbatim() -> None:
    design = _design_sql()
    assert sorted(design) == ["q1", "q2", "q4", "q5"]
    for query, sql in design.items():
        dataset = "squad" if query == "q5" else "movies"
        assert " ".join(QUERIES[query][dataset].rstrip(";").split()) == sql


def test_compile_query_errors_list_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown query 'q9'; expected one of \['q1', .*'q5'\]"):
        compile_query("q9", "movies")
    with pytest.raises(ValueError, match=r"'q5' has no variant for dataset 'movies'.*\['squad'\]"):
        compile_query("q5", "movies")


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute(
        "CREATE TABLE movies AS SELECT * FROM (VALUES "
        "('m1', 'Alpha', 'a heist'), ('m2', 'Beta', 'a romance'), ('m3', 'Gamma', 'a war')) "
        "t(rotten_tomatoes_link, movie_title, movie_info)"
    )
    c.execute(
        "CREATE TABLE reviews AS SELECT * FROM (VALUES "
        + ", ".join(
            f"('m{i % 4 + 1}', 'review {i}', '{'Fresh' if i % 3 else 'Rotten'}')" for i in range(24)
        )
        + ") t(rotten_tomatoes_link, review_content, review_type)"
    )
    c.execute("CREATE SCHEMA products")
    c.execute(
        "CREATE TABLE products.metadata AS SELECT * FROM (VALUES "
        "('a1', 'lullabies'), ('a2', 'metal'), ('a3', 'jazz')) t(asin, description)"
    )
    c.execute(
        "CREATE TABLE products.reviews AS SELECT * FROM (VALUES "
        + ", ".join(
            f"('a{i % 3 + 1}', 'text {i % 7}', {str(i % 2 == 0).upper()}, {i % 5 + 1}.0)"
            for i in range(24)
        )
        + ') t(asin, "reviewText", verified, overall)'
    )
    c.execute(
        "CREATE TABLE squad AS SELECT * FROM (VALUES "
        + ", ".join(
            f"({i}, 'T', 'passage {i % 4}', 'question {i}?', 'a', {str(i % 5 == 0).upper()})"
            for i in range(20)
        )
        + ") t(id, title, context, question, answers, is_impossible)"
    )
    yield c
    c.close()


@pytest.mark.parametrize(("query", "dataset"), list(EXPECTED))
def test_pushdown_parity_in_duckdb(
    con: duckdb.DuckDBPyConnection, query: str, dataset: str
) -> None:
    q = compile_query(query, dataset)
    if dataset == "products":
        con.execute("SET search_path = 'products,main'")
    pushed = run_fake(con, q, pushdown=True)
    pushed_calls = run_fake.calls
    late = run_fake(con, q, pushdown=False)
    assert pushed and pushed == late
    if q.predicates:
        assert pushed_calls < run_fake.calls
    else:
        assert pushed_calls == run_fake.calls
