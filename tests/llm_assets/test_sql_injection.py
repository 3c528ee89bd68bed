"""Issue 11, defect 1: no SQL injection through identifiers of LLM-SQL.

Every payload either compiles to an `SQLError` naming the identifier, or runs harmlessly
through `compile_sql` + `stages.run_filtered` on a real DuckDB, in a temporary working
directory that must stay empty (the payloads write `out.csv` / `evil.db` relative to it).
Properties: every identifier the compiler accepts round-trips through the SQL the model
renders, and runs in DuckDB; every name with a forbidden character is rejected.
"""

from __future__ import annotations

import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from llm_assets.pipeline.filtering import run_filtered
from llm_assets.pipeline.results import run_result
from llm_assets.query.parts import Predicate, Source
from llm_assets.query.render import post_llm_predicates, pre_llm_sql
from llm_assets.sql.compiler import SQLError, compile_sql
from llm_assets.sql.syntax import FORBIDDEN_CHARS, column_problem, condition_values_sql

COPY = "COPY (SELECT * FROM read_text('/etc/hostname')) TO 'out.csv' (FORMAT csv)"
ATTACH = "ATTACH 'evil.db' AS evil; CREATE TABLE evil.t AS SELECT 42 AS x"
COPY_IN_LITERAL = COPY.replace("'", "''")
# without a '.' (the old alias check refused dots, not statements): these ran on the old code
COPY_NO_DOT = "COPY (SELECT * FROM read_text('/etc/hostname')) TO 'owned' (FORMAT csv)"
ATTACH_NO_DOT = "ATTACH 'evil' AS evil; USE evil; CREATE TABLE t AS SELECT 42 AS x"
ESCAPE = "SELECT * FROM (SELECT 1 AS x) r --"
LLM = "LLM('Sentiment of {review}', r.review)"
BARE = "LLM('Sentiment of {review}', review)"  # one source: the alias qualifies it

PAYLOADS = {
    "alias COPY (issue 11)": f'SELECT {BARE} FROM reviews AS "r); {COPY}; {ESCAPE}"',
    "alias ATTACH": f'SELECT {BARE} FROM reviews AS "r); {ATTACH}; {ESCAPE}"',
    "alias COPY, no dot": f'SELECT {BARE} FROM reviews AS "r); {COPY_NO_DOT}; {ESCAPE}"',
    "alias ATTACH, no dot": f'SELECT {BARE} FROM reviews AS "r); {ATTACH_NO_DOT}; {ESCAPE}"',
    "table name": f'SELECT {LLM} FROM "reviews AS r; {COPY}; --" r',
    "schema part": f'SELECT {LLM} FROM "x; {ATTACH}; --".reviews r',
    "column quote": f'SELECT r."review"" FROM reviews r; {COPY}; --" FROM reviews r',
    "column semicolon": f'SELECT r."review; {ATTACH}" FROM reviews r',
    "column in predicate": f'SELECT {LLM} FROM reviews r WHERE r."x""); {COPY}; --" = 1',
    "column in join": (
        f'SELECT {LLM} FROM reviews r JOIN critics c ON r."critic; {COPY}" = c.critic'
    ),
    "call alias": f'SELECT {LLM} AS "a; {COPY}" FROM reviews r',
    "aggregate alias": (
        f"SELECT AVG(LLM('Stars {{review}}', r.review)) AS \"s; {ATTACH}\" FROM reviews r"
    ),
    "newline in column": "SELECT r.\"review\nCOPY t TO 'out.csv'\" FROM reviews r",
    # harmless: the payload is a string literal or a comment, never SQL
    "string literal": (
        f"SELECT {LLM} FROM reviews r WHERE r.review = '''); {COPY_IN_LITERAL}; --'"
    ),
    "comment": f"SELECT {LLM} FROM reviews r WHERE r.rating > 1 -- */ ); {COPY}\n AND 1 = 1",
    "template": f"SELECT LLM('{{review}} ''); {COPY_IN_LITERAL}; --', r.review) FROM reviews r",
}


def _tables() -> dict[str, pd.DataFrame]:
    reviews = pd.DataFrame(
        {"review": ["good", "bad", "fine"], "rating": [3, 1, 2], "critic": ["a", "b", "a"]}
    )
    return {"reviews": reviews, "critics": pd.DataFrame({"critic": ["a", "b"]})}


@pytest.mark.parametrize("sql", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_payload_is_rejected_or_harmless(sql: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        query = compile_sql(sql)
    except SQLError as exc:
        message = str(exc)
        assert "\n" not in message
        assert "is not accepted" in message or "cannot parse" in message, message
    else:
        try:
            for pushdown in (True, False):
                out = run_filtered(query, _tables(), pushdown)
                run_result(out, query, [], pushdown)
                assert len(out) == 3
        finally:
            assert list(tmp_path.iterdir()) == []  # checked even when the run raised
    assert list(tmp_path.iterdir()) == []


def test_rejection_names_the_identifier_and_the_rule() -> None:
    with pytest.raises(SQLError) as err:
        compile_sql(PAYLOADS["alias COPY (issue 11)"])
    assert str(err.value).startswith('source alias "r); COPY (SELECT * FROM read_text(')
    assert "[A-Za-z_][A-Za-z0-9_]*" in str(err.value)
    with pytest.raises(SQLError, match=r"column name .review; ATTACH .* is not accepted: "):
        compile_sql(PAYLOADS["column semicolon"])
    with pytest.raises(SQLError, match=r"table name .* is not accepted: a table name is "):
        compile_sql(PAYLOADS["table name"])


def test_model_rejects_payloads_built_by_hand() -> None:
    with pytest.raises(ValueError, match="source alias .* is not accepted"):
        Source(f"r); {COPY}; --", "reviews")
    with pytest.raises(ValueError, match="is not one SQL expression"):
        Predicate(f"r.rating > 1; {COPY}", ("r.rating",))
    with pytest.raises(ValueError, match="contains a subquery or table"):
        Predicate("r.rating IN (SELECT 1)", ("r.rating",))
    with pytest.raises(ValueError, match="is not valid DuckDB SQL at line 1, column 5"):
        condition_values_sql(f"TRUE); {COPY}; SELECT (1", "t")
    q = compile_sql(f"SELECT {LLM} FROM reviews r")
    with pytest.raises(ValueError, match="relation name part"):
        pre_llm_sql(q, True, tables={"reviews": f'x" AS r; {COPY}; --'})
    with pytest.raises(ValueError, match="source row column"):
        pre_llm_sql(q, True, source_row_columns={"r": f"x; {COPY}"})


# ---- properties ----------------------------------------------------------------------------

ALIASES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
TABLES = st.lists(ALIASES, min_size=1, max_size=3).map(".".join)
PRINTABLE = st.characters(
    codec="utf-8",
    categories=("L", "M", "N", "P", "S"),
    exclude_characters=FORBIDDEN_CHARS,
    include_characters=" ",
)
COLUMNS = st.text(PRINTABLE, min_size=1, max_size=40).filter(
    lambda name: column_problem(name) is None
)


def _q(name: str) -> str:
    """A quoted identifier as a user writes it in LLM-SQL."""
    return '"' + name.replace('"', '""') + '"'


def _two_columns() -> st.SearchStrategy[tuple[str, str]]:
    return st.tuples(COLUMNS, COLUMNS).filter(lambda p: p[0].lower() != p[1].lower())


@settings(max_examples=150, deadline=None)
@given(alias=ALIASES, table=TABLES, columns=_two_columns())
def test_accepted_identifiers_round_trip(alias: str, table: str, columns) -> None:
    shown, tested = columns
    tname = ".".join(_q(p) for p in table.split("."))
    sql = (
        f"SELECT {_q(alias)}.{_q(shown)} FROM {tname} AS {_q(alias)} "
        f"WHERE {_q(alias)}.{_q(tested)} = 'x'"
    )
    query = compile_sql(sql)
    assert query.sources == (Source(alias, table),)
    assert query.projection == (f"{alias}.{shown}",)
    trees = sqlglot.parse(pre_llm_sql(query, pushdown=True), read="duckdb")
    assert len(trees) == 1 and isinstance(trees[0], exp.Select)
    select = trees[0]
    (source,) = select.find_all(exp.Table)
    assert [p.name for p in source.parts] == table.split(".")
    assert source.alias == alias
    names = query.output_names()
    assert [(c.this.table, c.this.name, c.alias) for c in select.expressions] == [
        (alias, shown, names[f"{alias}.{shown}"]),
        (alias, tested, names[f"{alias}.{tested}"]),
    ]
    where = select.args["where"].this
    assert [(c.table, c.name) for c in where.find_all(exp.Column)] == [(alias, tested)]
    (post,) = post_llm_predicates(query, pushdown=False)
    tree = sqlglot.parse(post, read="duckdb")
    assert [c.name for c in tree[0].find_all(exp.Column)] == [names[f"{alias}.{tested}"]]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(alias=ALIASES, columns=_two_columns())
def test_accepted_identifiers_run_in_duckdb(alias: str, columns, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shown, tested = columns
    frame = pd.DataFrame({shown: ["a", "b", "c"], tested: ["x", "y", "x"]})
    query = compile_sql(
        f"SELECT {_q(alias)}.{_q(shown)} FROM t AS {_q(alias)} WHERE {_q(alias)}.{_q(tested)} = 'x'"
    )
    names = query.output_names()
    for pushdown in (True, False):
        out = run_filtered(query, {"t": frame}, pushdown)
        result = run_result(out, query, [], pushdown)
        kept = result.loc[result["passed"], names[f"{alias}.{shown}"]]
        assert sorted(kept) == ["a", "c"]
    assert list(tmp_path.iterdir()) == []


BAD_COLUMNS = st.builds(
    lambda a, bad, b: a + bad + b,
    st.text(max_size=5),
    st.sampled_from([*FORBIDDEN_CHARS, "\n", "\r", "\t", "\x00", "\x1b", "\u2028"]),
    st.text(max_size=5),
)


@settings(max_examples=100, deadline=None)
@given(bad=BAD_COLUMNS)
def test_names_with_forbidden_characters_are_rejected(bad: str) -> None:
    for sql in (
        f"SELECT r.{_q(bad)} FROM t r",
        f"SELECT {LLM} AS {_q(bad)} FROM t r",
        f"SELECT r.x FROM t AS {_q(bad)}",
    ):
        with pytest.raises(SQLError):
            compile_sql(sql)
