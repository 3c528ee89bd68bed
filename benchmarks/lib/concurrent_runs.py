"""The fault matrix's `concurrent-runs` and `concurrent-runs-5` cases: runs of one query
lineage (q1's, through Dagster, in process) launched at the same time on one
`$LLM_ASSETS_HOME` (what a landing sensor or several users can do), each with its own source
size.

- `concurrent-runs`: two runs (rows // 4 and rows // 2 reviews), each on its own ephemeral
  Dagster instance, the warehouse keeping its default versions;
- `concurrent-runs-5`: five runs of distinct sizes (rows // 10, // 8, // 6, // 4, // 2, at
  least 10, 15, 20, 25, 30) on one shared Dagster instance (on disk, as a deployment's), so
  the runs see each other's status, and a warehouse that keeps one version per table (the
  harshest pruning: issue 22 item 1 found that it dropped a live run's `filtered`, and the
  next step read another run's rows).

Each run's `q1/result` is checked against that run's own `movies/reviews` output, row by row
(the multiset of `review_content`), not just counted: `lost` counts the run's own rows that
are missing from its result (all of them when the run failed), `mixed` the result rows that
are not its own source's (another run's rows, or one of its rows twice). A run that raised
instead of finishing (`run_errors`) lost all its rows.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

# imported before the threads start: two threads importing it for the first time at once race
# ("partially initialized module 'sqlalchemy.orm.exc'"; Dagster imports it lazily)
import sqlalchemy.orm  # noqa: F401

__all__ = ["concurrent_runs_case", "five_sizes", "llm_assets_home"]


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


def _shared_instance(stack: ExitStack) -> Any:
    """A Dagster instance on disk (SQLite files) for runs in threads. Not the in-memory
    `DagsterInstance.ephemeral()`: its shared-cache SQLite refuses concurrent writers at once
    ("database table is locked") when five threads create runs together. Without compute-log
    capture, which redirects the process's stdout per step (threads then lose it), and without
    instance settings, which make each run reconfigure Python logging (threads deadlock)."""
    import dagster as dg

    noop = {"module": "dagster._core.storage.noop_compute_log_manager",
            "class": "NoOpComputeLogManager"}  # fmt: skip
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="llm-assets-dagster-"))
    instance = dg.DagsterInstance.local_temp(folder, overrides={"compute_logs": noop})
    stack.callback(instance.dispose)
    return instance


def concurrent_runs_case(rows: int, workdir: Path, *, runs: int = 2) -> dict[str, Any]:
    """`concurrent-runs` (runs=2) or `concurrent-runs-5` (runs=5); see the module docstring."""
    from jobs.definitions import build_defs
    from jobs.resources import resources_for
    from resources.warehouse import WarehouseIOManager, warehouse_io_manager

    if runs == 2:
        sizes = [max(10, rows // 4), max(20, rows // 2)]
        keep_versions = None
    elif runs == 5:
        sizes = five_sizes(rows)
        keep_versions = 1
    else:
        raise ValueError(f"runs must be 2 or 5, got {runs}")
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
        outcomes: dict[int, Any] = {}
        errors: dict[int, str] = {}
        with ExitStack() as stack:
            instance = _shared_instance(stack) if runs != 2 else None

            def launch(k: int) -> None:
                config = {"ops": {"movies_source": {"config": {"size": sizes[k]}}}}
                try:
                    outcomes[k] = job.execute_in_process(
                        run_config=config, raise_on_error=False, instance=instance
                    )
                except Exception as exc:  # noqa: BLE001 - the run did not happen: all lost
                    errors[k] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

            start = time.perf_counter()
            threads = [threading.Thread(target=launch, args=(k,)) for k in range(len(sizes))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - start
    totals = Counter[str]()
    for k, size in enumerate(sizes):
        if k in errors:
            totals.update({"lost": size})
        else:
            totals.update(_own_rows_check(outcomes[k], size))
    injected: dict[str, Any] = {"runs_at_once": len(sizes)}
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
        "runs_failed": len(errors) + sum(1 for o in outcomes.values() if not o.success),
        "run_errors": errors,
        "wall_s": round(wall, 2),
    }
