import pytest

from benchmarks.lib.postgres import PostgresUnavailable, postgres_server
from jobs.definitions import build_defs
from jobs.resources import resources_for


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh $LLM_ASSETS_HOME per test (DuckDB warehouse, MLflow store, landing folder)."""
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server (Debian's binaries) for the session; skips in one line where
    it cannot start. `.ci/run` installs Debian's `postgresql` where it is missing."""
    try:
        with postgres_server() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL cannot start here: {exc}")


@pytest.fixture
def make_defs(home):
    def make(**overrides):
        return build_defs({**resources_for("sim"), **overrides})

    return make


def small_config(size=120, **paths):
    """Run config giving every source `size` rows (or real files)."""
    ops = {}
    for dataset in ("movies", "products", "squad"):
        config = {"paths": paths[dataset]} if dataset in paths else {"size": size}
        ops[f"{dataset}_source"] = {"config": config}
    return ops


def run_job(defs, name, size=120, resources=None, instance=None, **paths):
    job = defs.resolve_job_def(name)
    nodes = {n.name for n in job.graph.nodes}
    ops = {k: v for k, v in small_config(size, **paths).items() if k in nodes}
    config = {"ops": ops}
    if resources:
        config["resources"] = resources
    return job.execute_in_process(run_config=config, raise_on_error=False, instance=instance)
