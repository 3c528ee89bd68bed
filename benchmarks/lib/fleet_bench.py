"""The core of `python -m benchmarks.fleet`: one request plan sent through each routing strategy
over N fresh sim server processes, measured from the servers' own `/metrics`.

    tables = build_tables(rows=400)  # benchmarks.lib.fleet_tables
    row = run_strategy(tables["movies"].requests, 4, "affinity", log_dir=tmp)

Tables: `benchmarks.lib.fleet_tables` (`build_tables`, `plan_table`).

Strategies (`STRATEGIES`): `round_robin`, `cache_aware` (CLI defaults), `consistent_hash` and
`power_of_two` are vllm-router policies in front of the N servers (`kv_aware` is not: see
`benchmarks/fleet.py`, `KV_AWARE`); the client is the project's
`OpenAIEngine` with the router's one URL (a fleet of one for the planner, so the three send
the same request order), `routing="router"` for `consistent_hash` (each request carries its
prefix group's `resources.openai.placement.group_key` in `X-Session-ID`). `affinity` is the
project's planner: `OpenAIEngine` with the N URLs, `routing="affinity"`.

Concurrency: the sim server coalesces the requests that arrive within its batch window into one
engine batch, so the simulated makespan depends on how many requests are in flight at once.
Every strategy keeps the same number in flight: `affinity` has `concurrency` per replica,
the router strategies `concurrency * N` at the router.

Measures (`Measured`), all from the servers' `/metrics`, scraped after the run on servers that
started cold (fresh processes per run): hit rate = sum of `vllm:prefix_cache_hits_total` /
sum of `vllm:prefix_cache_queries_total`; makespan = the largest
`llm_assets_sim:engine_time_seconds_total` (each replica's busy time on the simulated clock);
balance = max / mean of each replica's prompt + generation tokens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.lib.fault_setup import (
    _URL_LINE,
    MODEL,
    REPO_ROOT,
    SimServerProcess,
    _subprocess_env,
    healthy_base_url,
)
from benchmarks.lib.prom import scrape
from benchmarks.lib.vllm_router import router_binary, run_router
from resources.engine import Request

__all__ = [
    "KV_BLOCKS",
    "ForkServer",
    "STRATEGIES",
    "WINDOW_MS",
    "Measured",
    "fleet",
    "run_strategy",
]

STRATEGIES = ("round_robin", "cache_aware", "consistent_hash", "power_of_two", "affinity")
ROUTER_POLICY = {"round_robin": "round_robin", "cache_aware": "cache_aware",
                 "consistent_hash": "consistent_hash", "power_of_two": "power_of_two"}  # fmt: skip
"""Strategy -> vllm-router `--policy` (affinity has no router)."""
KV_BLOCKS = 984
"""KV cache per replica in 16-token blocks (15,744 tokens): what vLLM derives for Llama-2-7B
fp16 on an L4 (24 GB) at gpu_memory_utilization 0.9, and what the sim server derives itself;
passed as `--num-gpu-blocks-override` so the report states it."""
WINDOW_MS = 250.0
"""Sim server `--batch-window-ms`: a batch takes every request that arrives within this long
of its first one, and runs to completion on the simulated clock before the next batch starts
(static batches; vLLM's continuous batching would let a late request join the running batch).
A window shorter than the spread of one round of in-flight requests (the client sending 128
requests on a loaded 2-core machine, the router's own hop) cuts a round into several batches,
each paying the full decode time: the makespan then measures arrival jitter, not routing, and
it hurts the router strategies most (products, N=8, round robin: 18.6 s at 100 ms, 10.9 s at
250 ms, 12.0 s at 500 ms, 11.9 s at 1,000 ms; affinity 11.4, 11.4, 10.5, 10.5 s). 250 ms is
the shortest window past that knee; the wall time of a run grows by a window per round."""

_FORK_SERVER = r"""
import json, os, signal, sys, traceback
import resources.sim.server.__main__ as server
import resources.sim.engine  # what `build_engine` imports lazily: loaded once, here
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the servers that end
for line in sys.stdin:
    argv, log_path = json.loads(line)
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            rc = server.main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(rc)
    print(pid, flush=True)
"""
"""A process that imports the sim server once and forks one child per server asked for on
stdin (`[argv, log path]` per line; it answers the child's pid). Each child builds its engine
after the fork, in `main`, so it starts with a cold prefix cache exactly as
`python -m resources.sim.server` would, in ~0.1 s instead of ~1.5 s of imports (the benchmark
starts 228 servers)."""


class ForkServer:
    """Starts sim server processes by forking a pre-imported parent (see `_FORK_SERVER`).
    Use as a context manager; on exit every server it started is stopped, then the parent."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self.pids: set[int] = set()

    def __enter__(self) -> ForkServer:
        env = {**_subprocess_env(), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER], cwd=REPO_ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        return self

    def spawn(self, argv: Sequence[str], log_path: Path) -> int:
        """Fork one server with command-line `argv`, its stderr to `log_path`; its pid."""
        assert self._proc is not None and self._proc.stdin and self._proc.stdout
        with self._lock:
            self._proc.stdin.write(json.dumps([list(argv), str(log_path)]) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"the sim fork server exited ({self._proc.poll()})")
        pid = int(line)
        self.pids.add(pid)
        return pid

    def stop(self, pid: int, timeout_s: float = 10.0) -> None:
        """SIGTERM server `pid` and wait until it is gone (SIGKILL after `timeout_s`)."""
        if pid not in self.pids:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # ProcessLookupError once it has ended and been reaped
                time.sleep(0.02)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.pids.discard(pid)

    def __exit__(self, *exc: object) -> None:
        for pid in list(self.pids):
            self.stop(pid)
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


@dataclass
class ForkedSimServer:
    """One forked `resources.sim.server` (`base_url` ends in /v1)."""

    pid: int
    log_path: Path
    base_url: str = ""

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            url = healthy_base_url(self.log_path, _URL_LINE)
            if url is not None:
                self.base_url = url
                return
            text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            if _URL_LINE.search(text) is None and ("Traceback" in text or "error:" in text):
                raise RuntimeError(f"sim server {self.pid} failed to start: {text[-2000:]}")
            time.sleep(0.02)
        raise TimeoutError(f"sim server {self.pid} did not come up within {timeout_s:g}s")


@contextmanager
def fleet(
    n: int, *, log_dir: Path, flags: Sequence[str] = (), forks: ForkServer | None = None
) -> Iterator[list]:
    """N fresh sim server processes (each logs to `log_dir/sim<i>.log`), stopped on exit:
    forked by `forks` when given, else `python -m resources.sim.server` each
    (`SimServerProcess`, started in parallel)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if forks is not None:
        argv = ["--host", "127.0.0.1", "--port", "0", "--model", MODEL, "--log-level", "INFO",
                *flags]  # fmt: skip
        servers = []
        try:
            for i in range(n):
                log_path = log_dir / f"sim{i}.log"
                servers.append(ForkedSimServer(forks.spawn(argv, log_path), log_path))
            for server in servers:
                server.wait_ready()
            yield servers
        finally:
            with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
                list(pool.map(lambda s: forks.stop(s.pid), servers))
        return
    procs = [SimServerProcess(flags, log_path=log_dir / f"sim{i}.log") for i in range(n)]
    with ExitStack() as stack:
        for proc in procs:
            stack.callback(proc.close)
        with ThreadPoolExecutor(max_workers=n) as pool:
            for future in [pool.submit(proc.__enter__) for proc in procs]:
                future.result()
        yield procs
        with ThreadPoolExecutor(max_workers=n) as pool:  # stop them together, not one by one
            list(pool.map(lambda p: p.close(), procs))


@dataclass
class Measured:
    """One (table, N, strategy) run, read from the servers' `/metrics`."""

    strategy: str
    replicas: int
    requests: int
    answered: int
    errors: list[str]
    wall_s: float
    hits: list[float] = field(default_factory=list)
    queries: list[float] = field(default_factory=list)
    prompt_tokens: list[float] = field(default_factory=list)
    generation_tokens: list[float] = field(default_factory=list)
    engine_s: list[float] = field(default_factory=list)
    server_requests: list[float] = field(default_factory=list)
    client_cached_tokens: int = 0
    """`usage...cached_tokens` summed over the responses the client got (equals hits)."""

    @property
    def hit_rate(self) -> float:
        return sum(self.hits) / sum(self.queries) if sum(self.queries) else 0.0

    @property
    def makespan_s(self) -> float:
        return max(self.engine_s)

    @property
    def balance(self) -> float:
        tokens = [p + g for p, g in zip(self.prompt_tokens, self.generation_tokens, strict=True)]
        mean = sum(tokens) / len(tokens)
        return max(tokens) / mean if mean else 1.0

    @property
    def request_balance(self) -> float:
        """max / mean of the requests each replica served."""
        mean = sum(self.server_requests) / len(self.server_requests)
        return max(self.server_requests) / mean if mean else 1.0

    def row(self) -> dict:
        return {
            "replicas": self.replicas,
            "strategy": self.strategy,
            "hit_rate": round(self.hit_rate, 4),
            "makespan_s": round(self.makespan_s, 3),
            "balance": round(self.balance, 3),
            "request_balance": round(self.request_balance, 3),
            "requests": self.requests,
            "answered": self.answered,
            "errors": len(self.errors),
            "first_error": self.errors[0] if self.errors else None,
            "wall_s": round(self.wall_s, 2),
            "engine_s_total": round(sum(self.engine_s), 3),
            "per_replica_engine_s": [round(s, 3) for s in self.engine_s],
            "per_replica_tokens": [int(p + g) for p, g in
                                   zip(self.prompt_tokens, self.generation_tokens, strict=True)],
            "per_replica_requests": [int(r) for r in self.server_requests],
            "prompt_tokens": int(sum(self.prompt_tokens)),
            "cached_tokens": int(sum(self.hits)),
            "client_cached_tokens": self.client_cached_tokens,
        }  # fmt: skip


def _engine(urls: list[str], routing: str, concurrency: int):
    from resources.configs import OpenAIEngineConfig
    from resources.openai.engine import OpenAIEngine

    config = OpenAIEngineConfig(
        base_urls=urls,
        routing=routing,
        model=MODEL,
        max_concurrency=concurrency,
        server_style="vllm",
        timeout_s=120.0,
        request_deadline_s=600.0,
        seed=0,
    )
    return OpenAIEngine(config=config)


def run_strategy(
    requests: Sequence[Request],
    n: int,
    strategy: str,
    *,
    log_dir: Path,
    concurrency: int = 16,
    kv_blocks: int | None = KV_BLOCKS,
    window_ms: float = WINDOW_MS,
    forks: ForkServer | None = None,
    relquery: str = "fleet",
) -> Measured:
    """Send `requests` through `strategy` over `n` fresh sim servers; see the module
    docstring. `n == 1` is one server addressed directly (every strategy is the same there)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}")
    flags = ["--batch-window-ms", str(window_ms)]
    flags += ["--num-gpu-blocks-override", str(kv_blocks)] if kv_blocks else []
    log_dir.mkdir(parents=True, exist_ok=True)
    with fleet(n, log_dir=log_dir, flags=flags, forks=forks) as servers:
        urls = [s.base_url for s in servers]
        with ExitStack() as stack:
            if strategy == "affinity" or n == 1:
                engine = _engine(urls, "affinity", concurrency)
            else:
                if router_binary() is None:
                    raise RuntimeError("vllm-router is not installed (make vllm-router)")
                router = stack.enter_context(
                    run_router(urls, ROUTER_POLICY[strategy], log_path=log_dir / "router.log")
                )
                routing = "router" if strategy == "consistent_hash" else "affinity"
                engine = _engine([router], routing, concurrency * n)
            start = time.perf_counter()
            result = engine.run(relquery, list(requests))
            wall = time.perf_counter() - start
        return measured(strategy, n, requests, result.responses, wall, urls)


def measured(strategy: str, n: int, requests: Sequence[Request], responses, wall: float,
             urls: list[str]) -> Measured:  # fmt: skip
    """One row: the client's answers and each server's own counters (its `/metrics`, read
    now: call it while the servers are still up)."""
    pages = [scrape(f"{url.removesuffix('/v1')}/metrics") for url in urls]
    errors = [r.error for r in responses if r.error is not None]
    return Measured(
        strategy=strategy,
        replicas=n,
        requests=len(requests),
        answered=len(responses) - len(errors),
        errors=errors,
        wall_s=wall,
        hits=[p["vllm:prefix_cache_hits_total"] for p in pages],
        queries=[p["vllm:prefix_cache_queries_total"] for p in pages],
        prompt_tokens=[p["vllm:prompt_tokens_total"] for p in pages],
        generation_tokens=[p["vllm:generation_tokens_total"] for p in pages],
        engine_s=[p["llm_assets_sim:engine_time_seconds_total"] for p in pages],
        server_requests=[p.get("llm_assets_sim:requests_total", 0.0) for p in pages],
        client_cached_tokens=sum(r.cached_tokens for r in responses if r.error is None),
    )
