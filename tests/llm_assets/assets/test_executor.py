"""A query's steps run in one process unless asked otherwise (issue 21 item 10): the Definitions
of `llm_query_assets` and of the component carry `QUERY_EXECUTOR`, so `dg launch --assets`
(the implicit asset job) runs in-process, multiprocess is one run-config key away, and
`LLM_ASSETS_EXECUTOR=dagster` leaves the executor to Dagster; definition load reads a query's
files once per process while they do not change."""

import os
from pathlib import Path

import dagster as dg
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.assets.executor import EXECUTOR_ENV, QUERY_EXECUTOR
from llm_assets.pipeline.sources import SourceSpec

SQL = "SELECT r.id, LLM('Is this review positive? {review}', r.review) AS positive FROM reviews r"
RESOURCES = resources_for("sim")
MULTIPROCESS = {"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}}


def write_reviews(path: Path, rows: int = 3) -> Path:
    path.write_text("id,review\n" + "".join(f"{i},review {i}\n" for i in range(rows)))
    return path


@pytest.fixture
def reviews(tmp_path, monkeypatch):
    monkeypatch.delenv(EXECUTOR_ENV, raising=False)
    return write_reviews(tmp_path / "reviews.csv")


def query(name: str, reviews: Path) -> dg.Definitions:
    """Query `name`'s Definitions with the sim engine's resources, as a code location has."""
    defs = llm_query_assets(name, SQL, sources={"reviews": str(reviews)})
    return dg.Definitions.merge(defs, dg.Definitions(resources=RESOURCES))


def execution(job: dg.JobDefinition, run_config: dict | None = None) -> dict:
    """The executor config a run of `job` resolves to: `{mode: {...}}`."""
    (config,) = dg.validate_run_config(job, run_config or {})["execution"].values()
    return config


def test_a_querys_implicit_asset_job_runs_in_process_by_default(reviews):
    assert llm_query_assets("q", SQL, sources={"reviews": str(reviews)}).executor is QUERY_EXECUTOR
    defs = query("q", reviews)
    job = defs.resolve_implicit_global_asset_job_def()  # what `dg launch --assets` runs
    assert job.executor_def is QUERY_EXECUTOR
    assert list(execution(job)) == ["in_process"]
    assert QUERY_EXECUTOR.get_requirements(execution(job)) == []
    # multiprocess is a run-config choice, with Dagster's own options
    assert execution(job, MULTIPROCESS)["multiprocess"]["max_concurrent"] == 2


def test_many_queries_merge_and_the_code_location_keeps_it(reviews):
    merged = dg.Definitions.merge(query("one", reviews), query("two", reviews))
    assert merged.resolve_implicit_global_asset_job_def().executor_def is QUERY_EXECUTOR


def test_dagster_choice_leaves_the_executor_to_dagster_or_your_definitions(reviews, monkeypatch):
    monkeypatch.setenv(EXECUTOR_ENV, "dagster")
    assert llm_query_assets("q", SQL, sources={"reviews": str(reviews)}).executor is None
    defs = query("q", reviews)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def is dg.multi_or_in_process_executor
    own = dg.Definitions.merge(defs, dg.Definitions(executor=dg.multiprocess_executor))
    assert own.resolve_implicit_global_asset_job_def().executor_def is dg.multiprocess_executor
    monkeypatch.setenv(EXECUTOR_ENV, "threads")
    with pytest.raises(ValueError, match="LLM_ASSETS_EXECUTOR='threads': expected one of"):
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)})


STEPS_RUN_HERE: list[int] = []


@dg.asset
def _pid() -> int:
    STEPS_RUN_HERE.append(os.getpid())
    return os.getpid()


@dg.asset
def _pids(_pid: int) -> tuple[int, int]:
    STEPS_RUN_HERE.append(os.getpid())
    return _pid, os.getpid()


def _pid_job() -> dg.JobDefinition:
    """A job without its own executor, like the implicit asset job: the Definitions' one."""
    job = dg.define_asset_job("pids", selection=dg.AssetSelection.all())
    defs = dg.Definitions(assets=[_pid, _pids], jobs=[job], executor=QUERY_EXECUTOR)
    return defs.resolve_job_def("pids")


def test_the_default_runs_every_step_in_the_launching_process():
    """Reconstructable, as `dg launch` runs it; an ephemeral instance, which Dagster's
    multiprocess executor refuses: the run succeeding is the in-process executor."""
    STEPS_RUN_HERE.clear()
    instance = dg.DagsterInstance.ephemeral()
    with dg.execute_job(dg.reconstructable(_pid_job), instance=instance) as result:
        assert result.success
    assert STEPS_RUN_HERE == [os.getpid(), os.getpid()]


def test_definition_load_reads_unchanged_files_once(reviews, monkeypatch):
    reads = []
    real = SourceSpec.read
    monkeypatch.setattr(SourceSpec, "read", lambda self, *a: reads.append(1) or real(self, *a))
    for _ in range(3):  # dg loads the definitions about seven times a launch
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
    assert len(reads) == 1
    write_reviews(reviews, rows=4)  # changed: read again
    llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
    assert len(reads) == 2
    reviews.write_text("id,text\n1,a\n")  # now lacks `review`: the check runs and says so
    with pytest.raises(ValueError, match="review"):
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)})
