"""The LLM-SQL front end: what compiles to what, and what is rejected with which message."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llm_assets.sql.compiler as sql_module
import llm_assets.sql.outputs as sql_outputs_module
from llm_assets.output_spec import OutputSpec
from llm_assets.query.parts import (
    Aggregate,
    AggregateItem,
    Join,
    LLMFilter,
    Predicate,
    Retrieval,
    Source,
)
from llm_assets.sql.compiler import SQLError, compile_sql
from llm_assets.sql.outputs import (
    DEFAULT_NUMBER_RANGE,
    MAX_TOKENS_CHOICE,
    MAX_TOKENS_CHOICE_SHORT,
    MAX_TOKENS_NUMBER,
    MAX_TOKENS_TEXT,
)

JOIN = "FROM reviews r JOIN movies m ON r.link = m.link"
KIDS = "LLM('Kids? {info} {content}', m.info, r.content)"


def test_doctests() -> None:
    assert doctest.testmod(sql_module).failed == 0
    assert doctest.testmod(sql_outputs_module).failed == 0


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
    assert q.aggregate == Aggregate.of(("m.title",), "AVG", q.llm_calls[0].name, "s")
    q = compile_sql(f"SELECT SUM(LLM('Score {{content}}', r.content)) {JOIN}")
    assert q.llm_calls[0].output == OutputSpec.number(*DEFAULT_NUMBER_RANGE)
    assert q.aggregate.group_by == () and q.aggregate.aliases == ("sum_llm_1",)
    assert q.projection == ("sum_llm_1",)
    q = compile_sql(f"SELECT COUNT(LLM('Topic {{content}}', r.content)) AS n {JOIN}")
    assert q.llm_calls[0].output == OutputSpec.text()
    assert q.aggregate.items == (AggregateItem("COUNT", "llm_1", "n"),)


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
    (
        "WITH c AS (SELECT 1) SELECT c.x FROM c",
        ["unsupported clause WITH", "write one SELECT over the tables"],
    ),
    ("SELECT a.x FROM t a LIMIT 10%", ["unsupported LIMIT 10 PERCENT", "whole number"]),
    ("SELECT DISTINCT ON (a.x) a.x FROM t a", ["unsupported DISTINCT ON", "SELECT DISTINCT"]),
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
        # a semantic join's LLM condition must compare the two sides (issue 25)
        ["the LLM condition joining 'b' must read a column of 'b' and one of ['a']"],
    ),
    ("SELECT a.x FROM t a JOIN u b ON a.k > b.k", ["unsupported in JOIN ON: a.k > b.k"]),
    ("SELECT a.x FROM t a LEFT JOIN u b ON a.k = b.k", ["unsupported in JOIN", "LEFT JOIN u AS b"]),
    ("SELECT a.x FROM t a, u b", ["unsupported in JOIN", "only INNER JOIN"]),
    (
        "SELECT UPPER(LLM('Name {y}', a.y)) FROM t a",
        ["unsupported in SELECT: UPPER(LLM(...))", "AVG/SUM/COUNT/MIN/MAX"],
    ),
    ("SELECT * EXCLUDE (x) FROM t a", ["unsupported in SELECT: * EXCLUDE (x)"]),
    ("SELECT a.x + 1 FROM t a", ["unsupported in SELECT: a.x + 1", "select columns"]),
    ("SELECT AVG(a.x) FROM t a", ["unsupported in SELECT: AVG(a.x)"]),
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


# ---- explicit output specs ------------------------------------------------------------------

REVIEW = "LLM('Read {content}', r.content"


@pytest.mark.parametrize(
    ("sql", "output", "max_tokens"),
    [
        (f"SELECT {REVIEW}, output => 'choice(pos,neg)') FROM t r", ("choice", ("pos", "neg")), 2),
        (f"SELECT {REVIEW}, output => 'choice(Positive, Negative)') FROM t r", None, 3),
        (f"SELECT {REVIEW}, output => 'json') FROM t r", ("json",), MAX_TOKENS_TEXT),
        (f"SELECT {REVIEW}, output => 'regex(^[A-Z]{{3}}$)') FROM t r", ("regex",), 16),
        (f"SELECT {REVIEW}, output => 'TEXT', max_tokens => 40) FROM t r", ("text",), 40),
        (f"SELECT AVG({REVIEW}, output => 'number(1, 5)')) FROM t r", ("number", 1, 5), 3),
        (f"SELECT COUNT({REVIEW}, output => 'choice(a,b)')) FROM t r", ("choice",), 2),
        (
            f"SELECT r.id FROM t r WHERE {REVIEW}, output => 'choice(pos,neg,mixed)') = 'mixed'",
            ("choice", ("pos", "neg", "mixed")),
            3,
        ),
        (f"SELECT r.id FROM t r WHERE {REVIEW}, max_tokens => 1) = 'Yes'", ("choice",), 1),
    ],
)
def test_explicit_output_and_max_tokens(sql, output, max_tokens) -> None:
    (call,) = compile_sql(sql).llm_calls
    if output is not None:
        kind, *rest = output
        assert call.output.kind == kind
        if kind == "choice" and rest:
            assert call.output.values == rest[0]
        if kind == "number":
            assert (call.output.lo, call.output.hi) == tuple(rest)
    assert call.max_tokens == max_tokens


def test_implied_specs_are_unchanged_without_options() -> None:
    """`LLM(...) = 'Yes'` implies a choice, AVG(LLM(...)) a number: the same specs as before
    the explicit form existed."""
    q = compile_sql(f"SELECT AVG({REVIEW})) FROM t r WHERE {REVIEW}) = 'Yes'")
    assert [(c.output, c.max_tokens) for c in q.llm_calls] == [
        (OutputSpec.choice(["Yes", "No"]), MAX_TOKENS_CHOICE_SHORT),
        (OutputSpec.number(*DEFAULT_NUMBER_RANGE), MAX_TOKENS_NUMBER),
    ]


@pytest.mark.parametrize(
    ("sql", "fragments"),
    [
        (
            f"SELECT r.id FROM t r WHERE {REVIEW}, output => 'number(0,5)') = 'Yes'",
            ["explicit output => 'number(0,5)' conflicts with the choice(Yes,No)", "= 'Yes'"],
        ),
        (
            f"SELECT r.id FROM t r WHERE {REVIEW}, output => 'choice(pos,neg)') = 'Yes'",
            ["explicit output => 'choice(pos,neg)' conflicts with the choice(Yes,No)"],
        ),
        (
            f"SELECT AVG({REVIEW}, output => 'text')) FROM t r",
            ["explicit output => 'text' conflicts with the number(0,10) implied by AVG(LLM(...))"],
        ),
        (
            f"SELECT MAX({REVIEW}, output => 'choice(1,2)')) FROM t r",
            ["conflicts with the number(0,10) implied by MAX(LLM(...))"],
        ),
        (f"SELECT {REVIEW}, output => 'yaml') FROM t r", ["unknown output 'yaml'", "choice(a,b"]),
        (f"SELECT {REVIEW}, output => 'number(5,1)') FROM t r", ["lo <= hi"]),
        (f"SELECT {REVIEW}, output => 'number(1)') FROM t r", ["two bounds"]),
        (f"SELECT {REVIEW}, output => 'choice(a,,b)') FROM t r", ["non-empty and distinct"]),
        (f"SELECT {REVIEW}, output => 'regex([a-)') FROM t r", ["does not compile"]),
        (f"SELECT {REVIEW}, output => 'choice(a,b') FROM t r", ["missing ')'"]),
        (f"SELECT {REVIEW}, output => json) FROM t r", ["must be a string"]),
        (f"SELECT {REVIEW}, max_tokens => 0) FROM t r", ["max_tokens => 0 must be a positive"]),
        (f"SELECT {REVIEW}, max_tokens => '5') FROM t r", ["must be a positive integer"]),
        (f"SELECT {REVIEW}, max_tokens => 2.5) FROM t r", ["must be a positive integer"]),
        (f"SELECT {REVIEW}, temperature => 0) FROM t r", ["unknown LLM option temperature"]),
        (f"SELECT {REVIEW}, max_tokens => 2, max_tokens => 3) FROM t r", ["given twice"]),
        (f"SELECT {REVIEW}, max_tokens => 2, r.id) FROM t r", ["follows an option"]),
    ],
)
def test_bad_explicit_output(sql, fragments) -> None:
    with pytest.raises(SQLError) as err:
        compile_sql(sql)
    assert "\n" not in str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_json_and_regex_outputs_validate_answers() -> None:
    q = compile_sql(
        f"SELECT {REVIEW}, output => 'json') AS facts, "
        f"LLM('Code in {{content}}', r.content, output => 'regex(^[A-Z]{{3}}$)') AS code FROM t r"
    )
    facts, code = (c.output for c in q.llm_calls)
    assert facts.violation('{"stars": 4}') is None and facts.violation(" [1, 2] ") is None
    assert "is not valid JSON" in facts.violation("stars: 4")
    assert code.violation("JFK") is None
    assert code.violation("JFKX") == "answer 'JFKX' does not match /^[A-Z]{3}$/"
    assert code.violation("jfk") is not None


SPECS = st.one_of(
    st.just(OutputSpec.text()),
    st.just(OutputSpec.json()),
    st.lists(
        st.text(st.characters(blacklist_characters=",", codec="utf-8"), min_size=1).map(str.strip),
        min_size=1,
        max_size=4,
        unique=True,
    )
    .filter(lambda vs: all(vs))
    .map(OutputSpec.choice),
    st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)).map(
        lambda b: OutputSpec.number(min(b), max(b))
    ),
    st.sampled_from(["^[A-Z]{3}$", r"\d+(\.\d+)?", "(yes|no)", r"a,b\)"]).map(OutputSpec.regex),
)


@settings(max_examples=200, deadline=None)
@given(spec=SPECS)
def test_output_form_round_trips(spec: OutputSpec) -> None:
    assert OutputSpec.parse(spec.form) == spec
