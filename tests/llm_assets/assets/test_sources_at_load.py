"""Definition load checks the sources (issue 21 items 1 and 5): a missing file, a glob that
matches nothing, an unknown column, and a numeric predicate over a text column (`3/5`, one
`N/A`) are each one line from `llm_query_assets` and from the component as dg loads it
(`dg check defs`, `dg dev`), before any run; the README's first query loads and runs as
printed on a cp1252 reviews TSV with such ratings."""

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.pipeline.typecheck import PredicateTypeError

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
SQL = """SELECT r.id,
       LLM('Is this critic review positive? {review}', r.review,
           output => 'choice(positive,negative)') AS sentiment
FROM reviews r
WHERE r.rating >= 2
"""
RATINGS = {"slash": ["3/5", "1/5", "N/A", "2/5"], "na": ["3", "1", "N/A", "2.5"]}
SAMPLE = {"slash": "'3/5'", "na": "'N/A'"}
FIX = "TRY_CAST(r.rating AS DOUBLE) >= 2"


def write_reviews(path: Path, ratings: list[str]) -> Path:
    """A cp1252 TSV (CRLF) like the Rotten Tomatoes export: ratings are text as written."""
    reviews = ["Great café film", "Dull", "Superb “noir”", "Bof, naïve"]
    lines = ["id\treview\trating"]
    lines += [f"{i}\t{r}\t{g}" for i, (r, g) in enumerate(zip(reviews, ratings, strict=True))]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    return path


def one_line(message: str, *facts: str) -> str:
    assert "\n" not in message.strip(), message
    for fact in facts:
        assert fact in message, (fact, message)
    return message


def readme_component_yaml() -> str:
    """The `defs.yaml` of the README's "Your first query", as printed."""
    text = README.read_text()
    block = re.search(r"```yaml\n(type: llm_assets\.LLMQueryComponent\n.*?)```", text, re.S)
    assert block, "README has no LLMQueryComponent yaml block"
    return block.group(1)


def load_component(tmp_path: Path, monkeypatch, defs_yaml: str, files: dict[str, Path]):
    """Load one component folder the way `dg check defs` does (in process): a project whose
    defs folder holds `my_reviews/defs.yaml` and `files` beside it."""
    package = f"proj_{uuid.uuid4().hex[:8]}"
    project = tmp_path / "proj"
    folder = project / "src" / package / "defs" / "my_reviews"
    folder.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{package}"\nversion = "0.1.0"\n\n[tool.dg]\n'
        f'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    (project / "src" / package / "__init__.py").write_text("")
    (project / "src" / package / "defs" / "__init__.py").write_text("")
    for name, source in files.items():
        (folder / name).write_bytes(source.read_bytes())
    (folder / "defs.yaml").write_text(defs_yaml)
    monkeypatch.syspath_prepend(str(project / "src"))
    return dg.load_from_defs_folder(path_within_project=folder.parent), folder / "defs.yaml"


def load_error(tmp_path, monkeypatch, defs_yaml: str, files: dict[str, Path]) -> str:
    """The message of the error loading the component raises (ours, under dg's wrapper)."""
    with pytest.raises(Exception) as raised:
        load_component(tmp_path, monkeypatch, defs_yaml, files)
    error = raised.value
    while not isinstance(error, ValueError) and error.__cause__ is not None:
        error = error.__cause__
    assert isinstance(error, ValueError), raised.value
    return str(error)


def component_yaml(sql: str, source: str) -> str:
    return yaml.safe_dump(
        {
            "type": "llm_assets.LLMQueryComponent",
            "attributes": {"sql": sql, "sources": {"reviews": source}},
        }
    )


# ---- a numeric predicate over text ------------------------------------------------------


@pytest.mark.parametrize("kind", ["slash", "na"])
def test_a_numeric_predicate_over_text_is_one_line_at_definition_load(tmp_path, kind):
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS[kind])
    with pytest.raises(PredicateTypeError) as error:
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
    one_line(str(error.value), "query 'q'", "r.rating", "VARCHAR", SAMPLE[kind], FIX)


def test_the_component_reports_it_with_the_yaml_path(tmp_path, monkeypatch):
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["na"])
    message = load_error(
        tmp_path, monkeypatch, component_yaml(SQL, "reviews.tsv"), {"reviews.tsv": reviews}
    )
    one_line(message, "defs.yaml: query 'my_reviews':", "r.rating", "VARCHAR", "'N/A'", FIX)


def test_a_column_the_query_also_returns_is_text_for_its_predicate(tmp_path):
    """Types are consistent between what a predicate reads and what the query returns: a
    returned column keeps its text, so `r.rating >= 2` over it is refused with the fix even
    when every value is a number (before: a raw DuckDB Binder Error from the run)."""
    reviews = write_reviews(tmp_path / "reviews.tsv", ["3", "1", "4", "2"])
    returned = SQL.replace("SELECT r.id,", "SELECT r.id, r.rating,")
    with pytest.raises(PredicateTypeError) as error:
        llm_query_assets("q", returned, sources={"reviews": str(reviews)})
    one_line(str(error.value), "r.rating is VARCHAR", "the query also returns it", FIX)
    assert llm_query_assets("q", SQL, sources={"reviews": str(reviews)}).assets


def test_a_predicate_across_a_join_runs_over_the_joined_rows(tmp_path):
    """DuckDB binds `r.rating = m.stars` (text = number) and fails only on a joined row whose
    rating is not a number; the check runs the predicate over the join, as the run does."""
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["slash"])
    movies = tmp_path / "movies.csv"
    movies.write_text("id,stars\n0,3\n")
    sql = (
        "SELECT r.id, LLM('Positive? {review}', r.review) FROM reviews r "
        "JOIN movies m ON r.id = m.id WHERE r.rating = m.stars"
    )
    with pytest.raises(PredicateTypeError) as error:
        llm_query_assets("q", sql, sources={"reviews": str(reviews), "movies": str(movies)})
    one_line(
        str(error.value), "r.rating is VARCHAR", "'3/5'", "TRY_CAST(r.rating AS DOUBLE) = m.stars"
    )


def test_a_duckdb_error_the_check_does_not_foresee_is_one_line_from_run_query(
    tmp_path, monkeypatch
):
    """The last guard: with the check off, `run_query` still turns DuckDB's error of the
    pre-LLM SQL into one line (before: a Binder Error traceback), before anything is sent."""
    from llm_assets.data.tables import load_table
    from llm_assets.pipeline import typecheck
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.run import run_query
    from llm_assets.sql.compiler import compile_sql

    monkeypatch.setattr(typecheck, "check_predicates", lambda query, tables: None)
    reviews = load_table(write_reviews(tmp_path / "reviews.tsv", RATINGS["slash"]))
    with pytest.raises(ValueError) as error:
        run_query(compile_sql(SQL, name="q"), {"reviews": reviews}, QueryOptions(), None)
    one_line(str(error.value), "query 'q': the SQL before the LLM failed", "explicit cast")


# ---- missing files, empty globs, unknown columns ----------------------------------------


@pytest.mark.parametrize(
    "source, facts",
    [
        ("missing.tsv", ["source 'reviews'", "input file not found", "missing.tsv"]),
        ("rev*.csv", ["source 'reviews'", "no file matches", "rev*.csv"]),
    ],
)
def test_a_missing_file_or_an_empty_glob_is_one_line_at_definition_load(
    tmp_path, monkeypatch, source, facts
):
    with pytest.raises(ValueError) as error:
        llm_query_assets("q", SQL, sources={"reviews": str(tmp_path / source)})
    one_line(str(error.value), "query 'q'", *facts)
    message = load_error(tmp_path, monkeypatch, component_yaml(SQL, source), {})
    one_line(message, "defs.yaml: query 'my_reviews'", *facts)


def test_an_unknown_column_is_one_line_at_definition_load(tmp_path, monkeypatch):
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["na"])
    typo = SQL.replace("r.rating", "r.ratng")
    with pytest.raises(ValueError) as error:
        llm_query_assets("q", typo, sources={"reviews": str(reviews)})
    one_line(str(error.value), "unknown column r.ratng", "'id', 'review', 'rating'")
    message = load_error(
        tmp_path, monkeypatch, component_yaml(typo, "reviews.tsv"), {"reviews.tsv": reviews}
    )
    one_line(message, "defs.yaml: query 'my_reviews'", "unknown column r.ratng")


def test_asset_sources_and_the_landing_table_are_left_to_the_run(tmp_path):
    """Definition load reads no upstream asset and no landing table (its files arrive later);
    the run checks them in `filtered` with the same one line."""
    assert llm_query_assets("q", SQL, sources={"reviews": {"asset": "raw/reviews"}}).assets
    landed = {"reviews": str(tmp_path / "unused.csv")}
    assert llm_query_assets("q", SQL, sources=landed, landing=str(tmp_path)).assets

    @dg.asset(key=["raw", "reviews"])
    def raw_reviews():
        return pd.DataFrame({"id": ["1", "2"], "review": ["a", "b"], "rating": ["3", "N/A"]})

    defs = llm_query_assets("q", SQL, sources={"reviews": {"asset": "raw/reviews"}})
    with pytest.raises(dg.Failure) as error:  # the step fails with the check's one line
        dg.materialize([raw_reviews, *defs.assets], resources=resources_for("sim"))
    one_line(str(error.value), "r.rating", "VARCHAR", "'N/A'", FIX)


# ---- the README's first query ------------------------------------------------------------


def test_the_readme_query_loads_and_runs_as_printed_on_text_ratings(tmp_path, monkeypatch):
    """On a cp1252 TSV with ratings `3/5` and one `N/A`: the README's defs.yaml loads as dg
    loads it, and its SQL runs through `llm-assets run`: `3/5` and `2/5` answered, `1/5` and
    `N/A` skipped with the predicate as the reason. The README's old predicate
    (`r.rating >= 2`) is refused by `llm-assets plan` in one line, before anything is sent."""
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["slash"])
    defs_yaml = readme_component_yaml()
    defs, _ = load_component(tmp_path, monkeypatch, defs_yaml, {"reviews.tsv": reviews})
    assert any(k.path[0] == "my_reviews" for a in defs.assets for k in a.keys)

    query = tmp_path / "sentiment.sql"
    query.write_text(yaml.safe_load(defs_yaml)["attributes"]["sql"])
    out = tmp_path / "result.csv"
    cli = [sys.executable, "-m", "llm_assets.cli"]
    table = f"reviews={reviews}"
    proc = subprocess.run(
        [*cli, "run", str(query), "--table", table, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["rows"]["answered"] == 2
    result = pd.read_csv(out, dtype=str, keep_default_na=False).set_index("rating")
    assert result.loc[["3/5", "2/5"], "status"].tolist() == ["answered", "answered"]
    assert result.loc[["1/5", "N/A"], "status"].tolist() == ["skipped", "skipped"]
    assert result.loc["N/A", "reason"].startswith("predicate TRY_CAST(")

    old = tmp_path / "old.sql"
    old.write_text(SQL)
    plan = subprocess.run(
        [*cli, "plan", str(old), "--table", table], capture_output=True, text=True, timeout=120
    )
    assert plan.returncode == 2 and not plan.stdout
    one_line(plan.stderr, "error: predicate r.rating >= 2", "VARCHAR", "'3/5'", FIX)


@pytest.mark.parametrize("kind", ["slash", "na"])
def test_llm_assets_plan_refuses_a_numeric_predicate_over_text_in_one_line(tmp_path, kind):
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS[kind])
    query = tmp_path / "q.sql"
    query.write_text(SQL)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_assets.cli",
            "plan",
            str(query),
            "--table",
            f"reviews={reviews}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout
    one_line(
        proc.stderr, "error: predicate r.rating >= 2", "r.rating is VARCHAR", SAMPLE[kind], FIX
    )


def test_a_duckdb_error_the_check_does_not_foresee_fails_the_filtered_asset_in_one_line(
    tmp_path, monkeypatch
):
    """The same last guard in the lineage: the `filtered` asset fails with the one line
    `run_query` gives (before: DuckDB's Binder Error, as the asset caught only ValueError)."""
    from llm_assets.assets import builders
    from llm_assets.pipeline import typecheck

    monkeypatch.setattr(typecheck, "check_predicates", lambda query, tables: None)
    monkeypatch.setattr(builders, "check_predicates", lambda query, tables: None)
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["slash"])
    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
    result = dg.materialize(list(defs.assets), resources=resources_for("sim"), raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key.endswith("filtered")
    one_line(
        failure.event_specific_data.error.message.split(": ", 1)[1],
        "query 'q': the SQL before the LLM failed",
        "explicit cast",
    )


def test_a_sources_limits_in_the_component_yaml_reach_the_loader(tmp_path, monkeypatch):
    """Issue 36: `limits:` of a source in defs.yaml bounds the file as dg loads it: 4 rows
    over `max_rows: 3` are one line naming the file and the limit."""
    reviews = write_reviews(tmp_path / "reviews.tsv", ["3", "1", "4", "2"])
    source = {"path": "reviews.tsv", "limits": {"max_rows": 3}}
    sql = SQL.replace("r.rating >= 2", "TRY_CAST(r.rating AS DOUBLE) >= 2")
    message = load_error(
        tmp_path, monkeypatch, component_yaml(sql, source), {"reviews.tsv": reviews}
    )
    one_line(message, "reviews.tsv", "the max_rows limit of 3", "limits: {max_rows: N}")
