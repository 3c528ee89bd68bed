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
    proc = run("plan", str(query_sql), "--table", f"t={table_csv}", "--json")
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
            "plan",
            str(query_sql),
            "--table",
            f"t={table_csv}",
            "--no-dedup",
            "--methods",
            "ggr",
            "--json",
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
            "--json",
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
    header_only = tmp_path / "header_only.csv"
    header_only.write_text("review,movie\n")
    proc = run("run", str(query_sql), "--table", f"t={header_only}")
    assert_one_line_error(proc, "table 't' has columns but no rows")


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
    proc = run("plan", str(sql), "--table", f"t={path}", "--methods", "ggr", "--json")
    assert proc.returncode == 0, proc.stderr
    order = json.loads(proc.stdout)["llm_filter_order"]
    assert order["written_order"] == ["llm_1", "llm_2"]
    assert set(order["chosen_order"]) == {"llm_1", "llm_2"}
    assert order["expected_tokens_per_row_chosen"] <= order["expected_tokens_per_row_written"]
    assert order["sample_requests"] > 0


def test_plan_prices_every_llm_stage_and_totals_them(tmp_path):
    """Issue 24 item 1: a filter then a projection. `plan` lists both stages; each method's
    `n_requests` and `prompt_tokens` are the totals over them; the later stage is priced, and
    as the reach sample covers these 60 rows, plan predicts exactly what `run` sends."""
    path = tmp_path / "t.csv"
    rows = [(f"m{i % 9}", f"review {i % 45} " + "text " * (i % 4)) for i in range(60)]
    pd.DataFrame(rows, columns=["movie", "review"]).to_csv(path, index=False)
    sql = tmp_path / "two.sql"
    sql.write_text(
        "SELECT LLM('Summarise {review} of {movie}', t.review, t.movie) FROM t "
        "WHERE LLM('Kids? {movie} {review}', t.movie, t.review) = 'Yes'"
    )
    proc = run("plan", str(sql), "--table", f"t={path}", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    sent = json.loads(run("run", str(sql), "--table", f"t={path}").stdout)
    for m in report["methods"].values():
        stages = m["stages"]
        assert [s["llm_call"] for s in stages] == report["llm_calls"]  # run order
        assert stages[0]["rows"] == 60 and 0 < stages[1]["rows"] < 60
        assert all(s["n_requests"] > 0 and s["prompt_tokens"] > 0 for s in stages)
        for key in ("n_requests", "prompt_tokens", "output_tokens"):
            assert m[key] == sum(s[key] for s in stages), key
        assert m["reach_sample"]["rows"] == 60
        assert all(s["priced_on"] is None for s in stages)  # every request simulated
    ggr = report["methods"]["ggr"]
    assert (ggr["n_requests"], ggr["prompt_tokens"]) == (sent["n_requests"], sent["prompt_tokens"])
    table = run("plan", str(sql), "--table", f"t={path}").stdout
    assert "stage 2: llm_2" in table and "not priced" not in table


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


# ---- plan: a table by default, JSON with --json (issue 21 item 9) ----------------------------


def test_plan_prints_a_table_by_default_with_the_json_figures(table_csv, query_sql):
    proc = run("plan", str(query_sql), "--table", f"t={table_csv}")
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(proc.stdout)
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("method "))
    for column in ("requests", "prompt tokens", "cached tokens", "hit rate", "engine s", "$"):
        assert column in header, header
    report = json.loads(run("plan", str(query_sql), "--table", f"t={table_csv}", "--json").stdout)
    start = lines.index(header)
    for i, (name, m) in enumerate(report["methods"].items(), start=1):
        cells = lines[start + i].split()
        assert cells[0] == name
        rows, requests, prompt, cached = (int(c.replace(",", "")) for c in cells[1:5])
        assert (rows, requests) == (m["stages"][0]["rows"], m["n_requests"])  # rows reaching
        assert (prompt, cached) == (m["prompt_tokens"], m["cached_tokens"])
        assert cells[5] == f"{m['token_hit_rate']:.1%}"
    assert "llm_1" in lines[0] and "nothing sent" in lines[0]
    # the first prompt, exactly as sent: the template as written, then the fields
    shown = lines.index("the first prompt ggr sends, exactly as the model receives it:")
    first = report["methods"]["ggr"]["first_prompt"]
    assert first.startswith("Is {review} a fair take on {movie}?\n")
    assert lines[shown + 1 : shown + 1 + len(first.splitlines())] == [
        "  | " + line for line in first.splitlines()
    ]


# ---- run: the response cache and --out (issue 21 items 3 and 4) ------------------------------


def sim_server(latency_ms: float = 0.0):
    """One in-thread sim server (OpenAI API); `served(server)` reads how many requests it got."""
    from resources.sim.engine import SimulatedEngine
    from resources.sim.server import ServerConfig, SimServer
    from resources.sim.server.faults import FaultConfig

    config = ServerConfig(
        served_model_name="llama-2-7b",
        batch_window_s=0.001,
        faults=FaultConfig(latency_ms=latency_ms),
    )
    return SimServer(SimulatedEngine(gpu="L4", model="llama-2-7b"), config=config)


def served(server) -> int:
    from benchmarks.lib.prom import scrape

    return int(scrape(f"{server.url}/metrics").get("llm_assets_sim:requests_total", 0))


def openai_env(tmp_path, server) -> dict:
    import os

    return {
        **os.environ,
        "LLM_ASSETS_HOME": str(tmp_path / "home"),
        "LLM_ASSETS_OPENAI_BASE_URL": server.base_url,
        "LLM_ASSETS_OPENAI_MODEL": "llama-2-7b",
    }


def run_env(env, *args, timeout=180):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def distinct_rows(path, n: int) -> None:
    movies = [f"movie {m} " + "plot " * 30 for m in range(10)]
    pd.DataFrame(
        {"movie": [movies[i % 10] for i in range(n)], "review": [f"review {i}" for i in range(n)]}
    ).to_csv(path, index=False)


def without_progress(proc):
    """`proc` without the progress bars `run` draws on stderr (an error after sending comes
    after them, still one line)."""
    import re

    bars = re.compile(r"^\S+:\w+: +\d+%\|")
    kept = [line for line in proc.stderr.splitlines() if line.strip() and not bars.match(line)]
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, "\n".join(kept))


def test_run_reuses_the_response_cache_so_a_rerun_sends_nothing(tmp_path, query_sql):
    table = tmp_path / "t.csv"
    distinct_rows(table, 60)
    out = tmp_path / "out.parquet"
    with sim_server() as server:
        env = openai_env(tmp_path, server)
        args = ["run", str(query_sql), "--table", f"t={table}", "--out", str(out)]
        first = run_env(env, *args, "--engine", "openai")
        assert first.returncode == 0, first.stderr
        assert served(server) == 60
        second = run_env(env, *args, "--engine", "openai")
        assert second.returncode == 0, second.stderr
        assert served(server) == 60  # the second run sent nothing
        report = json.loads(second.stdout)
        assert (report["requests_sent"], report["cache_hits"]) == (0, 60)
        assert report["response_cache"] == str(tmp_path / "home" / "responses.duckdb")
        assert (pd.read_parquet(out)["status"] == "answered").sum() == 60
        bypass = run_env(env, *args, "--engine", "openai", "--no-cache")
        assert bypass.returncode == 0, bypass.stderr
        assert served(server) == 120  # --no-cache sends everything again
    # the simulated engine keeps the assets' default: no cache unless asked
    sim_home = {**env, "LLM_ASSETS_HOME": str(tmp_path / "sim_home")}
    proc = run_env(sim_home, *args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["response_cache"] is None
    assert not (tmp_path / "sim_home" / "responses.duckdb").exists()
    proc = run_env(sim_home, *args, "--cache")
    assert json.loads(proc.stdout)["requests_sent"] == 60
    proc = run_env(sim_home, *args, "--cache")
    assert json.loads(proc.stdout)["requests_sent"] == 0


def test_kill_9_midway_then_a_rerun_sends_only_what_was_not_committed(tmp_path, query_sql):
    """The issue's case (kill -9 at 906 of 2,000, the rerun sent all 2,000) on 1,000 rows:
    killed once half the requests reached the server, the rerun sends exactly the requests not
    committed to the cache, which is at most the chunk in flight plus what was never sent."""
    import os
    import signal
    import time

    from resources.response_cache import ResponseCache
    from resources.runner import DEFAULT_CHUNK_SIZE

    rows = 1000
    table = tmp_path / "t.csv"
    distinct_rows(table, rows)
    out = tmp_path / "out.parquet"
    args = ["run", str(query_sql), "--table", f"t={table}", "--engine", "openai", "--out", str(out)]
    with sim_server(latency_ms=20) as server:
        env = openai_env(tmp_path, server)
        proc = subprocess.Popen(
            [*CLI, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 120
            while served(server) < rows // 2 and proc.poll() is None:
                assert time.monotonic() < deadline, "the first run never got half way"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        time.sleep(0.5)  # requests in flight when the client died still finish on the server
        sent_first = served(server)
        committed = ResponseCache(tmp_path / "home" / "responses.duckdb").count()
        assert DEFAULT_CHUNK_SIZE <= committed < rows, committed
        assert sent_first - committed <= DEFAULT_CHUNK_SIZE  # lost at most the chunk in flight
        assert not out.exists()
        rerun = run_env(env, *args)
        assert rerun.returncode == 0, rerun.stderr
        sent_rerun = served(server) - sent_first
    report = json.loads(rerun.stdout)
    assert sent_rerun == rows - committed, (sent_first, committed, sent_rerun)
    assert sent_rerun <= DEFAULT_CHUNK_SIZE + (rows - sent_first)
    assert (report["requests_sent"], report["cache_hits"]) == (rows - committed, committed)
    assert (pd.read_parquet(out)["status"] == "answered").sum() == rows


@pytest.mark.parametrize(
    "target, facts",
    [
        ("same_input", ["is the input file", "t.csv", "overwrite"]),
        ("same_input_spelled_otherwise", ["is the input file", "t.csv"]),
        ("directory", ["is a directory", "results", ".parquet, .csv, .tsv, .jsonl, .json"]),
        ("missing_folder", ["nope", "does not exist"]),
        ("xlsx", ["out.xlsx", "'.xlsx'", ".parquet, .csv, .tsv, .jsonl, .json"]),
        ("no_extension", ["result", "no extension", ".parquet, .csv, .tsv, .jsonl, .json"]),
    ],
)
def test_out_refuses_a_bad_target_before_sending_anything(tmp_path, query_sql, target, facts):
    table = tmp_path / "t.csv"
    distinct_rows(table, 8)
    before = table.read_bytes()
    (tmp_path / "results").mkdir()
    (tmp_path / "sub").mkdir()
    out = {
        "same_input": table,
        "same_input_spelled_otherwise": tmp_path / "sub" / ".." / "t.csv",
        "directory": tmp_path / "results",
        "missing_folder": tmp_path / "nope" / "out.parquet",
        "xlsx": tmp_path / "out.xlsx",
        "no_extension": tmp_path / "result",
    }[target]
    with sim_server() as server:
        env = openai_env(tmp_path, server)
        proc = run_env(env, "run", str(query_sql), "--table", f"t={table}", "--engine", "openai",
                       "--out", str(out))  # fmt: skip
        assert served(server) == 0  # refused before anything was sent
    assert_one_line_error(proc, str(out), *facts)
    assert table.read_bytes() == before
    assert not (tmp_path / "out.xlsx").exists() and not (tmp_path / "nope").exists()
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".tsv", ".jsonl", ".json"])
def test_out_writes_the_format_its_extension_names(tmp_path, query_sql, ext):
    table = tmp_path / "t.csv"
    distinct_rows(table, 6)
    out = tmp_path / f"result{ext}"
    proc = run("run", str(query_sql), "--table", f"t={table}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    read = {
        ".parquet": pd.read_parquet,
        ".csv": pd.read_csv,
        ".tsv": lambda p: pd.read_csv(p, sep="\t"),
        ".jsonl": lambda p: pd.read_json(p, lines=True),
        ".json": lambda p: pd.read_json(p, orient="records"),
    }[ext]
    result = read(out)
    assert len(result) == 6 and (result["status"] == "answered").all()
    assert sorted(result["review"]) == sorted(f"review {i}" for i in range(6))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file


FAIL_HALFWAY = """
import errno, sys
import pandas as pd

def half_then_full(self, path, *args, **kwargs):
    with open(path, "wb") as f:
        f.write(b"PAR1 half a file")
    raise OSError(errno.ENOSPC, "No space left on device")

pd.DataFrame.to_parquet = half_then_full
from llm_assets.cli import main
sys.argv = ["llm-assets", *sys.argv[1:]]
main()
"""


def test_a_failed_write_leaves_the_old_file_and_the_answers_in_the_cache(tmp_path, query_sql):
    """A full disk halfway through writing --out: one line, the previous file untouched, no
    half file beside it, and the answers are in the response cache (the rerun sends none)."""
    table = tmp_path / "t.csv"
    distinct_rows(table, 12)
    folder = tmp_path / "results"
    folder.mkdir()
    out = folder / "result.parquet"
    out.write_bytes(b"yesterday's results")
    args = ["run", str(query_sql), "--table", f"t={table}", "--engine", "openai", "--out", str(out)]
    with sim_server() as server:
        env = openai_env(tmp_path, server)
        proc = subprocess.run([sys.executable, "-c", FAIL_HALFWAY, *args], capture_output=True,
                              text=True, timeout=180, env=env)  # fmt: skip
        assert_one_line_error(without_progress(proc), str(out), "No space left", "response cache")
        assert out.read_bytes() == b"yesterday's results"
        assert [p.name for p in folder.iterdir()] == ["result.parquet"]
        assert served(server) == 12
        rerun = run_env(env, *args)
        assert rerun.returncode == 0, rerun.stderr
        assert served(server) == 12  # nothing sent again
    assert json.loads(rerun.stdout)["cache_hits"] == 12
    assert len(pd.read_parquet(out)) == 12


def test_run_shows_and_writes_a_global_aggregate(tmp_path):
    """An aggregate without GROUP BY: the summary carries the one answer row and `--out X.csv`
    writes it beside the result as `X.answer.csv` (issue 21 item 2)."""
    table = tmp_path / "t.csv"
    table.write_text("id,review\n1,great\n2,bad\n3,fine\n4,great\n5,meh\n")
    sql = tmp_path / "stars.sql"
    sql.write_text(
        "SELECT COUNT(*) AS n, AVG(LLM('Stars for {review}', t.review, "
        "output => 'number(1,5)')) AS avg_stars FROM t"
    )
    out = tmp_path / "o.csv"
    proc = run("run", str(sql), "--table", f"t={table}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    result = pd.read_csv(out)
    expected = pd.to_numeric(result["llm_1"], errors="coerce").mean()  # from the result rows
    (answer,) = report["answer"]
    assert answer["n"] == 5 and answer["avg_stars"] == pytest.approx(expected)
    assert report["answer_out"] == str(tmp_path / "o.answer.csv")
    written = pd.read_csv(report["answer_out"])
    assert written.to_dict(orient="records") == [answer]
