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
    assert set(result) == {"rows", "fields", "method", "char_hit_rate", "phc", "seconds"}
    assert result["rows"] == 4 and result["fields"] == ["movie", "review"]
    assert result["method"] == method and 0 <= result["char_hit_rate"] <= 1
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


def test_simulate_reports_cost_and_caching(table_csv):
    template = "Is {review} a fair take on {movie}?"
    base = run("simulate", str(table_csv), "--template", template, "--method", "original")
    assert base.returncode == 0, base.stderr
    plain = json.loads(base.stdout)
    assert plain["n_requests"] == 4 and plain["engine"] == "sim"
    assert 0 <= plain["cached_tokens"] <= plain["prompt_tokens"]
    assert plain["cost_usd"]["cost_usd_self_hosted"] > 0
    deduped = json.loads(run("simulate", str(table_csv), "--template", template, "--dedup").stdout)
    assert deduped["n_requests"] == 3
    no_cache = run("simulate", str(table_csv), "--template", template, "--no-prefix-cache")
    assert json.loads(no_cache.stdout)["cached_tokens"] == 0


def test_simulate_template_errors(table_csv):
    proc = run("simulate", str(table_csv), "--template", "Rate {plot}")
    assert_one_line_error(proc, "unknown column 'plot'", "movie")
    proc = run("simulate", str(table_csv), "--template", "Rate {review")
    assert_one_line_error(proc, "malformed template")
    proc = run("simulate", str(table_csv), "--template", "Rate {review}", "--gpu", "Z80")
    assert_one_line_error(proc, "unknown gpu 'Z80'", "L4")
