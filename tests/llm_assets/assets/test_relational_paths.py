"""LIMIT, ORDER BY an LLM output, `SELECT *` and a plain alias give the same answer through
`llm-assets run`, the factory `llm_query_assets` and the component (issue 35 item 1), on a
table with an empty LLM input; and the rows a LIMIT keeps are those the table says."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from click.testing import CliRunner

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.cli import main as cli

SUMMARY = "LLM('Summarise {review}', r.review)"
GOOD = "LLM('Is {review} good?', r.review, output => 'choice(yes,no)') = 'yes'"
TABLE = pd.DataFrame(
    {
        "id": ["m1", "m2", "m3", "m4", "m5", "m6"],
        "year": ["2001", "1999", "2010", "", "2001", "1987"],
        "review": ["good plot", "", "dull", "good cast", "so good", "bad"],
    }
)
QUERIES = {
    "limit_alias": f"SELECT r.id AS movie, {SUMMARY} AS s FROM reviews r LIMIT 3",
    "order_llm": f"SELECT r.id AS movie, {SUMMARY} AS s FROM reviews r ORDER BY s DESC, movie",
    "star_filter": f"SELECT * FROM reviews r WHERE {GOOD} LIMIT 2",
    "star_offset": f"SELECT r.*, {SUMMARY} AS s FROM reviews r ORDER BY r.year DESC OFFSET 1",
    "filter_limit": f"SELECT r.id, {SUMMARY} AS s FROM reviews r WHERE {GOOD} LIMIT 1",
}


def records(frame: pd.DataFrame) -> list[dict]:
    return [
        {k: (None if not isinstance(v, str) and pd.isna(v) else v) for k, v in r.items()}
        for r in frame.to_dict("records")
    ]


@pytest.fixture
def reviews(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLM_ASSETS_ENGINE", raising=False)
    path = tmp_path / "reviews.csv"
    TABLE.to_csv(path, index=False)  # the empty cells are nulls when read back
    return path


def by_cli(sql: str, path: Path, folder: Path) -> pd.DataFrame:
    (folder / "q.sql").write_text(sql)
    out = folder / "out.parquet"
    done = CliRunner().invoke(
        cli, ["run", str(folder / "q.sql"), "--table", f"reviews={path}", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output[-2000:]
    return pd.read_parquet(folder / "out.answer.parquet")


def by_factory(sql: str, path: Path) -> pd.DataFrame:
    defs = llm_query_assets("q", sql, sources={"reviews": str(path)})
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=resources_for("sim"))
    assert result.success
    return result.asset_value(dg.AssetKey(["q", "answer"]))


def by_component(sql: str, path: Path, folder: Path, monkeypatch) -> pd.DataFrame:
    package = f"relational_{uuid.uuid4().hex[:8]}"
    defs_dir = folder / "src" / package / "defs"
    (defs_dir / "my_query").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "{package}"\nversion = "0.1.0"\n\n[tool.dg]\n'
        f'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    for init in (defs_dir.parent, defs_dir):
        (init / "__init__.py").write_text("")
    body = "".join(f"    {line}\n" for line in sql.splitlines())
    (defs_dir / "my_query" / "defs.yaml").write_text(
        "type: llm_assets.LLMQueryComponent\nattributes:\n  sql: |\n"
        f"{body}  sources:\n    reviews: {path}\n"
    )
    monkeypatch.syspath_prepend(str(folder / "src"))
    defs = dg.load_from_defs_folder(path_within_project=defs_dir)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=resources_for("sim"))
    assert result.success
    return result.asset_value(dg.AssetKey(["my_query", "answer"]))


@pytest.mark.parametrize("name", list(QUERIES))
def test_the_cli_the_factory_and_the_component_answer_the_same_rows(
    name, reviews, tmp_path, monkeypatch
):
    sql = QUERIES[name]
    cli_answer = by_cli(sql, reviews, tmp_path)
    factory = by_factory(sql, reviews)
    component = by_component(sql, reviews, tmp_path / "proj", monkeypatch)
    assert list(cli_answer.columns) == list(factory.columns) == list(component.columns)
    assert records(cli_answer) == records(factory) == records(component)
    expect = {
        "limit_alias": (["movie", "s"], ["m1", "m2", "m3"]),
        "order_llm": (["movie", "s"], None),
        "star_filter": (["id", "year", "review"], None),
        "star_offset": (["id", "year", "review", "s"], ["m1", "m5", "m2", "m6", None]),
        "filter_limit": (["id", "s"], None),
    }[name]
    assert list(factory.columns) == expect[0]
    ids = factory.iloc[:, 0].tolist()
    if name == "star_offset":  # 2010, 2001 (m1, m5 in row order), 1999, 1987, then the null
        assert ids[:4] == expect[1][:4] and ids[4] == "m4"
    elif expect[1] is not None:
        assert ids == expect[1]
    elif name in ("star_filter", "filter_limit"):  # the sim's yes/no: the first passing rows
        assert len(ids) <= (2 if name == "star_filter" else 1) and ids == sorted(ids)
    else:  # every row, sorted by the answers (null last), ties in row order
        assert sorted(ids) == sorted(TABLE["id"]) and factory["s"].iloc[-1] is None
        answers = factory["s"].dropna().tolist()
        assert answers == sorted(answers, reverse=True)
