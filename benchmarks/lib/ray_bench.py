"""The core of `python -m benchmarks.ray_blocks`: one planned table sent through Ray Data over N
fresh sim servers, blocks cut Ray's way or at prefix groups, measured from the servers'
`/metrics` exactly as `benchmarks.lib.fleet_bench` measures the fleet client's routing.

- `run_ray(requests, n, block_by, log_dir=...)`: `resources.ray_executor.execute_on_ray` on
  the Ray cluster this process has joined, over `n` fresh servers started with the fleet
  benchmark's flags (`--batch-window-ms 250`, `--num-gpu-blocks-override 984`), `concurrency`
  requests in flight per replica actor (the fleet client's per-replica concurrency);
- `run_kill(requests, n, log_dir=..., cache_path=...)`: the runner's path
  (`resources.runner.run_requests` over `RayFleetEngine`, a persistent `ResponseCache`), one
  replica actor's process killed with SIGKILL once `kill_at` of the requests are committed;
  then the same run again over the same cache. Counts what the servers computed
  (`llm_assets_sim:requests_total`) against what the table needs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.fault_setup import MODEL, _row_counts
from benchmarks.lib.fleet_bench import KV_BLOCKS, WINDOW_MS, ForkServer, fleet, measured
from benchmarks.lib.prom import scrape
from resources.configs import OpenAIEngineConfig, RayEngineConfig
from resources.engine import Request
from resources.ray_executor.blocks import block_groups_split

__all__ = ["FLAGS", "run_kill", "run_ray"]

FLAGS = ("--batch-window-ms", str(WINDOW_MS), "--num-gpu-blocks-override", str(KV_BLOCKS))
"""The fleet benchmark's sim server flags (see `benchmarks.lib.fleet_bench`)."""


def _client(urls: list[str], concurrency: int) -> dict[str, Any]:
    return {"base_urls": urls, "model": MODEL, "max_concurrency": concurrency,
            "server_style": "vllm", "timeout_s": 120.0, "request_deadline_s": 600.0,
            "seed": 0}  # fmt: skip


def run_ray(
    requests: Sequence[Request],
    n: int,
    block_by: str,
    *,
    log_dir: Path,
    concurrency: int = 16,
    block_rows: int | None = None,
    commit_every: int | None = None,
    name: str | None = None,
    forks: ForkServer | None = None,
) -> dict[str, Any]:
    """One Ray Data run of `requests` over `n` fresh servers; the `Measured` row (strategy
    `name`, default `ray_<block_by>`) plus the blocks Ray ran (count, largest, prefix groups
    split across blocks) and requests sent per actor."""
    from resources.ray_executor.executor import execute_on_ray

    with fleet(n, log_dir=log_dir, flags=FLAGS, forks=forks) as servers:
        urls = [s.base_url for s in servers]
        config = OpenAIEngineConfig(**_client(urls, concurrency))
        start = time.perf_counter()
        run = execute_on_ray(requests, config, block_by=block_by, block_rows=block_rows,
                             relquery_id="ray_blocks", commit_every=commit_every)  # fmt: skip
        wall = time.perf_counter() - start
        responses = run.result.responses
        row_of = measured(name or f"ray_{block_by}", n, requests, responses, wall, urls)
    row = row_of.row()
    prompts = [r.prompt for r in requests]
    row.update(
        blocks=len(run.blocks),
        block_rows_max=max(len(b) for b in run.blocks),
        groups_split=block_groups_split(prompts, run.blocks),
        actor_sent=run.sent,
        commit_every=commit_every or 2 * concurrency,
        rows_per_s_wall=round(len(requests) / wall, 2),
        rows_per_s_sim=round(len(requests) / row_of.makespan_s, 2),
    )
    return row


def run_kill(
    requests: Sequence[Request],
    n: int,
    *,
    log_dir: Path,
    cache_path: Path,
    concurrency: int = 16,
    kill_at: float = 0.4,
    commit_every: int | None = None,
    forks: ForkServer | None = None,
) -> dict[str, Any]:
    """The worker-kill case (see the module docstring): rows lost, requests the servers
    computed vs the requests needed, what the rerun over the cache sent."""
    from resources.ray_executor.engine import RayFleetEngine
    from resources.response_cache import ResponseCache
    from resources.runner import run_requests

    killed: dict[str, Any] = {}

    def killer(ledger: Any) -> None:
        import ray

        def watch() -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                committed = ray.get(ledger.summary.remote())["committed"]
                if committed >= kill_at * len(requests):
                    pid = ray.get(ledger.pids.remote())[0][-1]
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, committed_at_kill=committed)
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()

    with fleet(n, log_dir=log_dir, flags=FLAGS, forks=forks) as servers:
        urls = [s.base_url for s in servers]
        fields = {**_client(urls, concurrency), "ray_commit_every": commit_every}
        engine = RayFleetEngine(config=RayEngineConfig(**fields))
        engine.on_ledger = killer
        cache = ResponseCache(cache_path)
        start = time.perf_counter()
        first = run_requests(engine, "ray_kill", requests, cache=cache,
                             chunk_size=len(requests))  # fmt: skip
        wall = time.perf_counter() - start
        pids = engine.last_run.pids if engine.last_run else []
        computed = sum(scrape(f"{u.removesuffix('/v1')}/metrics").get(
            "llm_assets_sim:requests_total", 0.0) for u in urls)  # fmt: skip
        engine.on_ledger = None
        again = run_requests(engine, "ray_kill", requests, cache=cache, chunk_size=len(requests))
        computed_after = sum(scrape(f"{u.removesuffix('/v1')}/metrics").get(
            "llm_assets_sim:requests_total", 0.0) for u in urls)  # fmt: skip
        engine.close()
    counts = _row_counts([r.id for r in requests], first.responses)
    return {
        "replicas": n,
        **counts,
        "killed_pid": killed.get("pid"),
        "committed_at_kill": killed.get("committed_at_kill"),
        "actor_pids_per_replica": pids,
        "requests_needed": len(requests),
        "server_computed": int(computed),
        "computed_twice": int(computed) - len(requests),
        "rerun_sent": again.sent,
        "rerun_cache_hits": again.cache_hits,
        "server_computed_after_rerun": int(computed_after),
        "commit_every": commit_every or 2 * concurrency,
        "wall_s": round(wall, 2),
    }
