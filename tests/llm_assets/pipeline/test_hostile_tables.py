"""Hostile tables through the whole in-process pipeline (loader, SQL, plan, simulated engine,
result): every row of the file ends answered, skipped or failed with a reason, and the only
thing that escapes is a one-line error naming the input."""

import csv
import io

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.data.tables import load_table
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import SQLError, compile_sql
from resources.sim.engine import SimulatedEngine

SQL = (
    "SELECT t.k, LLM('Summarize {v} for {k}', t.v, t.k) AS s FROM t "
    "WHERE LLM('Is {v} relevant?', t.v) = 'Yes'"
)
CELL = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.sampled_from(["007", "TRUE", "NaN", "None", "null", '{"a": [1]}', "{k}", "\\n"]),
    st.text(min_size=2000, max_size=4000).map(lambda s: s * 3),  # huge cells
    st.integers().map(str),
)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    rows=st.lists(st.tuples(CELL, CELL, CELL), min_size=1, max_size=12),
    null_policy=st.sampled_from(["skip", "empty"]),
    context_policy=st.sampled_from(["fail", "truncate"]),
)
def test_every_row_is_accounted_for_or_one_line_names_the_input(
    tmp_path_factory, rows, null_policy, context_policy
):
    path = tmp_path_factory.mktemp("hostile") / "t.csv"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["k", "v", "extra col"])
    for row in rows:  # None -> an empty unquoted cell (a null); "" -> a quoted empty string
        writer.writerow(["" if c is None else c for c in row])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    options = QueryOptions(null_policy=null_policy, context_policy=context_policy)
    engine = SimulatedEngine(gpu="L4", model="opt-13b")  # a 2,048-token window: huge cells
    try:
        table = load_table(path)
        run = run_query(compile_sql(SQL, name="t"), {"t": table}, options, engine)
    except ValueError as exc:
        message = str(exc)
        assert "\n" not in message and ("t.csv" in message or "LLM" in message), message
        return
    result = run.result
    assert len(result) == table.num_rows
    assert set(result["status"]) <= {"answered", "skipped", "failed"}
    needs_reason = result["status"] != "answered"
    assert result.loc[needs_reason, "reason"].notna().all()
    counts = run.accounting
    assert counts["answered"] + counts["skipped"] + counts["failed"] == counts["rows_in"]


def test_a_huge_cell_fails_its_row_before_sending_under_the_fail_policy(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("k,v,extra col\na,short,x\nb," + "word " * 5000 + ",y\n")
    engine = SimulatedEngine(gpu="L4", model="opt-13b")
    run = run_query(
        compile_sql("SELECT LLM('Say {v}', t.v) FROM t", name="t"),
        {"t": load_table(path)},
        QueryOptions(),
        engine,
    )
    assert run.result["status"].tolist() == ["answered", "failed"]
    assert "context window" in run.result["reason"].iloc[1]
    assert run.stats.n_requests == 1


@pytest.mark.parametrize("header", ["k,k,v", "k,,v"])
def test_duplicate_or_empty_column_names_are_one_line_errors(tmp_path, header):
    path = tmp_path / "t.csv"
    path.write_text(f"{header}\n1,2,3\n")
    with pytest.raises(ValueError) as err:
        load_table(path)
    assert "t.csv" in str(err.value) and "\n" not in str(err.value)


def test_columns_differing_only_in_case_are_refused_not_mixed():
    """DuckDB resolves `"r"."Review"` to `review`: a table that reaches a query with both
    (a DataFrame or an upstream asset, not only a file) is refused in one line when the query
    reads either; reading another column of it is unaffected, and non-ASCII case (`ä`/`Ä`),
    which DuckDB keeps apart, reads the right column."""
    table = pa.table(
        {"id": ["1", "2"], "review": ["lower a", "lower b"], "Review": ["UP A", "UP B"]}
    )
    engine = SimulatedEngine()
    for column in ("Review", "review"):
        sql = f"SELECT r.id, r.{column}, LLM('Say {{id}}', r.id) AS s FROM t r"
        with pytest.raises(SQLError) as err:
            run_query(compile_sql(sql, name="t"), {"t": table}, QueryOptions(), engine)
        message = str(err.value)
        assert "\n" not in message and "'Review'" in message and "'review'" in message, message
    sql = "SELECT r.id, LLM('Say {id}', r.id) AS s FROM t r"
    run = run_query(compile_sql(sql, name="t"), {"t": table}, QueryOptions(), engine)
    assert run.answer["id"].tolist() == ["1", "2"]
    umlauts = pa.table({"ä": ["lower"], "Ä": ["UPPER"]})
    sql = 'SELECT r."Ä", LLM(\'Say {Ä}\', r."Ä") AS s FROM t r'
    run = run_query(compile_sql(sql, name="t"), {"t": umlauts}, QueryOptions(), engine)
    assert run.answer["Ä"].tolist() == ["UPPER"]
