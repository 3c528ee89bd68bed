"""A user's own query over their own file, declared three ways (factory + materialize,
`llm-assets run`, component YAML + `dg launch`): the same result, nulls skipped with a
reason, values reaching the prompt and the result exactly as written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets

ROOT = Path(__file__).resolve().parents[3]
SQL = """SELECT r.id, r.fresh,
       LLM('Is this critic review positive? {review}', r.review,
           output => 'choice(positive,negative)') AS sentiment
FROM reviews r
WHERE r.rating >= 2
"""
ROWS = [
    # id, review, rating, fresh, critic
    ("007", "A “triumph” of café cinema", "4", "TRUE", "Ann"),
    ("0042", "", "3", "False", "Bob"),  # empty cell: null review -> skipped
    ("12345678901234567891", "NaN", "5", "TRUE", "Cy"),  # the word NaN is text
    ("8", "None of it works", "1", "False", "Di"),  # rating < 2: removed by the predicate
    ("9", "Dull, long; “meh”", "2", "false", "Ed"),
    ("010", "None", "2", "TRUE", ""),
]
EXPECTED_IDS = ["007", "0042", "12345678901234567891", "8", "9", "010"]


def write_reviews(path: Path) -> Path:
    """A cp1252, tab-separated file with an empty review cell."""
    lines = ["id\treview\trating\tfresh\tcritic"]
    lines += ["\t".join(row) for row in ROWS]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    return path


@pytest.fixture
def reviews(tmp_path):
    return write_reviews(tmp_path / "reviews.tsv")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def by_factory(reviews: Path, with_meta: bool = False):
    defs = llm_query_assets("reviews_sentiment", SQL, sources={"reviews": str(reviews)})
    assets = list(defs.assets) + list(defs.asset_checks)
    result = dg.materialize(assets, resources=resources_for("sim"))
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks if c.check_name != "answers_obey_output_spec")
    frame = result.output_for_node("reviews_sentiment__result")
    if not with_meta:
        return frame
    (meta,) = [
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] == "llm_outputs"
    ]
    return frame, meta


def by_cli(reviews: Path, tmp_path: Path) -> tuple[pd.DataFrame, dict]:
    query = tmp_path / "sentiment.sql"
    query.write_text(SQL)
    out = tmp_path / "result.parquet"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_assets.cli",
            "run",
            str(query),
            "--table",
            f"reviews={reviews}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return pd.read_parquet(out), json.loads(proc.stdout)


def comparable(result: pd.DataFrame) -> list[tuple]:
    return [
        (
            r.id,
            r.fresh,
            r.sentiment if isinstance(r.sentiment, str) else None,
            r.status,
            r.reason if isinstance(r.reason, str) else None,
        )
        for r in result.sort_values("_row").itertuples()
    ]


def assert_truthful(result: pd.DataFrame) -> None:
    rows = result.sort_values("_row")
    assert rows["id"].tolist() == EXPECTED_IDS  # never 7.0, 42.0 or 1.23e+19
    assert rows["fresh"].tolist() == ["TRUE", "False", "TRUE", "False", "false", "TRUE"]
    status = dict(zip(rows["id"], rows["status"], strict=True))
    reason = dict(zip(rows["id"], rows["reason"], strict=True))
    assert status["0042"] == "skipped" and reason["0042"] == "null in LLM field 'review'"
    assert status["8"] == "skipped" and "rating" in reason["8"]
    assert status["12345678901234567891"] == status["010"] == "answered"  # NaN, None: text
    assert set(rows.loc[rows.status == "answered", "sentiment"]) <= {"positive", "negative"}


def test_factory_and_cli_agree_and_tell_the_truth(reviews, home, tmp_path):
    factory, meta = by_factory(reviews, with_meta=True)
    assert_truthful(factory)
    cli, summary = by_cli(reviews, tmp_path)
    assert_truthful(cli)
    assert comparable(cli) == comparable(factory)
    assert summary["rows"]["rows_in"] == 6 and summary["rows"]["skipped"] == 2
    assert summary["n_requests"] == 4 and summary["engine"] == "sim"
    # one path: the same prompts, tokens, engine time and cost either way
    for key in ("n_requests", "prompt_tokens", "cached_tokens", "output_tokens"):
        assert summary[key] == meta[key], key
    assert summary["engine_time_s"] == pytest.approx(meta["engine_time_s"], abs=1e-3)
    assert summary["cost_usd"]["self_hosted"] == pytest.approx(
        meta["cost_usd_self_hosted"], rel=1e-3
    )


def test_prompts_carry_the_cells_as_written(reviews, home):
    from llm_assets.data.tables import load_table
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.run import run_query
    from llm_assets.sql.compiler import compile_sql
    from resources.sim.engine import SimulatedEngine

    sql = "SELECT LLM('Row: {id} {fresh} {review}', r.id, r.fresh, r.review) FROM reviews r"
    query = compile_sql(sql, name="q")
    run = run_query(
        query,
        {"reviews": load_table(reviews)},
        QueryOptions(method="original"),
        SimulatedEngine(),
        send=False,
    )
    prompts = "\n".join(run.stages[0].plan["prompt"])
    for text in (
        "id: 007",
        "id: 010",
        "id: 12345678901234567891",
        "fresh: TRUE",
        "review: NaN",
        "review: None",
        "“triumph” of café",
    ):
        assert text in prompts, text


DG_PYPROJECT = """[project]
name = "myproj"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["llm-assets"]

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "myproj"
"""
DG_DEFINITIONS = """from pathlib import Path

import dagster as dg

from jobs.resources import resources_for


@dg.definitions
def defs():
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(resources=resources_for("sim")),
    )
"""


def dg_run(project: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    dg_bin = Path(sys.executable).with_name("dg")
    return subprocess.run(
        [str(dg_bin), *args], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_a_fresh_dg_project_scaffolds_checks_and_launches_the_component(
    reviews, tmp_path, monkeypatch
):
    """A hand-written minimal dg project that installs nothing: `dg list components` finds
    the component through the package's entry point, `dg scaffold defs` writes defs.yaml,
    `dg check defs` passes, `dg launch` materializes it, and the result equals the factory's."""
    project = tmp_path / "proj"
    package = project / "src" / "myproj"
    (package / "defs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(DG_PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DG_DEFINITIONS)
    home = tmp_path / "dg_home"
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": f"{project / 'src'}{os.pathsep}{ROOT}",
        "LLM_ASSETS_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
    }
    listed = dg_run(project, "list", "components", env=env)
    assert listed.returncode == 0 and "llm_assets.LLMQueryComponent" in listed.stdout
    scaffold = dg_run(
        project, "scaffold", "defs", "llm_assets.LLMQueryComponent", "reviews_sentiment", env=env
    )
    assert scaffold.returncode == 0, scaffold.stderr[-2000:]
    yaml_path = package / "defs" / "reviews_sentiment" / "defs.yaml"
    assert "type: llm_assets.LLMQueryComponent" in yaml_path.read_text()
    yaml_path.write_text(
        "type: llm_assets.LLMQueryComponent\nattributes:\n  sql: |\n"
        + "".join(f"    {line}\n" for line in SQL.splitlines())
        + f"  sources:\n    reviews: {reviews}\n"
    )
    checked = dg_run(project, "check", "defs", env=env)
    assert checked.returncode == 0, checked.stderr[-2000:]
    launched = dg_run(project, "launch", "--assets", "group:reviews_sentiment", env=env)
    assert launched.returncode == 0, launched.stderr[-3000:]
    import duckdb

    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    component = con.execute("SELECT * FROM reviews_sentiment.result").df()
    con.close()
    assert_truthful(component)
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "factory_home"))
    assert comparable(component) == comparable(by_factory(reviews))
