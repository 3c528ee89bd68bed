"""The Dagster code location (`dg dev`, `dg launch`, `dagster dev -w workspace.yaml`): every
query declared under `jobs/defs/` (component YAML or factory), a job per query, the benchmark
jobs and schedule, and the resources of the environment named by LLM_ASSETS_ENGINE (sim by
default)."""

from pathlib import Path

import dagster as dg

from jobs.jobs import check_query_names, jobs_for
from jobs.resources import get_environment, resources_for
from jobs.schedules import daily_benchmark

ROOT = Path(__file__).resolve().parents[1]


def query_groups(loaded: dg.Definitions) -> set[str]:
    """The asset groups of the loaded definitions (one per declared query)."""
    specs = [s for a in loaded.assets or () for s in getattr(a, "specs", ())]
    return {s.group_name for s in specs if s.group_name is not None}


def query_names(loaded: dg.Definitions) -> set[str]:
    """The declared queries: a query's lineage is the assets `<name>/...` of group `<name>`
    (the datasets' group holds `movies/...`, not `datasets/...`)."""
    specs = [s for a in loaded.assets or () for s in getattr(a, "specs", ())]
    return {s.group_name for s in specs if s.key.path[0] == s.group_name}


def build_defs(resources: dict | None = None) -> dg.Definitions:
    """The code location's definitions; `resources` replaces the environment's defaults. A
    query named like one of its groups or jobs (`jobs.jobs.RESERVED_QUERY_NAMES`) is refused."""
    loaded = dg.load_from_defs_folder(path_within_project=ROOT)
    check_query_names(query_names(loaded))
    return dg.Definitions.merge(
        loaded,
        dg.Definitions(
            jobs=jobs_for(query_groups(loaded)),
            schedules=[daily_benchmark],
            resources=resources or resources_for(get_environment()),
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_defs()
