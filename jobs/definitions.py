"""The Dagster code location (`dagster dev -w workspace.yaml`, `dagster job execute -m
jobs.definitions -j q1_job`): assets of every query lineage, jobs, schedule, sensor, and the
resources of the environment named by LLM_ASSETS_ENGINE (sim by default)."""

import dagster as dg

from jobs.jobs import ALL_JOBS
from jobs.resources import get_environment, resources_for
from jobs.schedules import daily_benchmark
from jobs.sensors import landing_folder_sensor
from llm_assets.assets import all_assets


def build_defs(resources: dict | None = None) -> dg.Definitions:
    """The code location's definitions; `resources` replaces the environment's defaults."""
    defs = all_assets()
    return dg.Definitions(
        assets=[d for d in defs if not isinstance(d, dg.AssetChecksDefinition)],
        asset_checks=[d for d in defs if isinstance(d, dg.AssetChecksDefinition)],
        jobs=ALL_JOBS,
        schedules=[daily_benchmark],
        sensors=[landing_folder_sensor],
        resources=resources or resources_for(get_environment()),
    )


defs = build_defs()
