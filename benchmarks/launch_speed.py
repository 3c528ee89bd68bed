"""`dg launch` against `llm-assets run` on one 2,000-row query (issue 21 item 10).

    python -m benchmarks.launch_speed [--rows N] [--repeat K] [--no-multiprocess] [--json PATH]

The table is the synthetic Movies reviews joined with their movies (`movie_reviews(rows)`,
written as a CSV); the query has one LLM call over every row (`SQL`), on the default embedded
sim engine. The Dagster side is a fresh dg project made as the README tells users to (a
`defs.yaml` of `llm_assets.LLMQueryComponent` in the project's `defs/` folder, the engine's
resources merged in `definitions.py`), launched with `dg launch --assets 'group:<query>'`.

Timed (wall clock of the whole command):

- `cli`: `llm-assets run query.sql --table reviews=reviews.csv --out cli.parquet`;
- `dg_in_process`: `dg launch` as it is now (every step in the run's process), in a fresh
  `LLM_ASSETS_HOME` and `DAGSTER_HOME`: a user's first launch, which also creates the Dagster
  instance, the warehouse and the MLflow store;
- `dg_in_process_warm`: the same launch again in those homes (a user's next launches);
- `dg_multiprocess`: `dg launch` in fresh homes with `LLM_ASSETS_EXECUTOR=dagster`, so
  Dagster's default executor, the behaviour before the fix: a process per step (skipped
  with `--no-multiprocess`).

Medians over `--repeat` runs (default 1). Each launch's result table (`<query>.result` in the
warehouse) must equal the CLI's row for row (every column, rows in `_row` order), or the
benchmark exits 1. Target: `dg launch <= 1.5 x cli + 15 s`, judged per case. Writes JSON
(default `benchmarks/results/launch_speed.json`) with the command, the machine's cores and
its load average before and after, and per case the steps, the step processes started and
the seconds the steps themselves took (Dagster's log of the last run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.lib.provenance import write_result
from llm_assets.assets.executor import EXECUTOR_ENV

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "launch_speed.json"
QUERY = "movie_sentiment"
SQL = """SELECT r.review_id,
       LLM('Is this critic review positive about the movie? {movie_info} {review_content}',
           r.movie_info, r.review_content,
           output => 'choice(positive,negative)') AS sentiment
FROM reviews r
"""
TARGET_FACTOR, TARGET_SLACK_S = 1.5, 15.0

PYPROJECT = """[project]
name = "launchbench"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["llm-assets"]

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "launchbench"
"""
DEFINITIONS = """from pathlib import Path

import dagster as dg

from jobs.resources import resources_for


@dg.definitions
def defs():
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(resources=resources_for("sim")),
    )
"""


def make_project(folder: Path, rows: int) -> Path:
    """The table, the query's SQL file and a dg project declaring the query; returns the
    project's folder."""
    from llm_assets.data.movies import movie_reviews

    movie_reviews(rows).to_csv(folder / "reviews.csv", index=False)
    (folder / "query.sql").write_text(SQL)
    project = folder / "project"
    package = project / "src" / "launchbench"
    (package / "defs" / QUERY).mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DEFINITIONS)
    (package / "defs" / QUERY / "defs.yaml").write_text(
        "type: llm_assets.LLMQueryComponent\nattributes:\n  sql: |\n"
        + "".join(f"    {line}\n" for line in SQL.splitlines())
        + f"  sources:\n    reviews: {folder / 'reviews.csv'}\n"
    )
    return project


def command_env(home: Path, project: Path, **extra: str) -> dict[str, str]:
    """The environment of one timed command: its LLM_ASSETS_HOME and DAGSTER_HOME in `home`
    (no other LLM_ASSETS_ variable of the caller's), the project and this repository on the
    path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_ASSETS_")}
    return {
        **env,
        "PYTHONPATH": os.pathsep.join([str(project / "src"), str(ROOT)]),
        "LLM_ASSETS_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        **extra,
    }


def fresh_env(home: Path, project: Path, **extra: str) -> dict[str, str]:
    """`command_env` in an emptied `home` (an empty dagster.yaml: Dagster's defaults)."""
    if home.exists():
        shutil.rmtree(home)
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text("")
    return command_env(home, project, **extra)


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of `command` and its stderr; RuntimeError with the tail if it fails."""
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
    return seconds, proc.stderr


def step_profile(log: str) -> dict[str, float | int]:
    """From Dagster's log: steps run, step processes started, seconds inside the steps."""
    step = r'STEP_SUCCESS - Finished execution of step ".*?" in (?:(\d+)m)?([\d.]+)(ms|s)'
    durations = re.findall(step, log)
    inside = sum(
        60 * float(m or 0) + float(v) / (1000 if unit == "ms" else 1) for m, v, unit in durations
    )
    return {
        "steps": len(durations),
        "step_processes": log.count("STEP_WORKER_STARTING"),
        "seconds_inside_steps": round(inside, 2),
    }


def comparable(frame: pd.DataFrame) -> list[tuple]:
    """Every column, rows in `_row` order, nulls as None."""
    frame = frame.sort_values("_row")[sorted(frame.columns)]
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(False)]


def warehouse_result(home: Path) -> pd.DataFrame:
    import duckdb

    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {QUERY}.result").df()
    finally:
        con.close()


def run_cli(folder: Path, env: dict[str, str]) -> tuple[float, pd.DataFrame]:
    out = folder / "cli.parquet"
    command = [str(Path(sys.executable).with_name("llm-assets")), "run", "query.sql"]
    command += ["--table", "reviews=reviews.csv", "--out", str(out)]
    seconds, _ = timed(command, folder, env)
    return seconds, pd.read_parquet(out)


def run_dg(project: Path, env: dict[str, str]) -> dict:
    """`dg launch --assets 'group:<query>'`: seconds, step profile, the result table."""
    command = [str(Path(sys.executable).with_name("dg")), "launch"]
    command += ["--assets", f"group:{QUERY}"]
    seconds, log = timed(command, project, env)
    home = Path(env["LLM_ASSETS_HOME"])
    return {"seconds": seconds, "profile": step_profile(log), "result": warehouse_result(home)}


def summary(times: list[float]) -> dict:
    return {"median_s": round(statistics.median(times), 2), "runs_s": [round(t, 2) for t in times]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (median)")
    parser.add_argument("--no-multiprocess", action="store_true", help="skip the before case")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    cases = ["dg_in_process", "dg_in_process_warm"]
    cases += [] if args.no_multiprocess else ["dg_multiprocess"]
    times: dict[str, list[float]] = {case: [] for case in ["cli", *cases]}
    profiles: dict[str, dict] = {}
    mismatches: list[str] = []
    with tempfile.TemporaryDirectory(prefix="launch-speed-") as tmp:
        folder = Path(tmp)
        project = make_project(folder, args.rows)
        for k in range(args.repeat):
            seconds, cli = run_cli(folder, fresh_env(folder / "home_cli", project))
            times["cli"].append(seconds)
            expected = comparable(cli)
            print(f"run {k + 1}: cli {seconds:.1f} s", flush=True)
            for case in cases:
                if case == "dg_in_process_warm":  # a second launch in the same homes
                    env = command_env(folder / "home_dg_in_process", project)
                elif case == "dg_multiprocess":  # Dagster's default executor: the old way
                    env = fresh_env(folder / f"home_{case}", project, **{EXECUTOR_ENV: "dagster"})
                else:
                    env = fresh_env(folder / f"home_{case}", project)
                launched = run_dg(project, env)
                times[case].append(launched["seconds"])
                profiles[case] = launched["profile"]
                if comparable(launched["result"]) != expected:
                    mismatches.append(f"run {k + 1}: {case}'s result differs from the CLI's")
                print(f"run {k + 1}: {case} {launched['seconds']:.1f} s", flush=True)
        rows_answered = int((cli["status"] == "answered").sum())
    cli_s = statistics.median(times["cli"])
    target = TARGET_FACTOR * cli_s + TARGET_SLACK_S
    import dagster

    result = {
        "benchmark": "launch_speed",
        "command": "python -m benchmarks.launch_speed " + " ".join(argv or sys.argv[1:]),
        "cores": os.cpu_count(),
        "load_avg_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "python": platform.python_version(),
        "dagster": dagster.__version__,
        "rows": args.rows,
        "rows_answered": rows_answered,
        "repeat": args.repeat,
        "sql": SQL,
        "engine": "sim (embedded, default resources)",
        "launch": f"dg launch --assets 'group:{QUERY}'",
        "cli": summary(times["cli"]),
        **{case: {**summary(times[case]), **profiles[case]} for case in cases},
        "target": f"dg launch <= {TARGET_FACTOR} x cli + {TARGET_SLACK_S:g} s",
        "target_s": round(target, 2),
        "same_results": not mismatches,
        "mismatches": mismatches,
    }
    for case in cases:
        median = statistics.median(times[case])
        result[case]["over_cli"] = round(median / cli_s, 2)
        result[case]["target_met"] = median <= target
    if not args.no_multiprocess:
        result["multiprocess_over_in_process"] = round(
            statistics.median(times["dg_multiprocess"]) / statistics.median(times["dg_in_process"]),
            2,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, result, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "sql"}, indent=2))
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
