"""Query names that would break the warehouse or the code location are refused when the
definitions load, in one line (issue 22 item 9): DuckDB's own schema names (`temp`, `system`,
`information_schema`, ...), the names of this code location's groups and jobs (`datasets`,
`benchmark`), and two names that differ only in case (one DuckDB schema)."""

import dagster as dg
import pytest

import jobs.definitions as definitions
from llm_assets import LLMQueryComponent, llm_query_assets
from resources.warehouse.store import RESERVED_SCHEMAS

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS s FROM reviews r"
SOURCES = {"reviews": {"asset": "movies/reviews"}}


def one_line(error: pytest.ExceptionInfo, *facts: str) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    for fact in facts:
        assert fact in message, (fact, message)
    return message


@pytest.mark.parametrize("name", sorted(RESERVED_SCHEMAS) + ["TEMP", "Information_Schema"])
def test_names_duckdb_keeps_are_refused_by_the_factory_and_the_component(name, tmp_path):
    with pytest.raises(ValueError) as error:
        llm_query_assets(name, SQL, sources=SOURCES)
    one_line(error, f"query name {name!r} is reserved", "temp")
    component = LLMQueryComponent(sql=SQL, sources=SOURCES, name=name)
    with pytest.raises(ValueError) as error:
        component.query_definition(tmp_path)
    one_line(error, f"query name {name!r} is reserved")


@pytest.mark.parametrize("name", ["main", "Main", "public", "warehouse"])
def test_names_duckdb_can_host_are_accepted(name):
    assert llm_query_assets(name, SQL, sources=SOURCES).assets


@pytest.fixture(scope="module")
def project_defs():
    return dg.load_from_defs_folder(path_within_project=definitions.ROOT)


def build_with(monkeypatch, project_defs, *names):
    """The code location's definitions with queries `names` declared beside the project's."""
    extra = [llm_query_assets(n, SQL, sources=SOURCES) for n in names]
    monkeypatch.setattr(
        definitions.dg,
        "load_from_defs_folder",
        lambda **_: dg.Definitions.merge(project_defs, *extra),
    )
    return definitions.build_defs()


@pytest.mark.parametrize(
    ("names", "fact"),
    [
        (["datasets"], "query name 'datasets' is reserved in this code location"),
        (["benchmark"], "benchmark_job is the job of the benchmark queries"),
        (["products_benchmark"], "query name 'products_benchmark' is reserved"),
        (["reviews_Sentiment"], "'reviews_Sentiment' and 'reviews_sentiment' differ only in case"),
    ],
)
def test_the_code_location_refuses_names_of_its_groups_and_jobs(
    monkeypatch, project_defs, names, fact
):
    with pytest.raises(ValueError) as error:
        build_with(monkeypatch, project_defs, *names)
    one_line(error, fact)


def test_every_declared_query_gets_its_own_job(monkeypatch, project_defs):
    defs = build_with(monkeypatch, project_defs, "my_query", "temporary")
    names = definitions.query_names(defs)
    assert {"my_query", "temporary", "reviews_sentiment", "q1"} <= names
    assert "datasets" not in names
    for name in names:
        job = defs.resolve_job_def(f"{name}_job")
        assert dg.AssetKey([name, "result"]) in job.asset_layer.selected_asset_keys
