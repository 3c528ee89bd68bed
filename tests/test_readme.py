"""The code blocks of the README and of its pages under docs/ run as printed (issue 21 item 8,
issue 37 item 3). Blocks are read from the pages by their fences, never copied here, README.md
first, then docs/*.md by name, and each is handled by this rule:

- ```python: run in page order in one namespace (a reader following the pages), in a folder
  holding the files the page names: `reviews.tsv` (Windows-1252, tab-separated, text ratings
  `3/5`, `4.5`, `N/A`, accents) and `sentiment.sql` (the first component's `sql:`); every
  `dg.Definitions` a block leaves must load with `default_resources()` bound;
- ```sql: compiled, and a full query (`SELECT ... FROM`) planned with `llm-assets plan` on that
  TSV;
- ```yaml: a component (`type: llm_assets.LLMQueryComponent`) is loaded as `dg check defs`
  loads it; the first one ("Your first query") is materialized on the sim and its
  `my_reviews.result` checked row by row; run config (`ops:` / `resources:`) is validated
  against `benchmark_job`;
- a python, sql or yaml block containing `...` is a fragment and is not run;
- a block with no language or ```bash is shell or text and is not run, except the
  `llm-assets ...` lines of "Your first query", run with click's CliRunner; an unlabelled
  block that looks like Python or SQL fails (label it);
- any other language fails: a new block must run or be marked.
"""

import json
import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from llm_assets import default_resources
from llm_assets.cli import main as cli
from llm_assets.sql.compiler import compile_sql
from resources.home import llm_assets_home
from tests.conftest import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FIRST_QUERY = "Your first query"
COMPONENT = "llm_assets.LLMQueryComponent"
RUN_CONFIG_KEYS = {"ops", "resources", "execution", "loggers"}
# id, review, rating: what each row must become under the first query's predicate (>= 2)
ROWS = [
    ("1", "Un film émouvant, l’actrice est superbe", "3/5", "answered"),
    ("2", "Dull and long; “meh”", "4.5", "answered"),
    ("3", "Café noir", "N/A", "skipped"),  # TRY_CAST -> NULL: the predicate removes it
    ("4", "Terrible — avoid", "1/5", "skipped"),
    ("5", "", "5", "skipped"),  # empty cell: a null review
    ("6", "Bien, sans plus", "2/5", "answered"),
]


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # of the opening fence, 1-based
    section: str  # the heading above it
    page: Path = README

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ```{self.lang} ({self.section})"


def page_blocks(page: Path) -> list[Block]:
    blocks, section, fence, body = [], "", None, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if fence is None and line.startswith("#"):
            section = line.lstrip("#").strip()
        elif fence is None and line.startswith("```"):
            fence, body = (line[3:].strip(), number), []
        elif fence is not None and line.rstrip() == "```":
            blocks.append(Block(fence[0], "\n".join(body) + "\n", fence[1], section, page))
            fence = None
        elif fence is not None:
            body.append(line)
    assert fence is None, f"{page.name}:{fence[1]}: a fence is never closed"
    return blocks


def kind(block: Block) -> str:
    """What the test does with a block (the module docstring's rule); 'unmarked' fails."""
    if block.lang in ("", "bash"):
        code = re.search(r"^\s*(import \w|from [\w.]+ import |SELECT\b)", block.text, re.M)
        return "unmarked" if code and not block.lang else "shell"
    if block.lang not in ("python", "sql", "yaml"):
        return "unmarked"
    if "..." in block.text:
        return "fragment"
    if block.lang != "yaml":
        return block.lang
    document = yaml.safe_load(block.text)
    if isinstance(document, dict) and document.get("type") == COMPONENT:
        return "component"
    if isinstance(document, dict) and document and set(document) <= RUN_CONFIG_KEYS:
        return "run_config"
    return "unmarked"


BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def of_kind(name: str) -> list[Block]:
    return [b for b in BLOCKS if kind(b) == name]


def first_component() -> Block:
    return next(
        b for b in of_kind("component") if b.page == README and b.section.startswith(FIRST_QUERY)
    )


def write_reviews(path: Path) -> None:
    lines = ["id\treview\trating", *("\t".join(row[:3]) for row in ROWS)]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The folder a reader runs the README in: reviews.tsv, movies.csv, sentiment.sql,
    LLM_ASSETS_HOME."""
    work = tmp_path / "work"
    work.mkdir()
    write_reviews(work / "reviews.tsv")
    # the semantic-join example's second table (review_id: the equi-join example's key)
    (work / "movies.csv").write_text(
        "review_id,title,synopsis\n1,Noir Nights,A detective walks rainy streets.\n"
        "2,Space Kids,Children fly to the moon.\n"
    )
    sql = yaml.safe_load(first_component().text)["attributes"]["sql"]
    (work / "sentiment.sql").write_text(sql)
    monkeypatch.chdir(work)
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLM_ASSETS_ENGINE", raising=False)
    return work


def test_every_block_runs_or_is_marked():
    unmarked = [str(b) for b in BLOCKS if kind(b) == "unmarked"]
    assert not unmarked, f"README blocks neither run nor marked (see this module): {unmarked}"
    kinds = {kind(b) for b in BLOCKS}
    assert {"python", "sql", "component", "run_config", "shell"} <= kinds, kinds
    assert first_component() and first_cli_lines()


def test_write_reviews_is_cp1252_with_text_ratings(tmp_path):
    from llm_assets.data.tables import load_table

    write_reviews(tmp_path / "r.tsv")
    raw = (tmp_path / "r.tsv").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    table = load_table(tmp_path / "r.tsv").to_pandas()
    assert table["rating"].tolist() == [r[2] for r in ROWS]
    assert table["review"].iloc[0] == ROWS[0][1]


def assert_first_query_result(result: pd.DataFrame) -> None:
    """Every row of reviews.tsv, with the status and reason "Where to look" promises."""
    rows = result.sort_values("_row")
    assert rows["id"].tolist() == [r[0] for r in ROWS]
    assert rows["status"].tolist() == [r[3] for r in ROWS]
    reason = dict(zip(rows["id"], rows["reason"], strict=True))
    for id_ in ("3", "4"):  # N/A and 1/5: removed by the WHERE, the predicate is the reason
        assert reason[id_].startswith("predicate TRY_CAST(SPLIT_PART("), reason[id_]
    assert reason["5"] == "null in LLM field 'review'"
    answered = rows[rows.status == "answered"]
    assert set(answered["sentiment"]) <= {"positive", "negative"}
    assert rows["review"].iloc[0] == ROWS[0][1]  # cp1252 read as written


def test_python_blocks_run_as_printed(workdir):
    namespace: dict = {"__name__": "__readme__"}
    for block in of_kind("python"):
        exec(compile(block.text, str(block), "exec"), namespace)
        for value in namespace.values():
            if isinstance(value, dg.Definitions):  # loads once resources are bound
                bound = dg.Definitions.merge(value, dg.Definitions(resources=default_resources()))
                dg.Definitions.validate_loadable(bound)
    results = [v for v in namespace.values() if isinstance(v, dg.ExecuteInProcessResult)]
    assert results and all(r.success for r in results)
    assert_first_query_result(warehouse_table("my_reviews.result"))


def warehouse_table(name: str) -> pd.DataFrame:
    con = duckdb.connect(str(llm_assets_home() / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {name}").df()
    finally:
        con.close()


def load_component(folder: Path, block: Block, monkeypatch) -> dg.Definitions:
    """`block` as `defs.yaml` of `<project>/defs/my_reviews/` beside reviews.tsv, loaded as
    `dg check defs` loads it."""
    package = f"readme_{uuid.uuid4().hex[:8]}"
    defs = folder / "src" / package / "defs"
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "{package}"\nversion = "0.1.0"\n\n[tool.dg]\n'
        f'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    (defs / "my_reviews").mkdir(parents=True)
    for init in (defs.parent, defs):
        (init / "__init__.py").write_text("")
    (defs / "my_reviews" / "defs.yaml").write_text(block.text)
    write_reviews(defs / "my_reviews" / "reviews.tsv")
    monkeypatch.syspath_prepend(str(folder / "src"))
    return dg.load_from_defs_folder(path_within_project=defs)


def test_first_query_component_materializes_every_row(workdir, monkeypatch):
    defs = load_component(workdir / "proj", first_component(), monkeypatch)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources("sim"))
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    assert_first_query_result(warehouse_table("my_reviews.result"))
    # the rows the WHERE keeps: row 5's empty review is kept, its sentiment NULL (as SQL)
    answer = warehouse_table("my_reviews.answer")
    assert len(answer) == 4 and answer["sentiment"].isna().sum() == 1


def test_other_components_load(workdir, monkeypatch):
    others = [b for b in of_kind("component") if b != first_component()]
    for block in others:
        defs = load_component(workdir / f"proj{block.line}", block, monkeypatch)
        dg.Definitions.validate_loadable(
            dg.Definitions.merge(defs, dg.Definitions(resources=default_resources()))
        )


def plan(sql_path: Path) -> None:
    out = CliRunner().invoke(
        cli,
        [
            "plan",
            str(sql_path),
            "--table",
            "reviews=reviews.tsv",
            "--table",
            "movies=movies.csv",
            "--json",
        ],  # fmt: skip
    )
    assert out.exit_code == 0, out.output[-2000:]


def test_sql_blocks_compile_and_plan(workdir):
    blocks = of_kind("sql")
    for block in blocks:
        query = compile_sql(block.text, name="readme")
        assert query.llm_calls, block
        if re.search(r"^\s*SELECT\b.*\bFROM\b", block.text, re.S | re.I):
            path = workdir / f"block{block.line}.sql"
            path.write_text(block.text)
            plan(path)


def test_the_count_star_example_counts_the_rows_the_where_keeps(workdir):
    """docs/sql.md: the aggregate example answers `n = 4` (rows 1, 2, 5, 6) and sends the
    3 reviews among them that are not empty."""
    (block,) = [
        b for b in of_kind("sql") if b.page.name == "sql.md" and "COUNT(*) AS n" in b.text
        and "AVG(" in b.text
    ]  # fmt: skip
    text = block.page.read_text(encoding="utf-8")
    assert "answers `n = 4` (rows 1, 2, 5 and 6 pass the rating predicate)" in text
    (workdir / "count.sql").write_text(block.text)
    out = CliRunner().invoke(
        cli, ["run", "count.sql", "--table", "reviews=reviews.tsv", "--out", "o.csv"]
    )
    assert out.exit_code == 0, out.output[-2000:]
    report = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    (answer,) = report["answer"]
    assert answer["n"] == 4 and answer["stars"] is not None
    assert report["n_requests"] == 3


def first_cli_lines() -> list[list[str]]:
    """The `llm-assets` command lines of "Your first query"'s shell blocks, split as a shell
    would (comments dropped)."""
    lines = []
    for block in of_kind("shell"):
        if block.page == README and block.section.startswith(FIRST_QUERY):
            for line in block.text.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words[:1] == ["llm-assets"]:
                    lines.append(words[1:])
    return lines


def test_first_query_cli_lines_run(workdir):
    for args in first_cli_lines():
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, (args, out.output[-2000:])
        if args[0] == "run" and "--out" in args:
            result = pd.read_parquet(workdir / args[args.index("--out") + 1])
            assert_first_query_result(result)


def test_a_bare_rating_predicate_stops_with_the_readmes_fix(workdir):
    """ "A bare `r.rating >= 2` ... `llm-assets plan` stop[s] ... with one line naming ... a
    fix and the rows it keeps" (the README's split_part form), and it keeps them: the rows of
    this section's table whose rating before any `/` is at least 2."""
    text = README.read_text(encoding="utf-8")
    (fix,) = re.findall(r"`(write TRY_CAST\(SPLIT_PART\(r\.rating, '/', 1\) AS DOUBLE\) >= 2 "
                        r"instead: true on \d+ of \d+ rows, where .*? would be true on \d+)`",
                        text.replace("\n", " "))  # fmt: skip
    numbers = [re.match(r"[\d.]+", r[2].split("/")[0]) for r in ROWS]
    kept = sum(1 for n in numbers if n and float(n.group()) >= 2)
    assert f"true on {kept} of {len(ROWS)} rows" in fix
    sql = (workdir / "sentiment.sql").read_text()
    bare, n = re.subn(r"WHERE .*", "WHERE r.rating >= 2", sql)
    assert n == 1
    (workdir / "bare.sql").write_text(bare)
    out = CliRunner().invoke(cli, ["plan", "bare.sql", "--table", "reviews=reviews.tsv"])
    assert out.exit_code != 0 and fix in out.output, out.output[-2000:]
    assert "Traceback" not in out.output


def test_run_config_blocks_validate_against_the_benchmark_job(workdir):
    from jobs.definitions import build_defs

    job = build_defs(default_resources("sim")).resolve_job_def("benchmark_job")
    for block in of_kind("run_config"):
        assert dg.validate_run_config(job, yaml.safe_load(block.text)), block
