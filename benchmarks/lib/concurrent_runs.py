"""The fault matrix's `concurrent-runs`, `concurrent-runs-5` and `concurrent-runs-8-postgres`
cases: runs of one query lineage (q1's, through Dagster, in process) launched at the same time
on one `$LLM_ASSETS_HOME` (what a landing sensor or several users can do), each with its own
source size.

- `concurrent-runs`: two runs (rows // 4 and rows // 2 reviews), each on its own ephemeral
  Dagster instance, the warehouse keeping its default versions;
- `concurrent-runs-5`: five runs of distinct sizes (rows // 10, // 8, // 6, // 4, // 2, at
  least 10, 15, 20, 25, 30) on one shared Dagster instance on disk (SQLite files, as
  `dagster dev` keeps them), so the runs see each other's status, and a warehouse that keeps
  one version per table (the harshest pruning: issue 22 item 1 found that it dropped a live
  run's `filtered`, and the next step read another run's rows);
- `concurrent-runs-8-postgres`: eight runs of distinct sizes (`spread_sizes`) on one Dagster
  instance whose run, event-log and schedule storage are a real PostgreSQL server started for
  the case (`benchmarks.lib.postgres`), one kept version per table: what a deployment that
  launches many runs at once uses.

Each run's `q1/result` is checked against that run's own `movies/reviews` output, row by row
(the multiset of `review_content`), not just counted: `lost` counts the run's own rows that
are missing from its result (all of them when the run failed), `mixed` the result rows that
are not its own source's (another run's rows, or one of its rows twice). A run that raised
instead of finishing (`run_errors`: its thread died, e.g. creating its run) lost all its rows;
`runs_ran` counts the runs that finished successfully, to be compared with `runs_at_once`.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

# imported before the threads start: two threads importing it for the first time at once race
# ("partially initialized module 'sqlalchemy.orm.exc'"; Dagster imports it lazily)
import sqlalchemy.orm  # noqa: F401

__all__ = ["at_once", "concurrent_runs_case", "five_sizes", "llm_assets_home", "spread_sizes"]

CASES = {2: "sqlite-ephemeral", 5: "sqlite", 8: "postgres"}
"""Runs at once -> the Dagster storage they share (see the module docstring)."""


@contextmanager
def llm_assets_home(path: Path) -> Iterator[Path]:
    """`$LLM_ASSETS_HOME` set to `path` inside the block, restored after."""
    previous = os.environ.get("LLM_ASSETS_HOME")
    os.environ["LLM_ASSETS_HOME"] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop("LLM_ASSETS_HOME", None)
        else:
            os.environ["LLM_ASSETS_HOME"] = previous


def five_sizes(rows: int) -> list[int]:
    """Five distinct source sizes: rows // 10, // 8, // 6, // 4, // 2, at least 10, 15, 20,
    25, 30, each larger than the one before."""
    sizes: list[int] = []
    for div, floor in zip((10, 8, 6, 4, 2), (10, 15, 20, 25, 30), strict=True):
        sizes.append(max(floor, rows // div, sizes[-1] + 1 if sizes else 0))
    return sizes


def spread_sizes(rows: int, runs: int) -> list[int]:
    """`runs` distinct source sizes from about rows / (2 * runs) up to rows / 2 in even steps,
    the k-th at least 10 + 5k, each larger than the one before."""
    sizes: list[int] = []
    for k in range(runs):
        floor = max(10 + 5 * k, sizes[-1] + 1 if sizes else 0)
        sizes.append(max(floor, rows * (k + 1) // (2 * runs)))
    return sizes


def at_once(launch: Callable[[int], Any], count: int) -> tuple[dict[int, Any], dict[int, str]]:
    """Run `launch(k)` for k in range(count), each in its own thread, all started before any
    is joined: ({k: what it returned}, {k: one line of the exception that ended its thread}).
    Every k is in exactly one of the two, so a thread that died is never silently missing."""
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}

    def run(k: int) -> None:
        try:
            results[k] = launch(k)
        except BaseException as exc:  # noqa: BLE001 - reported, not lost with the thread
            errors[k] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def _own_rows_check(outcome: Any, size: int) -> dict[str, int]:
    """answered / failed / skipped / lost / mixed of one run, checked against its own source."""
    if not outcome.success:
        return {"answered": 0, "failed": 0, "skipped": 0, "lost": size, "mixed": 0, "sent": 0}
    result = outcome.output_for_node("q1__result")
    source = outcome.output_for_node("movies_source", "reviews")
    own = Counter(source["review_content"])
    got = Counter(result["review_content"])
    status = result["status"]
    return {
        "answered": int((status == "answered").sum()),
        "failed": int((status == "failed").sum()),
        "skipped": int((status == "skipped").sum()),
        # a source that is not the size asked for is itself a mix-up: its missing rows count
        "lost": sum((own - got).values()) + max(0, size - len(source)),
        "mixed": sum((got - own).values()) + max(0, len(source) - size),
        "sent": int(status.isin(["answered", "failed"]).sum()),
    }


def _shared_instance(stack: ExitStack, storage: str) -> Any:
    """A Dagster instance for runs in threads: on disk (SQLite files) or on a Postgres server
    started here. Not the in-memory `DagsterInstance.ephemeral()`: its shared-cache SQLite
    refuses concurrent writers ("database table is locked") when threads create runs
    together. Without compute-log capture, which redirects the process's stdout per step
    (threads then lose it), and without instance settings, which make each run reconfigure
    Python logging (threads deadlock)."""
    import dagster as dg

    from benchmarks.lib.postgres import NOOP_COMPUTE_LOGS, dagster_instance, postgres_server

    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="llm-assets-dagster-"))
    if storage == "postgres":
        server = stack.enter_context(postgres_server())
        instance = dagster_instance(server.create_database("dagster"), folder)
    else:
        overrides = {"compute_logs": NOOP_COMPUTE_LOGS}
        instance = dg.DagsterInstance.local_temp(folder, overrides=overrides)
    stack.callback(instance.dispose)
    return instance


def concurrent_runs_case(rows: int, workdir: Path, *, runs: int = 2) -> dict[str, Any]:
    """`concurrent-runs` (runs=2), `concurrent-runs-5` (runs=5) or
    `concurrent-runs-8-postgres` (runs=8); see the module docstring."""
    from jobs.definitions import build_defs
    from jobs.resources import resources_for
    from resources.warehouse.store import WarehouseIOManager, warehouse_io_manager

    if runs == 2:
        sizes = [max(10, rows // 4), max(20, rows // 2)]
        keep_versions = None
    elif runs in CASES:
        sizes = five_sizes(rows) if runs == 5 else spread_sizes(rows, runs)
        keep_versions = 1
    else:
        raise ValueError(f"runs must be one of {sorted(CASES)}, got {runs}")
    home = workdir / ("concurrent-home" if runs == 2 else f"concurrent-{runs}-home")
    with llm_assets_home(home):
        resources = resources_for("sim")
        if keep_versions is not None:
            database = warehouse_io_manager().database
            resources["io_manager"] = WarehouseIOManager(
                database=database, keep_versions=keep_versions
            )
        defs = build_defs(resources)
        job = defs.resolve_job_def("q1_job")
        with ExitStack() as stack:
            instance = _shared_instance(stack, CASES[runs]) if runs != 2 else None

            def launch(k: int) -> Any:
                config = {"ops": {"movies_source": {"config": {"size": sizes[k]}}}}
                return job.execute_in_process(
                    run_config=config, raise_on_error=False, instance=instance
                )

            start = time.perf_counter()
            outcomes, errors = at_once(launch, len(sizes))
            wall = time.perf_counter() - start
    totals = Counter[str]()
    for k, size in enumerate(sizes):
        if k in errors:
            totals.update({"lost": size})
        else:
            totals.update(_own_rows_check(outcomes[k], size))
    injected: dict[str, Any] = {"runs_at_once": len(sizes), "dagster_storage": CASES[runs]}
    if keep_versions is not None:
        injected["keep_versions"] = keep_versions
    return {
        "rows_in": sum(sizes),
        "answered": totals["answered"],
        "skipped": totals["skipped"],
        "failed": totals["failed"],
        "lost": totals["lost"],
        "mixed": totals["mixed"],
        "requests_sent": totals["sent"],
        "requests_resent_after_rerun": 0,
        "http_calls": 0,
        "faults_injected": injected,
        "sizes": sizes,
        "runs_at_once": len(sizes),
        "runs_ran": sum(1 for o in outcomes.values() if o.success),
        "runs_failed": len(errors) + sum(1 for o in outcomes.values() if not o.success),
        "run_errors": errors,
        "wall_s": round(wall, 2),
    }
