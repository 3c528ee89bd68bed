"""The `llm-assets` console script, run as a user would (a real subprocess)."""

import json
import subprocess
import sys

import pandas as pd
import pytest

CLI = [sys.executable, "-m", "llm_assets.cli"]


def run(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def table_csv(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame(
        {
            "movie": ["m1", "m1", "m2", "m1"],
            "review": ["good", "bad", "ok", "good"],
            "n": [1, 2, 3, 4],
        }
    ).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("method", ["original", "column_stats", "ggr"])
def test_reorder_prints_one_json_object_and_writes_the_schedule(table_csv, tmp_path, method):
    out = tmp_path / "schedule.json"
    proc = run(
        "reorder", str(table_csv), "--method", method, "--fields", "movie,review", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {
        "rows",
        "fields",
        "method",
        "method_used",
        "char_hit_rate",
        "phc",
        "seconds",
    }
    assert result["rows"] == 4 and result["fields"] == ["movie", "review"]
    assert result["method"] == method and 0 <= result["char_hit_rate"] <= 1
    assert result["method_used"] in ("original", "column_stats", "ggr")
    schedule = json.loads(out.read_text())["schedule"]
    assert sorted(row for row, _ in schedule) == [0, 1, 2, 3]
    assert all(sorted(fields) == ["movie", "review"] for _, fields in schedule)


def test_parquet_input_and_all_columns_by_default(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1, 1, None], "b": [True, False, True]}).to_parquet(path)
    proc = run("reorder", str(path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fields"] == ["a", "b"]


def assert_one_line_error(proc, *facts):
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fact in facts:
        assert fact in lines[0]


def test_missing_file(tmp_path):
    assert_one_line_error(run("reorder", str(tmp_path / "nope.csv")), "not found", "nope.csv")


def test_unknown_field_lists_available_columns(table_csv):
    proc = run("reorder", str(table_csv), "--fields", "movie,plot")
    assert_one_line_error(proc, "unknown field(s) plot", "available columns: movie, review, n")


def test_empty_table(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("a,b\n")
    assert_one_line_error(run("reorder", str(path)), "no rows", "columns: a, b")


def test_unsupported_format(tmp_path):
    path = tmp_path / "t.xlsx"
    path.write_text("x")
    assert_one_line_error(run("reorder", str(path)), "unsupported input", ".csv")


@pytest.fixture
def query_sql(tmp_path):
    path = tmp_path / "fair.sql"
    path.write_text("SELECT LLM('Is {review} a fair take on {movie}?', t.review, t.movie) FROM t")
    return path


def test_plan_compares_methods_without_sending(table_csv, query_sql):
    proc = run("plan", str(query_sql), "--table", f"t={table_csv}")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    methods = report["methods"]
    assert list(methods) == ["original", "column_stats", "ggr"]
    for m in methods.values():
        assert m["n_requests"] == 3  # dedup on: ("good", "m1") twice
        assert 0 <= m["cached_tokens"] <= m["prompt_tokens"]
        assert m["cost_usd"]["self_hosted"] > 0
    assert methods["ggr"]["token_hit_rate"] >= methods["original"]["token_hit_rate"]
    no_dedup = json.loads(
        run(
            "plan", str(query_sql), "--table", f"t={table_csv}", "--no-dedup", "--methods", "ggr"
        ).stdout
    )
    assert no_dedup["methods"]["ggr"]["n_requests"] == 4
    no_cache = json.loads(
        run(
            "plan",
            str(query_sql),
            "--table",
            f"t={table_csv}",
            "--no-prefix-cache",
            "--methods",
            "ggr",
        ).stdout
    )
    assert no_cache["methods"]["ggr"]["cached_tokens"] == 0


def test_run_and_plan_errors_are_one_line(table_csv, tmp_path, query_sql):
    bad_column = tmp_path / "bad.sql"
    bad_column.write_text("SELECT LLM('Rate {plot}', t.plot) FROM t")
    proc = run("plan", str(bad_column), "--table", f"t={table_csv}")
    assert_one_line_error(proc, "unknown column t.plot", "movie")
    malformed = tmp_path / "malformed.sql"
    malformed.write_text("SELECT LLM('Rate {review', t.review) FROM t")
    assert_one_line_error(run("plan", str(malformed), "--table", f"t={table_csv}"), "template")
    proc = run("plan", str(query_sql), "--table", f"t={table_csv}", "--gpu", "Z80")
    assert_one_line_error(proc, "Z80", "L4")
    proc = run("run", str(query_sql), "--table", f"x={table_csv}")
    assert_one_line_error(proc, "--table", "'t'")
    proc = run("run", str(query_sql), "--table", f"t={tmp_path / 'nope.tsv'}")
    assert_one_line_error(proc, "nope.tsv")


def test_plan_orders_several_llm_filters_cheapest_first(tmp_path):
    path = tmp_path / "movies.csv"
    rows = [(f"m{i % 7}", f"review number {i} " + "long text " * (i % 5)) for i in range(40)]
    pd.DataFrame(rows, columns=["movie", "review"]).to_csv(path, index=False)
    sql = tmp_path / "two.sql"
    sql.write_text(
        "SELECT t.movie FROM t WHERE "
        "LLM('Long analysis: is this review of {movie} written by a professional critic who "
        "has seen many films, judging by style and vocabulary? {review}', t.review, t.movie) "
        "= 'Yes' AND LLM('Kids? {movie}', t.movie) = 'Yes'"
    )
    proc = run("plan", str(sql), "--table", f"t={path}", "--methods", "ggr")
    assert proc.returncode == 0, proc.stderr
    order = json.loads(proc.stdout)["llm_filter_order"]
    assert order["written_order"] == ["llm_1", "llm_2"]
    assert set(order["chosen_order"]) == {"llm_1", "llm_2"}
    assert order["expected_tokens_per_row_chosen"] <= order["expected_tokens_per_row_written"]
    assert order["sample_requests"] > 0


def test_run_over_a_fleet_from_the_comma_separated_base_url(tmp_path, query_sql):
    """`LLM_ASSETS_OPENAI_BASE_URL=url1,url2` (as the assets read it): the CLI spreads the run
    over both servers, prefix groups kept whole (routing affinity, the default)."""
    import os

    from benchmarks.lib.prom import scrape
    from tests.resources.test_openai_fleet import MODEL, fleet

    table = tmp_path / "t.csv"
    movies = [f"movie {m} " + "plot " * 40 for m in range(5)]
    pd.DataFrame(
        {"movie": [m for m in movies for _ in range(4)], "review": [f"r{k}" for k in range(20)]}
    ).to_csv(table, index=False)
    with fleet(2) as servers:
        env = {
            **os.environ,
            "LLM_ASSETS_HOME": str(tmp_path / "home"),
            "LLM_ASSETS_OPENAI_BASE_URL": ",".join(s.base_url for s in servers),
            "LLM_ASSETS_OPENAI_MODEL": MODEL,
        }
        proc = subprocess.run(
            [*CLI, "run", str(query_sql), "--table", f"t={table}", "--engine", "openai",
             "--out", str(tmp_path / "out.parquet")],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        served = [scrape(f"{s.url}/metrics")["llm_assets_sim:requests_total"] for s in servers]
    assert sorted(served) == [8, 12], served  # both replicas, whole groups of 4 (not 10/10)
    assert len(pd.read_parquet(tmp_path / "out.parquet")) == 20
