"""Landing folders: each new file in a query's `landing.folder` becomes a dynamic partition of
that query's assets and one run of them. Two files never overwrite each other (each is its
own partition), a failed file is rerun from the UI by its partition (a problem with its
data fails the run naming the file first), and landing a file for one query never changes
another query's input.

A file is launched once it has settled: its size and modification time unchanged on two sensor
looks `settle_seconds` apart, or last modified at least that long ago. A producer that cannot
promise to write fast should write under a temporary name and rename when done (a rename within
one folder is atomic): names starting with `.` or ending with one of `TEMP_SUFFIXES` are never
launched. A look asks for at most `max_runs_per_tick` runs, oldest files first; the rest wait for
the next looks.

Only files inside the folder are read: a link that resolves outside it is skipped with a
warning, and a partition key that is not a plain file name of the folder (`../x.csv`, an
absolute path) fails its run in one line.

Sensors start STOPPED, as every Dagster sensor does unless told otherwise: turn one on in the
UI, or declare `landing: {running: true}`.
"""

import json
import os
import time
from pathlib import Path, PurePath

import dagster as dg

from llm_assets.assets.definition import QueryDefinition

# Names producers and download tools give files still being written.
TEMP_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".crdownload", ".download", ".filepart", "~")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") or name.lower().endswith(TEMP_SUFFIXES)


def landed_path(folder: str | Path, key: str) -> Path:
    """The file a partition key names in the landing folder; ValueError (one line) for a key that
    is not a plain file name, or a file that resolves outside the folder (a link out)."""
    root = Path(folder).resolve()
    separators = {"/", os.sep, os.altsep or "/", "\0"}
    if not key or key in (".", "..") or any(s in key for s in separators) or PurePath(key).anchor:
        raise ValueError(
            f"partition key {key!r} is not a file name in the landing folder {root}: a landed "
            "file's partition key is its name alone"
        )
    target = (root / key).resolve()
    if not target.is_relative_to(root):
        raise ValueError(
            f"partition key {key!r} resolves to {target}, outside the landing folder {root}"
        )
    return Path(folder) / key


def landed_files(qdef: QueryDefinition) -> tuple[list[Path], list[str]]:
    """(accepted files, one message per ignored file), sorted by name; a file's partition key
    is its name. Temporary names are skipped silently, links out of the folder with a message."""
    folder = Path(qdef.landing.folder)
    if not folder.is_dir():
        return [], []
    root = folder.resolve()
    files, ignored = [], []
    for path in sorted(folder.iterdir()):
        if is_temp_name(path.name) or not path.is_file():
            continue
        target = path.resolve()
        if not target.is_relative_to(root):
            ignored.append(f"{path}: a link to {target}, outside {root}; ignored")
            continue
        if not path.name.lower().endswith(tuple(qdef.landing.suffixes)):
            ignored.append(f"{path}: not one of {list(qdef.landing.suffixes)}; ignored")
            continue
        files.append(path)
    return files, ignored


def _cursor(context: dg.SensorEvaluationContext) -> tuple[dict, dict]:
    """(seen, launched) from the sensor's cursor: seen[name] = [size, mtime_ns, first look
    with that size and mtime]; launched[name] = mtime_ns of the version last asked for."""
    if not context.cursor:
        return {}, {}
    try:
        state = json.loads(context.cursor)
        return dict(state["seen"]), dict(state["launched"])
    except (ValueError, KeyError, TypeError):
        context.log.warning(f"landing cursor {context.cursor[:80]!r} unreadable; starting afresh")
        return {}, {}


def _reconcile(
    context: dg.SensorEvaluationContext,
    qdef: QueryDefinition,
    files: list[Path],
    known: set,
    warehouse: dg.IOManager,
) -> tuple[list[str], set[str]]:
    """(known partitions whose file is gone: to delete, live files to run again alone). The
    warehouse retires the gone files' partitions, so they stop contributing rows to the
    query's tables (`resources.warehouse.slots`). Nothing is retired while the folder itself
    is missing (an unmounted share is not a deletion)."""
    folder = Path(qdef.landing.folder)
    if not folder.is_dir():
        context.log.warning(f"landing folder {folder} is missing; its partitions are kept")
        return [], set()
    names = sorted(path.name for path in files)
    alone: set[str] = set()
    if hasattr(warehouse, "reconcile_partitions"):
        outcome = warehouse.reconcile_partitions(qdef.name, names)
        alone = set(outcome["rerun"])
        if outcome["retired"]:
            context.log.info(
                f"{len(outcome['retired'])} file(s) gone from {folder}, their rows retired: "
                + ", ".join(outcome["retired"][:10])
            )
    else:
        context.log.warning(
            f"io_manager {type(warehouse).__name__} cannot retire partitions: rows of files "
            f"gone from {folder} stay in {qdef.name}'s tables"
        )
    return sorted(known - set(names)), alone


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
        description=f"One partition and one run of {qdef.name} per new file in {landing.folder}, "
        f"once its size and time have stood still {landing.settle_seconds:g} s.",
    )
    def sensor(context: dg.SensorEvaluationContext, io_manager: dg.ResourceParam[dg.IOManager]):
        # io_manager: the warehouse, to retire the partitions whose file is gone (`_reconcile`)
        files, ignored = landed_files(qdef)
        for message in ignored:
            context.log.warning(message)
        was_seen, was_launched = _cursor(context)
        now = time.time()
        seen, launched, ready, settling = {}, {}, [], []
        for path in files:
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed or renamed since the listing
                continue
            name, version = path.name, [stat.st_size, stat.st_mtime_ns]
            before = was_seen.get(name)
            since = before[2] if before and before[:2] == version else now
            seen[name] = [*version, since]
            if name in was_launched:
                launched[name] = was_launched[name]
            if launched.get(name) == stat.st_mtime_ns:
                continue  # this version was asked for already
            # unchanged since the first look that saw this version, or since last written
            if now - min(since, stat.st_mtime_ns / 1e9) >= landing.settle_seconds:
                ready.append((stat.st_mtime_ns, name, path))
            else:
                settling.append(name)
        if settling:
            context.log.info(
                f"{len(settling)} file(s) still changing or too fresh (settle_seconds "
                f"{landing.settle_seconds:g}): {', '.join(settling[:10])}"
            )
        ready.sort()  # oldest first, then by name
        asked, waiting = ready[: landing.max_runs_per_tick], ready[landing.max_runs_per_tick :]
        if waiting:
            context.log.info(
                f"{len(ready)} files ready; asking for {len(asked)} runs now "
                f"(max_runs_per_tick), the other {len(waiting)} on the next looks"
            )
        for mtime_ns, name, _ in asked:
            launched[name] = mtime_ns
        cursor = json.dumps({"seen": seen, "launched": launched}, separators=(",", ":"))
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [name for _, name, _ in asked if name not in known]
        gone, alone = _reconcile(context, qdef, files, known, io_manager)
        requests = [
            dg.RunRequest(
                partition_key=name, run_key=f"{name}:{mtime_ns}", tags={"landing_file": str(path)}
            )
            for mtime_ns, name, path in asked
        ]
        asked_names = {name for _, name, _ in asked}
        requests += [
            dg.RunRequest(
                partition_key=path.name,
                run_key=f"{path.name}:{path.stat().st_mtime_ns}:alone",
                tags={"landing_file": str(path)},
            )
            for path in files
            if path.name in alone and path.name not in asked_names and path.exists()
        ]
        changes = [partitions.build_add_request(new)] if new else []
        changes += [partitions.build_delete_request(gone)] if gone else []
        if not requests:
            reason = (
                f"no file in {landing.folder}"
                if not files
                else f"{len(settling)} file(s) settling, none new in {landing.folder}"
                if settling
                else f"no new file in {landing.folder}"
            )
            return dg.SensorResult(
                skip_reason=reason, cursor=cursor, dynamic_partitions_requests=changes
            )
        # A run key per (file, modification time): Dagster launches each once, so a file
        # written again is run again, and an unchanged one never twice.
        return dg.SensorResult(
            run_requests=requests, dynamic_partitions_requests=changes, cursor=cursor
        )

    return sensor
