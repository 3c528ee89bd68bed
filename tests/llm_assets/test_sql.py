"""The LLM-SQL front end: what compiles to what, and what is rejected with which message."""

from __future__ import annotations

import doctest

import pytest

import llm_assets.sql as sql_module
from llm_assets.output_spec import OutputSpec
from llm_assets.query import Join, LLMFilter, Predicate, Retrieval, Source
from llm_assets.sql import (
    DEFAULT_NUMBER_RANGE,
    MAX_TOKENS_CHOICE,
    MAX_TOKENS_CHOICE_SHORT,
    MAX_TOKENS_NUMBER,
    MAX_TOKENS_TEXT,
    SQLError,
    compile_sql,
)

JOIN = "FROM reviews r JOIN movies m ON r.link = m.link"
KIDS = "LLM('Kids? {info} {content}', m.info, r.content)"


def test_doctests() -> None:
    assert doctest.testmod(sql_module).failed == 0


def test_projection_join_and_unqualified_single_source() -> None:
    q = compile_sql(f"SELECT m.title, {KIDS} AS verdict {JOIN}", name="p")
    assert q.name == "p"
    assert q.sources == (Source("r", "reviews"), Source("m", "movies"))
    assert q.joins == (Join("r", "link", "m", "link"),)
    (call,) = q.llm_calls
    assert (call.name, call.fields, call.output, call.max_tokens) == (
        "verdict",
        ("m.info", "r.content"),
        OutputSpec.text(),
        MAX_TOKENS_TEXT,
    )
    assert q.projection == ("m.title", "verdict")
    single = compile_sql(
        "SELECT title, LLM('Sum {content}', content) FROM reviews WHERE kind = 'F'"
    )
    assert single.sources == (Source("reviews", "reviews"),)
    assert single.projection == ("reviews.title", "llm_1")
    assert single.predicates == (Predicate("reviews.kind = 'F'", ("reviews.kind",)),)


def test_where_splits_into_predicates_and_ordered_filters() -> None:
    q = compile_sql(
        f"SELECT LLM('Recommend {{info}}', m.info) {JOIN} "
        f"WHERE (r.kind = 'Fresh' AND ({KIDS} = 'Yes' AND r.stars > 3)) "
        f"AND 'Negative' <> LLM('Sentiment of {{content}}', r.content) "
        f"AND length(r.content) BETWEEN 1 AND 9"
    )
    assert [p.sql for p in q.predicates] == [
        '"r"."kind" = \'Fresh\'',
        '"r"."stars" > 3',
        'LENGTH("r"."content") BETWEEN 1 AND 9',
    ]
    assert [c.name for c in q.llm_calls] == ["llm_1", "llm_2", "llm_3"]
    kids, sentiment, rec = q.llm_calls
    assert kids.output == OutputSpec.choice(["Yes", "No"])
    assert kids.max_tokens == MAX_TOKENS_CHOICE_SHORT
    assert sentiment.output == OutputSpec.choice(["Negative", "Positive"])
    assert sentiment.max_tokens == MAX_TOKENS_CHOICE
    assert rec.template == "Recommend {info}" and rec.output.kind == "text"
    assert q.llm_filters == (LLMFilter("llm_1", "=", "Yes"), LLMFilter("llm_2", "!=", "Negative"))
    assert q.projection == ("llm_3",)


def test_filter_choice_for_unknown_literal() -> None:
    q = compile_sql("SELECT t.a FROM t WHERE LLM('Genre of {b}', t.b) = 'Drama'")
    assert q.llm_calls[0].output == OutputSpec.choice(["Drama", "Other"])


def test_aggregates_get_number_specs() -> None:
    q = compile_sql(
        "SELECT m.title, AVG(LLM('Rate between 1 and 10 {content}', r.content)) AS s "
        f"{JOIN} GROUP BY m.title"
    )
    assert q.llm_calls[0].output == OutputSpec.number(1, 10)
    assert q.llm_calls[0].max_tokens == MAX_TOKENS_NUMBER
    assert (q.aggregate.group_by, q.aggregate.function, q.aggregate.alias) == (
        ("m.title",),
        "AVG",
        "s",
    )
    q = compile_sql(f"SELECT SUM(LLM('Score {{content}}', r.content)) {JOIN}")
    assert q.llm_calls[0].output == OutputSpec.number(*DEFAULT_NUMBER_RANGE)
    assert q.aggregate.group_by == () and q.aggregate.alias == "sum_llm_1"
    assert q.projection == ("sum_llm_1",)
    q = compile_sql(f"SELECT COUNT(LLM('Topic {{content}}', r.content)) AS n {JOIN}")
    assert q.llm_calls[0].output == OutputSpec.text() and q.aggregate.function == "COUNT"


def test_similarity_search() -> None:
    q = compile_sql(
        "SELECT LLM('{passage} answers {question}?', "
        "similarity_search(s.question, corpus => s.context), s.question) "
        "FROM squad s WHERE s.id > 2;"
    )
    assert q.retrievals == (Retrieval("passage", "s.question", 3, "s.context"),)
    # the retrieval is named by the placeholder it fills; the corpus defaults to that column
    q = compile_sql(
        "SELECT LLM('{context} answers {question}?', "
        "similarity_search(s.question, corpus => s.context), s.question) FROM squad s"
    )
    assert q.retrievals == (Retrieval("context", "s.question", 3, "s.context"),)
    q = compile_sql(
        "SELECT LLM('{ctx} / {question}', similarity_search(s.question, 5), s.question) "
        "FROM squad s"
    )
    assert q.retrievals == (Retrieval("ctx", "s.question", 5, "s.ctx"),)
    assert q.llm_calls[0].fields == ("ctx", "s.question")


REJECTED = [
    ("DROP TABLE reviews", ["unsupported statement DROP", "only SELECT"]),
    ("INSERT INTO t VALUES (1)", ["unsupported statement INSERT"]),
    ("SELECT a.x FROM t a UNION SELECT b.x FROM u b", ["unsupported statement UNION"]),
    (
        "SELECT a.x FROM t a; SELECT a.y FROM t a",
        ["expected exactly one SELECT statement, got 2", "SELECT a.x FROM t AS a"],
    ),
    ("SELECT a.x FROM (SELECT 1 AS x) a", ["unsupported subquery: (SELECT 1 AS x) AS a"]),
    (
        "SELECT a.x FROM t a WHERE a.x IN (SELECT u.y FROM u)",
        ["unsupported subquery", "SELECT u.y FROM u"],
    ),
    ("WITH c AS (SELECT 1) SELECT c.x FROM c", ["unsupported clause WITH"]),
    ("SELECT a.x FROM t a ORDER BY a.x", ["unsupported clause ORDER", "ORDER BY a.x"]),
    ("SELECT a.x FROM t a LIMIT 3", ["unsupported clause LIMIT"]),
    ("SELECT DISTINCT a.x FROM t a", ["unsupported clause DISTINCT"]),
    (
        "SELECT a.x FROM t a WHERE LLM('Is {y} ok?', a.y) = 'Yes' OR a.z > 1",
        ["unsupported in WHERE: LLM(...) = 'Yes' OR a.z > 1", "top-level AND conjunct"],
    ),
    (
        "SELECT a.x FROM t a WHERE NOT LLM('Is {y} ok?', a.y) = 'Yes'",
        ["unsupported in WHERE: NOT LLM(...) = 'Yes'"],
    ),
    (
        "SELECT a.x FROM t a WHERE UPPER(LLM('Is {y} ok?', a.y)) = 'YES'",
        ["unsupported in WHERE: UPPER(LLM(...)) = 'YES'"],
    ),
    ("SELECT a.x FROM t a WHERE LLM('Score {y}', a.y) > 3", ["unsupported in WHERE: LLM(...) > 3"]),
    (
        "SELECT a.x FROM t a WHERE LLM('Is {y} ok?', a.y) = 1",
        ["unsupported in WHERE: LLM(...) = 1"],
    ),
    (
        "SELECT a.x FROM t a JOIN u b ON a.k = b.k AND LLM('Same? {y}', a.y) = 'Yes'",
        ["unsupported in JOIN ON: LLM(...) = 'Yes'", "move them to WHERE"],
    ),
    ("SELECT a.x FROM t a JOIN u b ON a.k > b.k", ["unsupported in JOIN ON: a.k > b.k"]),
    ("SELECT a.x FROM t a LEFT JOIN u b ON a.k = b.k", ["unsupported in JOIN", "LEFT JOIN u AS b"]),
    ("SELECT a.x FROM t a, u b", ["unsupported in JOIN", "only INNER JOIN"]),
    (
        "SELECT UPPER(LLM('Name {y}', a.y)) FROM t a",
        ["unsupported in SELECT: UPPER(LLM(...))", "AVG/SUM/COUNT/MIN/MAX"],
    ),
    ("SELECT * FROM t a", ["unsupported in SELECT: *"]),
    ("SELECT a.x + 1 FROM t a", ["unsupported in SELECT: a.x + 1", "only columns"]),
    ("SELECT AVG(a.x) FROM t a", ["unsupported in SELECT: AVG(a.x)"]),
    ("SELECT a.x AS y FROM t a", ["unsupported in SELECT: a.x AS y", "aliases on plain columns"]),
    (
        "SELECT similarity_search(a.q, k => 3) FROM t a",
        ["unsupported in SELECT: SIMILARITY_SEARCH(a.q, k => 3)"],
    ),
    (
        "SELECT LLM('Judge {plot}', a.info) FROM t a",
        [
            "placeholder 'plot' that is not among its arguments ['info']",
            "in SELECT: LLM('Judge {plot}', a.info)",
        ],
    ),
    (
        "SELECT LLM(a.template, a.info) FROM t a",
        ["first argument of LLM must be a string literal template, got a.template"],
    ),
    (
        "SELECT a.x FROM t a WHERE LLM('Ok {y}' || '!', a.y) = 'Yes'",
        ["first argument of LLM must be a string literal template, got 'Ok {y}' || '!'"],
    ),
    ("SELECT LLM('Judge {y}') FROM t a", ["passes no column after its template"]),
    (
        "SELECT LLM('Judge {y}', LLM('Inner {y}', a.y)) FROM t a",
        ["unsupported LLM argument LLM('Inner {y}', a.y)", "in SELECT: LLM('Judge {y}', LLM(...))"],
    ),
    ("SELECT LLM('Judge {y}', a.y || 'x') FROM t a", ["unsupported LLM argument a.y || 'x'"]),
    (
        "SELECT x FROM t a JOIN u b ON a.k = b.k",
        ["unqualified column 'x' in SELECT", "qualify it with one of ['a', 'b']"],
    ),
    ("SELECT z.x FROM t a", ["unknown alias 'z' in SELECT: z.x; sources: ['a']"]),
    ("SELECT a.x FROM t a GROUP BY a.x", ["unsupported GROUP BY", "without AVG/SUM"]),
    (
        "SELECT AVG(LLM('S {y}', a.y)), MAX(LLM('S {y}', a.y)) FROM t a",
        ["only one aggregate per query"],
    ),
    (
        "SELECT a.x, AVG(LLM('S {y}', a.y)) FROM t a GROUP BY a.k",
        ["projection 'a.x' is neither grouped nor aggregated", "['a.k', 'avg_llm_1']"],
    ),
    (
        "SELECT AVG(LLM('S {y}', a.y)) FROM t a GROUP BY LLM('G {y}', a.y)",
        ["unsupported in GROUP BY: LLM('G {y}', a.y)", "only columns"],
    ),
    ("SELECT a.x FROM t a WHERE COUNT(a.x) > 1", ["unsupported in WHERE: COUNT(a.x) > 1"]),
    (
        "SELECT LLM('{y}', similarity_search(a.q, k => 3), a.y) FROM t a",
        ["SIMILARITY_SEARCH(a.q, k => 3) fills no template placeholder"],
    ),
    (
        "SELECT LLM('{c} {y}', similarity_search(a.q, n => 3), a.y) FROM t a",
        ["unsupported similarity_search argument n => 3"],
    ),
    (
        "SELECT LLM('{c} {y}', similarity_search(a.q, k => 0), a.y) FROM t a",
        ["k must be > 0, got 0"],
    ),
    ("SELECT a.x FROM t a WHERE", ["cannot parse SQL"]),
]


@pytest.mark.parametrize(("sql", "fragments"), REJECTED, ids=[s for s, _ in REJECTED])
def test_rejected(sql: str, fragments: list[str]) -> None:
    with pytest.raises(SQLError) as err:
        compile_sql(sql)
    assert isinstance(err.value, ValueError)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_rejection_is_not_string_matching() -> None:
    """Words such as OR, NOT, DROP or ';' inside a template or a string literal are fine."""
    q = compile_sql(
        "SELECT LLM('DROP TABLE; is {y} good OR NOT? (SELECT 1)', a.y) FROM t a "
        "WHERE a.note = 'x OR LLM(y); DELETE'"
    )
    assert q.llm_calls[0].template == "DROP TABLE; is {y} good OR NOT? (SELECT 1)"
    assert q.predicates[0].sql == '"a"."note" = \'x OR LLM(y); DELETE\''


SCHEMA = {"reviews": ["review_content", "review_type"]}


@pytest.mark.parametrize(
    ("where", "facts"),
    [
        ("foo(r.review_type) = 1", ["unknown function foo(...)", "built-in functions only"]),
        ("r.nope = 1", ["unknown column r.nope", "table 'reviews' has columns", "review_type"]),
    ],
)
def test_predicates_over_unknown_functions_or_columns_are_rejected(where, facts):
    sql = f"SELECT LLM('Rate {{review_content}}', r.review_content) FROM reviews r WHERE {where}"
    with pytest.raises(SQLError) as info:
        compile_sql(sql, tables=SCHEMA)
    for fact in facts:
        assert fact in str(info.value)


def test_known_functions_and_columns_pass_the_schema_check():
    sql = (
        "SELECT LLM('Rate {review_content}', r.review_content) FROM reviews r "
        "WHERE lower(r.review_type) = 'fresh'"
    )
    assert compile_sql(sql, tables=SCHEMA).predicates[0].columns == ("r.review_type",)
