"""The fault matrix: nothing is lost when the server fails, hangs, lies or the client is killed.

Each scenario starts the sim's HTTP server as a real subprocess
(`python -m resources.sim.server --port 0 --fault-... ...` on 127.0.0.1), sends a seeded
synthetic movie-review query (`synthetic_requests`) through `OpenAIEngine` and
`resources.runner.run_requests` with a persistent `ResponseCache` in a scratch folder, then
reruns the same query against the same cache. The `kill9` scenario (`benchmarks.lib.kill9`)
runs the client as a subprocess, kill -9s it once about half the chunks are committed, and
reruns it to completion.

Per scenario (`run_fault_matrix(...)["faults"][name]`):

- `rows_in`: rows of the query; `answered` / `failed`: rows whose final response has no error /
  has one (counted by matching response ids to row ids, not from the runner's counters);
  `skipped`: rows deliberately not sent (none in this query); `lost` = rows_in − answered −
  skipped − failed: rows that came back with no response at all; must be 0;
- `requests_sent`: requests handed to the engine over all runs (the engine's retries of one
  request are not counted; `http_calls` counts every completion call the server saw);
- `requests_resent_after_rerun`: requests the rerun sent that an earlier run had already sent
  (after kill -9: at most the chunk in flight; otherwise the failed rows retried);
- `faults_injected`: the server's own count of each injected fault; `wall_s`.

The hostile-server cases (`drip-feed`, `endless-body`, `malformed-200`, `wrong-key`,
`dead-server`, `implausible-usage`) run against `benchmarks.lib.hostile` servers instead, once,
and add `bound_s` (see `benchmarks.lib.hostile_faults`; `implausible-usage` adds how the rows
given usage their request cannot have ended, and the recorded cost against its bound).

The fleet cases (`fleet-3-bad-of-4`, `fleet-hung-1-of-2`, `fleet-slow-1-of-4`,
`fleet-all-dead`) run one engine over several sim server processes, some faulty, and add
`baseline_s` (the healthy replicas alone), `bound_s` (1.5 x that; 30 s when all are dead),
`mixed`, `served_twice`, `given_up` and `per_replica` (see `benchmarks.lib.fleet_faults`).

The product-path cases go through Dagster in process on the sim engine, and check each result
row against what its own source holds, so they add `mixed`: result rows that are not their
source's, or whose text differs from what was written (must be 0, like `lost`):
`concurrent-runs` (2 runs), `concurrent-runs-5` (5 runs of distinct sizes, one shared
instance, one kept version per table) and `concurrent-runs-8-postgres` (8 such runs, the
instance's storage a real PostgreSQL) of q1's lineage at once on one home
(`benchmarks.lib.concurrent_runs`); `stray-byte` (a UTF-8 file with one invalid byte: refused
by default with file, line and column, run with `encoding_errors: replace`) and `half-written`
(the landing sensor looking at a file while it is written, and at a temporary name)
(`benchmarks.lib.input_faults`). The hostile-file cases (`gzip-bomb`, `long-cell`,
`10k-columns`, `long-line`) run `llm-assets plan` on a generated file in a fresh process and
add its `peak_rss_mb` (`benchmarks.lib.bounded_input`; `mixed` 1: not the expected outcome or
a peak over `limit_mb`).

`python -m benchmarks.faults` is the command line; tests call `run_fault_matrix(smoke=True)`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.lib.bounded_input import BOUNDED_INPUT_CASES, bounded_input_case
from benchmarks.lib.fault_setup import (
    ClientSettings,
    FaultScenario,
    Log,
    SimServerProcess,
    _in_process_scenario,
    synthetic_requests,
)
from benchmarks.lib.fleet_faults import FLEET_CASES, run_fleet_case
from benchmarks.lib.hostile_faults import HOSTILE_CASES, run_hostile_case

__all__ = [
    "FAULT_MATRIX",
    "SMOKE_FAULTS",
    "ClientSettings",
    "FaultScenario",
    "PRODUCT_CASES",
    "SimServerProcess",
    "markdown_table",
    "run_fault_matrix",
    "synthetic_requests",
]

FAULT_MATRIX: tuple[FaultScenario, ...] = (
    FaultScenario("none", (), description="no fault"),
    FaultScenario("429", ("--fault-rate", "0.1", "--fault-status", "429"), description="10% 429"),
    FaultScenario("500", ("--fault-rate", "0.1", "--fault-status", "500"), description="10% 500"),
    FaultScenario("503", ("--fault-rate", "0.1", "--fault-status", "503"), description="10% 503"),
    FaultScenario(
        "latency",
        ("--fault-latency-ms", "50", "--fault-latency-jitter-ms", "100"),
        description="+50-150 ms per call",
    ),
    FaultScenario(
        "hang", ("--fault-hang-rate", "0.05"), description="5% never answered (client timeout)"
    ),
    FaultScenario(
        "drop", ("--fault-drop-rate", "0.05"), description="5% cut mid-response (half a body)"
    ),
    FaultScenario(
        "malformed", ("--fault-malformed-rate", "0.05"), description="5% HTTP 200, invalid JSON"
    ),
    FaultScenario("kill9", (), kill_client=True, description="client kill -9 halfway, rerun"),
)
FAULT_MATRIX += tuple(FaultScenario(name, description=what) for name, what in HOSTILE_CASES.items())
FAULT_MATRIX += tuple(FaultScenario(name, description=what) for name, what in FLEET_CASES.items())
FAULT_MATRIX += (
    FaultScenario(
        "concurrent-runs", description="two runs of q1's lineage at once on one home (Dagster)"
    ),
    FaultScenario(
        "concurrent-runs-5",
        description="five runs of q1's lineage at once, distinct sizes, one kept version",
    ),
    FaultScenario(
        "concurrent-runs-8-postgres",
        description="eight runs at once, distinct sizes, one kept version, Dagster on Postgres",
    ),
    FaultScenario(
        "stray-byte", description="UTF-8 file, accented rows, one invalid byte (replace)"
    ),
    FaultScenario(
        "half-written", description="landing sensor looks while a file is written, temp name"
    ),
)
"""The hostile cases run against `benchmarks.lib.hostile_faults` servers, not the sim's;
`concurrent-runs` and `concurrent-runs-5` run Dagster runs in process
(`benchmarks.lib.concurrent_runs`), `stray-byte` and `half-written` a declared query's assets
(`benchmarks.lib.input_faults`)."""
PRODUCT_CASES: tuple[str, ...] = ("concurrent-runs", "concurrent-runs-5",
                                  "concurrent-runs-8-postgres", "stray-byte",
                                  "half-written")  # fmt: skip
"""The cases that check result rows against their source (they report `mixed`)."""
SMOKE_FAULTS: tuple[str, ...] = ("none", "503", "hang", "drop", "malformed", "kill9")
"""The scenarios of `smoke=True` (the test suite's version)."""
FAULT_MATRIX += tuple(  # the hostile files (`benchmarks.lib.bounded_input`)
    FaultScenario(name, description=what) for name, what in BOUNDED_INPUT_CASES.items()
)


def run_fault_matrix(
    rows: int = 2000,
    *,
    smoke: bool = False,
    faults: Sequence[str] | None = None,
    settings: ClientSettings | None = None,
    workdir: str | os.PathLike[str] | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run the scenarios named in `faults` (default: all, or `SMOKE_FAULTS` with `smoke`) and
    return `{"faults": {name: {...}}, "rows": ..., "settings": {...}}` (see the module
    docstring). `smoke=True` also defaults `rows` to at most 200 and the chunk size to 20."""
    if smoke:
        rows = min(rows, 200)
        settings = settings or ClientSettings(chunk_size=20, timeout_s=0.5)
    settings = settings or ClientSettings()
    names = list(faults) if faults is not None else list(SMOKE_FAULTS if smoke else _all())
    known = {s.name: s for s in FAULT_MATRIX}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown fault scenarios {unknown}; expected some of {list(known)}")
    results: dict[str, Any] = {}
    with _scratch(workdir) as scratch:
        for name in names:
            scenario = known[name]
            log(f"fault {name}: {scenario.description} ({rows} rows)")
            if name in HOSTILE_CASES:
                results[name] = run_hostile_case(name, rows, settings)
            elif name in FLEET_CASES:
                results[name] = run_fleet_case(name, rows, settings, scratch)
            elif name in BOUNDED_INPUT_CASES:
                results[name] = bounded_input_case(name, scratch)
            elif name in PRODUCT_CASES:
                results[name] = _product_case(name, rows, scratch)
            elif scenario.kill_client:
                from benchmarks.lib.kill9 import kill_scenario

                results[name] = kill_scenario(scenario, rows, scratch, settings, log)
            else:
                results[name] = _in_process_scenario(scenario, rows, scratch, settings)
            r = results[name]
            log(
                f"  answered={r['answered']} failed={r['failed']} lost={r['lost']} "
                f"mixed={r.get('mixed', '-')} "
                f"sent={r['requests_sent']} resent={r['requests_resent_after_rerun']} "
                f"faults={r['faults_injected']} wall={r['wall_s']}s"
            )
    return {
        "rows": rows,
        "smoke": smoke,
        "settings": asdict(settings),
        "scenarios": {
            s.name: {"flags": list(s.server_flags), "what": s.description}
            for s in FAULT_MATRIX
            if s.name in names
        },  # fmt: skip
        "faults": results,
    }


def _product_case(name: str, rows: int, scratch: Path) -> dict[str, Any]:
    from benchmarks.lib.concurrent_runs import concurrent_runs_case
    from benchmarks.lib.input_faults import half_written_case, stray_byte_case

    if name == "concurrent-runs":
        return concurrent_runs_case(rows, scratch)
    if name == "concurrent-runs-5":
        return concurrent_runs_case(rows, scratch, runs=5)
    if name == "concurrent-runs-8-postgres":
        return concurrent_runs_case(rows, scratch, runs=8)
    if name == "stray-byte":
        return stray_byte_case(rows, scratch)
    return half_written_case(rows, scratch)


def _all() -> list[str]:
    return [s.name for s in FAULT_MATRIX]


@contextmanager
def _scratch(workdir: str | os.PathLike[str] | None) -> Iterator[Path]:
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="llm-assets-faults-") as tmp:
        yield Path(tmp)


def markdown_table(result: dict[str, Any]) -> str:
    """The matrix as a markdown table (one row per scenario)."""
    head = ("fault", "server flags", "rows_in", "answered", "skipped", "failed", "lost",
            "mixed", "requests_sent", "resent_after_rerun", "http_calls", "faults injected",
            "wall_s", "bound_s")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in result["faults"].items():
        flags = " ".join(result["scenarios"].get(name, {}).get("flags", [])) or "-"
        if name == "kill9":
            flags = f"kill -9 at {r.get('killed_after_rows_committed')} rows, rerun"
        injected = ", ".join(f"{k}={v}" for k, v in r["faults_injected"].items() if v) or "-"
        cells = (name, f"`{flags}`", r["rows_in"], r["answered"], r["skipped"], r["failed"],
                 r["lost"], r.get("mixed", "-"), r["requests_sent"],
                 r["requests_resent_after_rerun"], r["http_calls"], injected, r["wall_s"],
                 r.get("bound_s") or "-")  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
