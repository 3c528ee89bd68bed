"""The fault matrix's `concurrent-runs` case: two runs of one query lineage launched at the
same time on one `$LLM_ASSETS_HOME` (what a landing sensor or two users can do), with
different source sizes. A row is `lost` when a run's result does not hold exactly its own
source's rows (the silent mixing issue 11 found)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any


def concurrent_runs_case(rows: int, workdir: Path) -> dict[str, Any]:
    from jobs.definitions import build_defs
    from jobs.resources import resources_for

    sizes = {"small": max(10, rows // 4), "large": max(20, rows // 2)}
    previous = os.environ.get("LLM_ASSETS_HOME")
    os.environ["LLM_ASSETS_HOME"] = str(workdir / "concurrent-home")
    try:
        defs = build_defs(resources_for("sim"))
        job = defs.resolve_job_def("q1_job")
        outcomes: dict[str, Any] = {}

        def launch(name: str) -> None:
            config = {"ops": {"movies_source": {"config": {"size": sizes[name]}}}}
            outcomes[name] = job.execute_in_process(run_config=config, raise_on_error=False)

        start = time.perf_counter()
        threads = [threading.Thread(target=launch, args=(n,)) for n in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    finally:
        if previous is None:
            os.environ.pop("LLM_ASSETS_HOME", None)
        else:
            os.environ["LLM_ASSETS_HOME"] = previous
    answered = failed = skipped = lost = sent = 0
    for name, size in sizes.items():
        outcome = outcomes[name]
        if not outcome.success:
            lost += size
            continue
        result = outcome.output_for_node("q1__result")
        own = len(outcome.output_for_node("movies_source", "reviews"))
        lost += abs(own - size) + abs(len(result) - size)
        answered += int((result["status"] == "answered").sum())
        failed += int((result["status"] == "failed").sum())
        skipped += int((result["status"] == "skipped").sum())
        sent += int(result["status"].isin(["answered", "failed"]).sum())
    return {
        "rows_in": sum(sizes.values()),
        "answered": answered,
        "skipped": skipped,
        "failed": failed,
        "lost": lost,
        "requests_sent": sent,
        "requests_resent_after_rerun": 0,
        "http_calls": 0,
        "faults_injected": {"runs_at_once": len(sizes)},
        "wall_s": round(wall, 2),
    }
