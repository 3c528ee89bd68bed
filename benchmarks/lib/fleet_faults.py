"""The fleet cases of the fault matrix (issue 34 item 3): bad replicas cost a fleet once.

Each case starts sim server processes (`python -m resources.sim.server`, some with `--fault-*`
flags), sends the seeded synthetic query (`synthetic_requests`) through ONE `OpenAIEngine`
over all of them and `resources.runner.run_requests` (chunks of `chunk_size`, so a replica
given up in one chunk must stay given up in the next), and compares the wall time with the
healthy replicas alone (`baseline_s`, fresh servers, the same query); `bound_s` = 1.5 x
`baseline_s` (30 s when every replica is dead):

- `fleet-3-bad-of-4`: replicas answering 500 to every call, HTTP 200 with invalid JSON, and
  never answering, plus one healthy one; baseline: the healthy one alone;
- `fleet-hung-1-of-2`: one replica never answers, one healthy; baseline: the healthy one;
- `fleet-slow-1-of-4`: one replica 100x slower (`--fault-latency-ms`: 100 x the baseline's
  mean seconds per request per lane), three fast; baseline: the three fast ones;
- `fleet-all-dead`: four replicas whose servers were stopped (closed ports); must stop in
  under 30 s whatever the table size.

The engine runs with its default `timeout_s` (60 s) and `request_deadline_s` (300 s): the
bounded wait is the fleet's, not the timeout's. Reported besides the row accounting: `mixed`
(rows whose answer differs from the baseline's answer to the same row: must be 0),
`served_twice` (requests the servers' engines served beyond the answered rows, from their
own `/metrics`; must be 0 except for requests abandoned at the slow replica, which reached
its engine after the client gave up on them: `abandoned_at_slow`), `given_up` (times each
replica was given up over the run) and `per_replica` (answered rows per replica).
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.lib.fault_setup import (
    ClientSettings,
    SimServerProcess,
    _row_counts,
    make_engine,
    synthetic_requests,
)
from benchmarks.lib.prom import scrape
from resources.runner import run_requests

__all__ = ["FLEET_CASES", "run_fleet_case"]

FLEET_CASES: dict[str, str] = {
    "fleet-3-bad-of-4": "4 replicas: 500s, malformed 200s, hanging, 1 healthy (vs it alone)",
    "fleet-hung-1-of-2": "2 replicas: 1 never answers (vs the healthy one alone)",
    "fleet-slow-1-of-4": "4 replicas: 1 100x slower (vs the 3 fast ones alone)",
    "fleet-all-dead": "4 replicas, every one stopped (closed ports)",
}
BAD = {
    "500": ("--fault-rate", "1", "--fault-status", "500"),
    "malformed": ("--fault-malformed-rate", "1"),
    "hang": ("--fault-hang-rate", "1"),
}
BOUND_FACTOR = 1.5
ALL_DEAD_BOUND_S = 30.0


def _engine_settings(settings: ClientSettings) -> ClientSettings:
    return dataclasses.replace(settings, timeout_s=60.0, request_deadline_s=300.0)


def _run(urls: list[str], rows: int, settings: ClientSettings, name: str) -> tuple[Any, Any, float]:
    engine = make_engine(",".join(urls), _engine_settings(settings))
    started = time.perf_counter()
    outcome = run_requests(
        engine, name, synthetic_requests(rows, settings.seed), chunk_size=settings.chunk_size
    )
    return engine, outcome, time.perf_counter() - started


def _served(url: str) -> int:
    return int(scrape(f"{url.removesuffix('/v1')}/metrics")["llm_assets_sim:requests_total"])


def _servers(stack: ExitStack, flags: list[tuple[str, ...]], scratch: Path, tag: str) -> list:
    return [
        stack.enter_context(SimServerProcess(f, log_path=scratch / f"{tag}-{k}.log"))
        for k, f in enumerate(flags)
    ]


def run_fleet_case(case: str, rows: int, settings: ClientSettings, scratch: Path) -> dict:
    """Run one case (see the module docstring)."""
    if case not in FLEET_CASES:
        raise ValueError(f"unknown fleet case {case!r}; expected one of {list(FLEET_CASES)}")
    row_ids = [f"row-{i:05d}" for i in range(rows)]
    healthy = 3 if case == "fleet-slow-1-of-4" else 1
    baseline_s, reference, extra, slow_ms = None, {}, {}, None
    if case != "fleet-all-dead":
        with ExitStack() as stack:
            servers = _servers(stack, [()] * healthy, scratch, f"{case}-baseline")
            _, base, baseline_s = _run([s.base_url for s in servers], rows, settings, case)
        reference = {r.id: r.text for r in base.responses if r.error is None}
    if case == "fleet-3-bad-of-4":
        flags = [(), BAD["500"], BAD["malformed"], BAD["hang"]]
    elif case == "fleet-hung-1-of-2":
        flags = [(), BAD["hang"]]
    elif case == "fleet-slow-1-of-4":
        # 100 x the seconds one lane of the baseline spent per request
        slow_ms = 100 * 1000 * baseline_s * healthy * settings.max_concurrency / rows
        flags = [(), (), (), ("--fault-latency-ms", f"{slow_ms:.0f}")]
    else:
        flags = [()] * 4
    with ExitStack() as stack:
        servers = _servers(stack, flags, scratch, case)
        urls = [s.base_url for s in servers]
        if case == "fleet-all-dead":
            for server in servers:
                server.close()
        engine, outcome, wall = _run(urls, rows, settings, case)
        served = {} if case == "fleet-all-dead" else {u: _served(u) for u in urls}
        injected: dict[str, int] = {}
        for server in servers if case != "fleet-all-dead" else ():
            for kind, n in server.fault_counts().items():
                if n:
                    injected[kind] = injected.get(kind, 0) + n
    calls = injected.pop("calls", 0)
    result = _row_counts(row_ids, outcome.responses)
    answered = {r.id: r for r in outcome.responses if r.error is None}
    per_replica: dict[str, int] = {}
    for r in answered.values():
        per_replica[str(r.replica)] = per_replica.get(str(r.replica), 0) + 1
    served_twice = sum(served.values()) - len(answered)
    if slow_ms is not None:
        extra["slow_latency_ms"] = round(slow_ms)
        extra["abandoned_at_slow"] = served.get(urls[-1], 0) - per_replica.get(urls[-1], 0)
    result.update(
        mixed=sum(1 for i, r in answered.items() if reference and reference.get(i) != r.text),
        requests_sent=outcome.sent,
        requests_resent_after_rerun=0,
        http_calls=calls,
        served_twice=served_twice,
        faults_injected=injected,
        given_up={u: engine.health.give_ups.get(u, 0) for u in urls},
        per_replica=per_replica,
        stopped=outcome.stopped,
        baseline_s=None if baseline_s is None else round(baseline_s, 2),
        wall_s=round(wall, 2),
        bound_s=ALL_DEAD_BOUND_S if baseline_s is None else round(BOUND_FACTOR * baseline_s, 2),
        **extra,
    )
    return result
