"""The LLM query model: validation, output names, and the pre-LLM SQL run in a real DuckDB.

`run_fake` executes a query stage by stage the way the asset layer will (DuckDB for the
relational parts, a deterministic fake LLM in Python); other test modules reuse it.
"""

from __future__ import annotations

import doctest
import zlib

import duckdb
import pandas as pd
import pytest

import llm_assets.query.model as query_module
import llm_assets.query.parts as query_parts_module
from llm_assets.output_spec import OutputSpec
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import Aggregate, Join, LLMCall, LLMFilter, Predicate, Retrieval, Source
from llm_assets.query.render import corpus_sql, from_sql, post_llm_predicates, pre_llm_sql

YES_NO = OutputSpec.choice(["Yes", "No"])


def fake_answer(call: LLMCall, values: list[object]) -> str:
    """A deterministic answer of the call's shape, from the field values."""
    h = zlib.crc32(repr((call.template, values)).encode())
    spec = call.output
    if spec.kind == "choice":
        return spec.values[0] if h % 3 else spec.values[-1]  # the first answer 2/3 of the time
    if spec.kind == "number":
        return f"{spec.lo + h % int(spec.hi - spec.lo + 1):g}"
    return f"answer-{h % 997}"


def run_fake(con: duckdb.DuckDBPyConnection, q: LLMQuery, pushdown: bool) -> list[tuple]:
    """Run `q` with the fake LLM; returns the projection rows, sorted. Also counts calls in
    `run_fake.calls` (number of LLM requests made by the last run)."""
    cur = con.execute(pre_llm_sql(q, pushdown))
    columns = [d[0] for d in cur.description]
    assert columns == [q.output_names()[c] for c in q.columns_needed()]
    rows = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
    for r in q.retrievals:
        corpus = [v for (v,) in con.execute(corpus_sql(q, r.name)).fetchall()]
        for row in rows:
            row[r.name] = "\n".join(corpus[: r.k])
    n_calls = 0
    for call in q.llm_calls:
        cols = q.field_columns(call.name)
        for row in rows:
            row[call.name] = fake_answer(call, [row[c] for c in cols.values()])
        n_calls += len(rows)
        for f in q.filters_for(call.name):
            rows = [row for row in rows if f.keeps(row[call.name])]
    run_fake.calls = n_calls
    frame = pd.DataFrame(rows, columns=columns + list(q.stage_outputs()))
    con.register("staged", frame)
    where = " AND ".join(f"({p})" for p in post_llm_predicates(q, pushdown)) or "TRUE"
    agg = q.aggregate
    if agg is None:
        select = ", ".join(f'"{c}"' for c in q.projection_columns())
        sql = f"SELECT {select} FROM staged WHERE {where}"
    else:
        names = q.output_names()
        groups = [f'"{names[g]}"' for g in agg.group_by]
        values = [
            f'{i.function}(CAST("{i.call_name}" AS DOUBLE)) AS "{i.alias}"'
            if i.call_name
            else f'COUNT(*) AS "{i.alias}"'
            for i in agg.items
        ]
        group_by = f" GROUP BY {', '.join(groups)}" if groups else ""
        sql = f"SELECT {', '.join(groups + values)} FROM staged WHERE {where}{group_by}"
    result = con.execute(sql).fetchall()
    con.unregister("staged")
    return sorted(result, key=repr)


run_fake.calls = 0


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute("CREATE TABLE movies (link VARCHAR, title VARCHAR, info VARCHAR)")
    c.execute(
        "INSERT INTO movies VALUES ('m1', 'Alpha', 'a heist'), ('m2', 'Beta', 'a romance'), "
        "('m3', 'Gamma', 'a war film')"
    )
    c.execute("CREATE TABLE reviews (link VARCHAR, title VARCHAR, content VARCHAR, kind VARCHAR)")
    c.execute(
        "INSERT INTO reviews VALUES ('m1', 'r-a', 'fun', 'Fresh'), ('m1', 'r-b', 'dull', 'Rotten'),"
        " ('m2', 'r-c', 'sweet', 'Fresh'), ('m2', 'r-d', 'sweet', 'Fresh'),"
        " ('m3', 'r-e', 'loud', 'Rotten'), ('m4', 'r-f', 'orphan', 'Fresh')"
    )
    yield c
    c.close()


def two_table_query(**overrides) -> LLMQuery:
    args = dict(
        name="t",
        sources=(Source("r", "reviews"), Source("m", "movies")),
        joins=(Join("r", "link", "m", "link"),),
        predicates=(Predicate("r.kind = 'Fresh'", ("r.kind",)),),
        llm_calls=(
            LLMCall("llm_1", "Kids? {info} {content}", ("m.info", "r.content"), YES_NO, 2),
            LLMCall(
                "llm_2",
                "Title {title} by {content}",
                ("m.title", "r.content"),
                OutputSpec.text(),
                50,
            ),
        ),
        llm_filters=(LLMFilter("llm_1", "=", "Yes"),),
        projection=("r.title", "llm_2"),
    )
    args.update(overrides)
    return LLMQuery(**args)


def test_doctests() -> None:
    assert doctest.testmod(query_module).failed == 0
    assert doctest.testmod(query_parts_module).failed == 0


def test_columns_needed_and_ambiguous_output_names() -> None:
    q = two_table_query()
    assert q.columns_needed() == ("r.title", "m.info", "r.content", "m.title", "r.kind")
    names = q.output_names()
    # r.title and m.title share a bare name: both get alias__column; the rest stay bare
    assert names == {
        "r.title": "r__title",
        "m.info": "info",
        "r.content": "content",
        "m.title": "m__title",
        "r.kind": "kind",
    }
    assert q.field_columns("llm_2") == {"title": "m__title", "content": "content"}
    assert q.projection_columns() == ("r__title", "llm_2")
    assert q.stage_outputs() == ("llm_1", "llm_2")


def test_output_name_that_clashes_with_a_stage_output_is_qualified() -> None:
    q = LLMQuery(
        name="rag",
        sources=(Source("s", "squad"),),
        retrievals=(Retrieval("context", "s.question", 2, "s.context"),),
        llm_calls=(
            LLMCall(
                "llm_1",
                "{context} {question}",
                ("context", "s.question"),
                OutputSpec.text(),
                50,
            ),
        ),
        projection=("s.context", "llm_1"),
    )
    assert q.output_names() == {"s.context": "s__context", "s.question": "question"}
    assert q.field_columns("llm_1") == {"context": "context", "question": "question"}
    # the corpus column is not a per-row input
    assert "s.context" not in [r.query_column for r in q.retrievals]
    assert corpus_sql(q, "context", tables={"squad": "squad_v2"}) == (
        'SELECT DISTINCT "s"."context" AS "value" FROM "squad_v2" AS "s" '
        'WHERE NOT "s"."context" IS NULL ORDER BY "value"'
    )


def test_pre_llm_sql_text_and_table_binding() -> None:
    q = two_table_query()
    sql = pre_llm_sql(q, pushdown=True, tables={"reviews": "raw.reviews", "movies": "my movies"})
    assert sql.splitlines() == [
        "SELECT",
        '  "r"."title" AS "r__title",',
        '  "m"."info" AS "info",',
        '  "r"."content" AS "content",',
        '  "m"."title" AS "m__title",',
        '  "r"."kind" AS "kind"',
        'FROM "raw"."reviews" AS "r"',
        'JOIN "my movies" AS "m"',
        '  ON "r"."link" = "m"."link"',
        "WHERE",
        '  "r"."kind" = \'Fresh\'',
    ]
    assert "WHERE" not in pre_llm_sql(q, pushdown=False)
    assert post_llm_predicates(q, True) == ()
    assert post_llm_predicates(q, False) == ("\"kind\" = 'Fresh'",)


def test_pushdown_on_and_off_give_the_same_rows(con: duckdb.DuckDBPyConnection) -> None:
    q = two_table_query()
    pushed = run_fake(con, q, pushdown=True)
    pushed_calls = run_fake.calls
    late = run_fake(con, q, pushdown=False)
    assert pushed == late
    assert pushed  # some rows pass the fake LLM filter
    assert pushed_calls < run_fake.calls  # pushdown saves LLM calls
    # the join drops the orphan review m4; pushdown drops the two rotten ones
    assert len(con.execute(pre_llm_sql(q, True)).fetchall()) == 3
    assert len(con.execute(pre_llm_sql(q, False)).fetchall()) == 5


def test_pushdown_parity_with_aggregate(con: duckdb.DuckDBPyConnection) -> None:
    q = two_table_query(
        llm_calls=(
            LLMCall("llm_1", "Score {content}", ("r.content",), OutputSpec.number(0, 5), 3),
        ),
        llm_filters=(),
        aggregate=Aggregate.of(("m.title",), "AVG", "llm_1", "avg_score"),
        projection=("m.title", "avg_score"),
    )
    assert run_fake(con, q, True) == run_fake(con, q, False)
    assert [row[0] for row in run_fake(con, q, True)] == ["Alpha", "Beta"]


def test_three_sources_join_order() -> None:
    q = LLMQuery(
        name="three",
        sources=(Source("a", "ta"), Source("b", "tb"), Source("c", "tc")),
        joins=(Join("c", "id", "b", "cid"), Join("a", "id", "b", "aid"), Join("c", "x", "a", "x")),
        llm_calls=(LLMCall("llm_1", "{v}", ("c.v",), OutputSpec.text(), 5),),
        projection=("llm_1",),
    )
    assert from_sql(q).splitlines() == [
        'FROM "ta" AS "a"',
        'JOIN "tb" AS "b" ON "a"."id" = "b"."aid"',
        'JOIN "tc" AS "c" ON "c"."id" = "b"."cid" AND "c"."x" = "a"."x"',
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"joins": (Join("r", "link", "x", "link"),)}, "unknown alias 'x'; sources: ['r', 'm']"),
        ({"joins": ()}, "source 'm' is not joined to any of ['r']"),
        (
            {"projection": ("z.title", "llm_2")},
            "column 'z.title' names unknown alias 'z'; sources: ['r', 'm']",
        ),
        (
            {"llm_filters": (LLMFilter("llm_9", "=", "Yes"),)},
            "LLM filter on unknown call 'llm_9'; known calls: ['llm_1', 'llm_2']",
        ),
        ({"llm_filters": (LLMFilter("llm_2", "=", "Yes"),)}, "must answer a choice holding 'Yes'"),
        ({"llm_filters": (LLMFilter("llm_1", "=", "Maybe"),)}, "holding 'Maybe'"),
        (
            {"projection": ("r.title", "llm_7")},
            "projection 'llm_7' is not a qualified column, an LLM call or a retrieval; "
            "calls: ['llm_1', 'llm_2']",
        ),
        (
            {"aggregate": Aggregate.of(("m.title",), "AVG", "llm_1", "avg")},
            "projection 'r.title' is neither grouped nor aggregated; "
            "with GROUP BY the projection may hold ['m.title', 'avg']",
        ),
        (
            {"aggregate": Aggregate.of((), "AVG", "nope", "avg"), "projection": ("avg",)},
            "aggregate AVG(nope) names unknown call 'nope'; known calls: ['llm_1', 'llm_2']",
        ),
        (
            {"sources": (Source("r", "reviews"), Source("r", "movies"))},
            "source aliases ['r'] are used twice",
        ),
        ({"projection": ()}, "projects no column"),
    ],
)
def test_query_validation(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        two_table_query(**overrides)
    assert message in str(err.value)


def test_llm_call_validation() -> None:
    with pytest.raises(ValueError, match=r"'llm_1'.*unknown column 'plot'.*\['info', 'content'\]"):
        LLMCall("llm_1", "Judge {plot}", ("m.info", "r.content"), YES_NO, 2)
    # two fields sharing a column name are named alias.column (a self-join's placeholders)
    with pytest.raises(ValueError, match=r"unknown column 'title'.*\['m.title', 'r.title'\]"):
        LLMCall("llm_1", "{title}", ("m.title", "r.title"), YES_NO, 2)
    assert LLMCall("c", "{m.title} {r.title}", ("m.title", "r.title"), YES_NO, 2).placeholders
    with pytest.raises(ValueError, match=r"several fields named \['m.title'\]"):
        LLMCall("llm_1", "{m.title}", ("m.title", "m.title"), YES_NO, 2)
    with pytest.raises(ValueError, match="max_tokens must be > 0, got 0"):
        LLMCall("llm_1", "{info}", ("m.info",), YES_NO, 0)
    with pytest.raises(
        ValueError, match="column 'info' is not qualified; write it as alias.column"
    ):
        Retrieval("context", "info", 3, "s.context")
    with pytest.raises(ValueError, match="neither a qualified column nor a retrieval"):
        LLMQuery(
            name="x",
            sources=(Source("m", "movies"),),
            llm_calls=(LLMCall("llm_1", "{info}", ("info",), YES_NO, 2),),
            projection=("llm_1",),
        )


def test_predicate_and_filter_validation() -> None:
    with pytest.raises(ValueError, match=r"reads columns \['r.kind'\], but declares \['r.other'\]"):
        Predicate("r.kind = 'Fresh'", ("r.other",))
    with pytest.raises(ValueError, match="unqualified column 'kind'"):
        Predicate("kind = 'Fresh'", ())
    with pytest.raises(
        ValueError, match=r"unknown LLM filter op '<'; expected one of \('=', '!='\)"
    ):
        LLMFilter("llm_1", "<", "Yes")
    with pytest.raises(ValueError, match="unknown aggregate 'MEDIAN'"):
        Aggregate.of((), "MEDIAN", "llm_1", "x")  # type: ignore[arg-type]
    assert LLMFilter("c", "!=", "Yes").keeps(" No ") and not LLMFilter("c", "=", "Yes").keeps("No")
