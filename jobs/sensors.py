"""Landing-folder sensor: a CSV or Parquet file dropped in `$LLM_ASSETS_HOME/landing/<group>/`
launches `<group>_job` on it (group: q1 ... q5, q1_products ...). Each file (path and
modification time) launches once; a folder that names no query is reported, not guessed."""

from pathlib import Path

import dagster as dg

from jobs.jobs import ALL_JOBS, QUERY_JOBS
from llm_assets.assets import SPECS_BY_GROUP
from resources.home import llm_assets_home

SUFFIXES = (".csv", ".parquet", ".json")


def landing_dir() -> Path:
    return llm_assets_home() / "landing"


def requests_for(folder: Path) -> tuple[list[dg.RunRequest], list[str]]:
    """Run requests for the files under `folder`, and one message per ignored entry."""
    runs, ignored = [], []
    if not folder.is_dir():
        return runs, ignored
    for path in sorted(p for p in folder.glob("*/*") if p.is_file()):
        group = path.parent.name
        spec = SPECS_BY_GROUP.get(group)
        if spec is None:
            ignored.append(
                f"{path}: folder {group!r} is not a query group {sorted(SPECS_BY_GROUP)}"
            )
            continue
        if path.suffix.lower() not in SUFFIXES:
            ignored.append(f"{path}: not one of {list(SUFFIXES)}")
            continue
        source_op = f"{spec.dataset}_source"
        runs.append(
            dg.RunRequest(
                run_key=f"{path}:{path.stat().st_mtime_ns}",
                job_name=QUERY_JOBS[group].name,
                run_config={"ops": {source_op: {"config": {"paths": [str(path)]}}}},
                tags={"landing_file": str(path)},
            )
        )
    return runs, ignored


@dg.sensor(
    name="landing_folder_sensor",
    jobs=ALL_JOBS,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Launches the matching query job on each new file in the landing folder.",
)
def landing_folder_sensor(context: dg.SensorEvaluationContext):
    runs, ignored = requests_for(landing_dir())
    for message in ignored:
        context.log.warning(message)
    if not runs:
        return dg.SkipReason(f"no new file under {landing_dir()}/<query group>/")
    return runs
