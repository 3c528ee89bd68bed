"""The relational part of a query is DuckDB's (issue 35 item 1): SELECT aliases, `*`, DISTINCT,
ORDER BY (on columns, and on an LLM output: sorted after the calls), LIMIT and OFFSET run in
DuckDB over the rows the WHERE keeps, with each LLM call's answers substituted (NULL where
skipped). A LIMIT without an ORDER BY on an LLM output is pushed below the LLM calls of SELECT:
they are sent only the rows the LIMIT keeps. LLM filters in WHERE are sent every row the other
conjuncts keep, and the LIMIT applies to the rows they pass (the rule the README states).

Expected answers come from DuckDB running the same SQL over the table with the answers
substituted, or from the table itself; never from the code under test.
"""

from __future__ import annotations

import re

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.predict import plan_query
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import SQLError, compile_sql
from resources.sim.engine import SimulatedEngine
from tests.llm_assets.answering import AnsweringEngine

SUMMARY = "LLM('Summarise {review}', r.review)"
GOOD = "LLM('Is {review} good?', r.review, output => 'choice(yes,no)') = 'yes'"
TABLE = pd.DataFrame(
    {
        "id": ["m1", "m2", "m3", "m4", "m5", "m6", "m7"],
        "genre": ["drama", None, "comedy", "drama", "comedy", "drama", "x"],
        "year": ["2001", "1999", "2010", None, "2001", "1987", "2010"],
        "review": ["good plot", None, "dull", "good cast", "so good", "bad", "good end"],
    }
)


def value(prompt: str) -> str:
    return re.findall(r"^review: (.*)$", prompt, re.M)[-1]


def summary(review: str) -> str:
    """What the engine answers for the summary: ties across rows (`len % 3`)."""
    return f"{len(review) % 3}-{review[:2]}".strip()  # answers are stripped


class Engine(AnsweringEngine):
    """Answers the summary and the good/bad choice from the review; counts each call's
    requests."""

    def __init__(self) -> None:
        self.by_kind = {"text": 0, "choice": 0}
        super().__init__(self.reply)

    def reply(self, request) -> str:
        self.by_kind[request.output.kind] += 1
        review = value(request.prompt)
        if request.output.kind == "choice":
            return "yes" if "good" in review else "no"
        return summary(review)


def run(sql: str, table: pd.DataFrame = TABLE, **options):
    engine = Engine()
    out = run_query(compile_sql(sql, name="q"), {"reviews": table}, QueryOptions(**options), engine)
    return out, engine


def records(frame: pd.DataFrame) -> list[dict]:
    return [
        {k: (None if not isinstance(v, str) and pd.isna(v) else v) for k, v in r.items()}
        for r in frame.to_dict("records")
    ]


# ---- the reference: DuckDB over the table with the answers substituted -------------------------


def substituted(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with `_s` (the summary), `_f` (the choice) and `_row`, NULL for a null review."""
    out = table.copy()
    out["_s"] = [None if r is None else summary(r) for r in table["review"]]
    out["_f"] = [None if r is None else ("yes" if "good" in r else "no") for r in table["review"]]
    out["_row"] = range(len(table))
    return out


def reference(sql: str, table: pd.DataFrame) -> pd.DataFrame:
    """DuckDB's answer to `sql` with each LLM call replaced by its substituted column, every
    `*` without the substituted columns, ties broken by row order."""
    tree = sqlglot.parse_one(sql, read="duckdb")

    def swap(node):
        if isinstance(node, exp.Anonymous) and node.name.upper() == "LLM":
            kind = "_f" if "choice" in node.sql() else "_s"
            return exp.column(kind, table="r")
        if isinstance(node, exp.Star):
            hidden = [exp.column(c) for c in ("_s", "_f", "_row")]
            return exp.Star(except_=hidden)
        return node

    tree = tree.transform(swap)
    if not tree.args.get("distinct"):
        order = tree.args.get("order")
        keys = list(order.expressions) if order is not None else []
        tree = tree.order_by(*keys, exp.column("_row", table="r"), append=False)
    con = duckdb.connect()
    con.register("reviews", substituted(table))
    return con.execute(tree.sql(dialect="duckdb")).df()


# ---- examples --------------------------------------------------------------------------------


def test_a_plain_alias_names_the_answer_column():
    out, _ = run(f"SELECT r.id AS movie, r.year, {SUMMARY} AS s FROM reviews r")
    assert list(out.answer.columns) == ["movie", "year", "s"]
    assert out.answer["movie"].tolist() == TABLE["id"].tolist()


def test_select_star_returns_every_column_as_the_table_has_it():
    out, engine = run(f"SELECT * FROM reviews r WHERE {GOOD}")
    good = TABLE[TABLE["review"].fillna("").str.contains("good")]
    assert records(out.answer) == records(good)
    assert engine.by_kind == {"text": 0, "choice": len(TABLE["review"].dropna().unique())}
    out, _ = run(f"SELECT {SUMMARY} AS s, r.* FROM reviews r")
    assert list(out.answer.columns) == ["s", *TABLE.columns]


def test_select_star_over_a_join_names_columns_as_duckdb_does():
    movies = pd.DataFrame({"id": ["m1", "m3", "m5"], "title": ["A", "B", "C"]})
    sql = f"SELECT *, {SUMMARY} AS s FROM reviews r JOIN movies m ON r.id = m.id"
    out = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE, "movies": movies}, QueryOptions(), Engine()
    )
    con = duckdb.connect()
    con.register("reviews", substituted(TABLE))
    con.register("movies", movies)
    want = con.execute(
        "SELECT r.* EXCLUDE (_s, _f, _row), m.*, r._s AS s FROM reviews r "
        "JOIN movies m ON r.id = m.id ORDER BY r._row"
    ).df()
    assert list(out.answer.columns) == list(want.columns) == [
        "id", "genre", "year", "review", "id_1", "title", "s"
    ]  # fmt: skip
    assert records(out.answer) == records(want)


def test_limit_sends_only_the_rows_it_keeps_and_skips_the_rest_with_the_limit_as_reason():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r LIMIT 3"
    out, engine = run(sql)
    assert engine.by_kind["text"] == 2  # m1, m3: m2's review is empty (NULL, not sent)
    assert records(out.answer) == records(reference(sql, TABLE).rename(columns={}))
    assert out.answer["id"].tolist() == ["m1", "m2", "m3"] and out.answer["s"][1] is None
    result = out.result.sort_values("_row")
    assert result["status"].tolist() == ["answered", "skipped", "answered"] + ["skipped"] * 4
    assert result["reason"].tolist()[3:] == ["LIMIT 3: not sent"] * 4
    assert sum(out.accounting[k] for k in ("answered", "skipped", "failed")) == len(TABLE)
    whole, engine = run(sql, pushdown=False)  # no pushdown: every row is sent, same answer
    assert engine.by_kind["text"] == 6 and records(whole.answer) == records(out.answer)


def test_offset_skips_rows_before_any_is_sent():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r LIMIT 2 OFFSET 4"
    out, engine = run(sql)
    assert out.answer["id"].tolist() == ["m5", "m6"] and engine.by_kind["text"] == 2


def test_an_llm_filter_sees_every_row_and_the_limit_applies_to_the_rows_it_passes():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r WHERE {GOOD} LIMIT 2"
    out, engine = run(sql)
    assert engine.by_kind == {"choice": 6, "text": 2}
    assert out.answer["id"].tolist() == ["m1", "m4"]  # the first two good reviews
    assert records(out.answer) == records(reference(sql, TABLE))


@pytest.mark.parametrize("where", ["", f" WHERE {GOOD}"])
def test_plan_predicts_the_rows_a_limit_lets_through(where):
    table = pd.DataFrame(
        {
            "id": [str(i) for i in range(300)],
            "review": [f"review {i % 50} good" for i in range(300)],
        }
    )
    query = compile_sql(f"SELECT r.id, {SUMMARY} AS s FROM reviews r{where} LIMIT 7", name="q")
    plan = plan_query(query, {"reviews": table}, QueryOptions(), SimulatedEngine())
    ran = run_query(query, {"reviews": table}, QueryOptions(), SimulatedEngine())
    assert [s.rows for s in plan.stages] == [len(s.deduped) for s in ran.stages]
    assert plan.stages[-1].rows == 7 and ran.stages[-1].sent == 7


def test_order_by_an_llm_output_sorts_after_every_row_is_answered():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r ORDER BY s DESC NULLS FIRST LIMIT 4"
    out, engine = run(sql)
    assert engine.by_kind["text"] == 6  # the sort needs every answer
    assert records(out.answer) == records(reference(sql, TABLE))
    assert out.answer["s"].tolist()[0] is None


def test_order_by_a_column_with_a_limit_sends_only_the_top_rows():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r ORDER BY TRY_CAST(r.year AS INT) DESC"
    sql += " LIMIT 2"
    out, engine = run(sql)
    assert out.answer["id"].tolist() == ["m3", "m7"] and engine.by_kind["text"] == 2
    assert records(out.answer) == records(reference(sql, TABLE))


def test_distinct_returns_each_row_once_in_order_of_its_first_row():
    out, _ = run(f"SELECT DISTINCT r.genre AS g FROM reviews r WHERE {GOOD}")
    assert out.answer["g"].tolist() == ["drama", "comedy", "x"]
    sql = f"SELECT DISTINCT r.genre, {SUMMARY} AS s FROM reviews r ORDER BY s, r.genre NULLS FIRST"
    out, _ = run(sql)
    assert records(out.answer) == records(reference(sql, TABLE))


def test_an_order_by_that_cannot_run_on_the_answers_is_one_line_before_anything_is_sent():
    sql = f"SELECT r.id, {SUMMARY} AS s FROM reviews r ORDER BY s + 1"
    engine = Engine()
    with pytest.raises(ValueError) as err:
        run_query(compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), engine)
    message = str(err.value)
    assert "the SQL after the LLM cannot run on the answers" in message and "\n" not in message
    assert engine.sent == 0
    run(f"SELECT r.id, {SUMMARY} AS s FROM reviews r ORDER BY TRY_CAST(s AS INT) + 1")  # runs


# ---- the property: the same rows as DuckDB running the same SQL --------------------------------

REVIEW = st.one_of(st.none(), st.text(alphabet="abgod ", min_size=1, max_size=6))
ROWS = st.lists(
    st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["1999", "2001", None]), REVIEW),
    min_size=1,
    max_size=10,
)
ITEMS = ["r.id", "r.genre AS g", "r.year", f"{SUMMARY} AS s", "*"]
KEYS = ["r.year", "g", "s", "TRY_CAST(r.year AS INT)", "r.id"]


@st.composite
def queries(draw) -> tuple[str, bool]:
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=3, unique=True))
    distinct = draw(st.booleans()) and "*" not in items
    named = {"g": "r.genre AS g" in items, "s": f"{SUMMARY} AS s" in items}
    keys = [k for k in KEYS if named.get(k, True)]
    if distinct:  # keys over the whole projection: the order is determined
        keys = [i.split(" AS ")[-1] for i in items]
        chosen = draw(st.permutations(keys))
    else:
        chosen = draw(st.lists(st.sampled_from(keys), max_size=2, unique=True))
    order = [
        f"{k}{draw(st.sampled_from(['', ' DESC']))}{draw(st.sampled_from(['', ' NULLS FIRST']))}"
        for k in chosen
    ]
    where = draw(st.sampled_from(["", f" WHERE {GOOD}", " WHERE r.genre <> 'b'"]))
    limit = draw(st.sampled_from(["", " LIMIT 0", " LIMIT 2", " LIMIT 3 OFFSET 1", " OFFSET 2"]))
    sql = f"SELECT {'DISTINCT ' * distinct}{', '.join(items)} FROM reviews r{where}"
    sql += f" ORDER BY {', '.join(order)}" * bool(order) + limit
    return sql, distinct


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, query=queries())
def test_the_answer_is_duckdbs_over_the_substituted_answers(rows, query):
    sql, distinct = query
    table = pd.DataFrame(
        {
            "id": [f"m{i}" for i in range(len(rows))],
            "genre": [g for g, _, _ in rows],
            "year": [y for _, y, _ in rows],
            "review": [r for _, _, r in rows],
        }
    )
    out, engine = run(sql, table)
    want = reference(sql, table)
    assert list(out.answer.columns) == list(want.columns), sql
    assert records(out.answer) == records(want), sql
    query_model = compile_sql(sql)
    if query_model.limit_pushdown():  # the summary is sent at most the rows the LIMIT keeps
        assert engine.by_kind["text"] <= (query_model.shape.limit or len(table))


# ---- what stays refused: one line naming the clause and what to write -------------------------

REFUSED = [
    ("SELECT r.id FROM reviews r GROUP BY r.id HAVING COUNT(*) > 1", ["HAVING", "WHERE"]),
    ("SELECT DISTINCT ON (r.id) r.id FROM reviews r", ["DISTINCT ON", "SELECT DISTINCT"]),
    ("SELECT r.id FROM reviews r LIMIT 10%", ["LIMIT 10 PERCENT", "LIMIT 10"]),
    ("SELECT r.id FROM reviews r FETCH FIRST 3 ROWS ONLY", ["FETCH FIRST 3 ROWS", "LIMIT n"]),
    ("SELECT r.id FROM reviews r ORDER BY COUNT(*)", ["COUNT(*) in ORDER BY", "COUNT(*) AS n"]),
    (f"SELECT r.id FROM reviews r ORDER BY {SUMMARY}", ["in ORDER BY", "LLM(...) AS x"]),
    ("SELECT r.id FROM reviews r ORDER BY 2", ["ORDER BY position 2", "1 to 1"]),
    ("SELECT * EXCLUDE (id) FROM reviews r", ["* EXCLUDE (id)", "list the columns"]),
    ("SELECT UPPER(r.id) FROM reviews r", ["UPPER(r.id)", "select columns (col AS name)"]),
    ("SELECT DISTINCT r.id FROM reviews r ORDER BY r.year", ["DISTINCT", "order by a selected"]),
    (f"SELECT r.id AS s, {SUMMARY} AS s FROM reviews r", ["answer columns ['s'] are named twice"]),
    (
        f"SELECT r.genre, AVG({SUMMARY}) AS a FROM reviews r GROUP BY r.genre ORDER BY r.year",
        ["reads r.year, which is not grouped", "aggregate's alias"],
    ),
    ("SELECT * FROM reviews r USING SAMPLE 10", ["USING SAMPLE", "LIMIT n"]),
    ("SELECT r.id FROM reviews r QUALIFY 1", ["QUALIFY", "window functions"]),
]


@pytest.mark.parametrize(("sql", "fragments"), REFUSED, ids=[s for s, _ in REFUSED])
def test_what_stays_refused_is_one_line_with_the_alternative(sql, fragments):
    with pytest.raises(SQLError) as err:
        compile_sql(sql)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
