"""Landing folders: each new file in a query's `landing.folder` becomes a dynamic partition of
that query's assets and one run of them. Two files never overwrite each other (each is its
own partition), a failed file is rerun from the UI by its partition, and landing a file for
one query never changes another query's input.

Sensors start STOPPED, as every Dagster sensor does unless told otherwise: turn one on in the
UI, or declare `landing: {running: true}`.
"""

from pathlib import Path

import dagster as dg

from llm_assets.assets.definition import QueryDefinition


def landed_files(qdef: QueryDefinition) -> tuple[list[Path], list[str]]:
    """(accepted files, one message per ignored file), sorted by name; a file's partition key
    is its name."""
    folder = Path(qdef.landing.folder)
    if not folder.is_dir():
        return [], []
    files, ignored = [], []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        if path.name.startswith("."):
            continue
        if not path.name.lower().endswith(tuple(qdef.landing.suffixes)):
            ignored.append(f"{path}: not one of {list(qdef.landing.suffixes)}; ignored")
            continue
        files.append(path)
    return files, ignored


def landing_sensor(qdef: QueryDefinition) -> dg.SensorDefinition:
    landing = qdef.landing
    partitions = qdef.partitions_def

    @dg.sensor(
        name=f"{qdef.name}_landing",
        asset_selection=dg.AssetSelection.groups(qdef.name),
        minimum_interval_seconds=landing.minimum_interval_seconds,
        default_status=(
            dg.DefaultSensorStatus.RUNNING if landing.running else dg.DefaultSensorStatus.STOPPED
        ),
        description=f"One partition and one run of {qdef.name} per new file in {landing.folder}.",
    )
    def sensor(context: dg.SensorEvaluationContext):
        files, ignored = landed_files(qdef)
        for message in ignored:
            context.log.warning(message)
        if not files:
            return dg.SkipReason(f"no file in {landing.folder}")
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [p.name for p in files if p.name not in known]
        # A run key per (file, modification time): Dagster launches each once, so a file
        # written again is run again, and an unchanged one never twice.
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    partition_key=p.name,
                    run_key=f"{p.name}:{p.stat().st_mtime_ns}",
                    tags={"landing_file": str(p)},
                )
                for p in files
            ],
            dynamic_partitions_requests=[partitions.build_add_request(new)] if new else [],
        )

    return sensor
