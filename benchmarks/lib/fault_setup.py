"""What every fault case shares: the seeded synthetic query (`synthetic_requests`), a sim
server subprocess (`SimServerProcess`), the client's settings and engine (`ClientSettings`,
`make_engine`), one client run over a persistent response cache (`_client_run`) and the row
accounting (`_row_counts`: answered, failed, skipped, lost). A leaf of the fault benchmarks:
`benchmarks.lib.faults` (the matrix), `hostile_faults` and `kill9` import it; it imports none of
them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llm_assets.data.movies import movie_reviews
from llm_assets.output_spec import OutputSpec
from resources.engine import EngineWrapper, Request, Response, RunResult
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import RunOutcome, run_requests

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "llama-2-7b"
INSTRUCTION = (
    "Analyze whether this movie would be suitable for kids based on the movie description "
    "and the review below. Answer Yes or No.\n"
)
_URL_LINE = re.compile(r"sim server on (http://[0-9.]+:\d+/v1)")
Log = Callable[[str], None]


@dataclass(frozen=True)
class FaultScenario:
    """One row of the matrix: how the server misbehaves, and whether the client is killed."""

    name: str
    server_flags: tuple[str, ...] = ()
    """`--fault-*` flags of `python -m resources.sim.server`."""
    kill_client: bool = False
    """Run the client as a subprocess, kill -9 it halfway, rerun it to completion."""
    description: str = ""


@dataclass(frozen=True)
class ClientSettings:
    """How the client side runs: engine retries and limits, runner chunks."""

    max_concurrency: int = 16
    """Requests in flight at once."""
    timeout_s: float = 2.0
    """Per-attempt HTTP timeout (how long a hung call is waited for)."""
    request_deadline_s: float = 30.0
    """Total time one request may take across attempts before it becomes an error row."""
    max_retries: int = 6
    """Retries per request after the first attempt."""
    initial_backoff_s: float = 0.05
    """First retry delay (doubles per retry, with jitter)."""
    max_backoff_s: float = 1.0
    """Longest retry delay."""
    chunk_size: int = 100
    """Requests per runner chunk (and cache commit)."""
    seed: int = 0
    """Seed of the synthetic rows and of the engine's backoff jitter."""
    breaker_failures: int = 8
    """Consecutive connection failures or timeouts that stop a run (the engine's default)."""


# ---------------------------------------------------------------------------------------------
# The query: a seeded movie-review table rendered into prompts


def synthetic_requests(num_rows: int, seed: int = 0) -> list[Request]:
    """`num_rows` Q2-like requests (kids-suitability, Yes/No) over the seeded review table
    `llm_assets.data.movie_reviews` (movie descriptions of ~400 characters shared by a movie's
    reviews, reviews of ~130 characters), every prompt distinct (the row number leads the
    review). Ids are `row-00000`, ... in row order."""
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    table = movie_reviews(num_rows, seed=seed)
    yes_no = OutputSpec.choice(["Yes", "No"])
    requests = []
    for row, (title, info, review) in enumerate(
        zip(table["movie_title"], table["movie_info"], table["review_content"], strict=True)
    ):
        prompt = (
            f"{INSTRUCTION}movie_title: {title}\nmovie_info: {info}\n"
            f"review_content: Review {row}: {review}"
        )
        requests.append(Request(f"row-{row:05d}", prompt, max_tokens=2, output=yes_no))
    return requests


# ---------------------------------------------------------------------------------------------
# The server as a real subprocess


def healthy_base_url(log_path: Path, pattern: re.Pattern[str] = _URL_LINE) -> str | None:
    """The base URL (ending in /v1) a server process wrote to `log_path`, once its `/health`
    answers 200; None before that."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    match = pattern.search(text)
    if match is None:
        return None
    try:
        reply = httpx.get(f"{match.group(1).removesuffix('/v1')}/health", timeout=2)
    except httpx.TransportError:
        return None
    return match.group(1) if reply.status_code == 200 else None


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate `proc` if it still runs; kill it after 10 s without exiting."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class SimServerProcess:
    """`python -m resources.sim.server --port 0 ...` in a subprocess; stderr goes to
    `log_path`; `base_url` is read from its startup log line. Use as a context manager."""

    def __init__(
        self,
        flags: Sequence[str] = (),
        *,
        log_path: Path,
        startup_timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.flags = tuple(flags)
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.base_url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SimServerProcess:
        cmd = [sys.executable, "-m", "resources.sim.server", "--host", "127.0.0.1", "--port",
               "0", "--model", MODEL, "--log-level", "INFO", *self.flags]  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                cmd,
                cwd=REPO_ROOT,
                env={**_subprocess_env(), **(self.env or {})},
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"sim server exited with {self._proc.returncode} before serving: "
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            url = healthy_base_url(self.log_path)
            if url is not None:
                self.base_url = url
                return
            time.sleep(0.05)
        raise TimeoutError(
            f"sim server did not come up within {self.startup_timeout_s:g}s; "
            f"log: {self.log_path.read_text(errors='replace')[-2000:]}"
        )

    def fault_counts(self) -> dict[str, int]:
        """The server's `GET /sim/faults` counters."""
        reply = httpx.get(f"{self.base_url.removesuffix('/v1')}/sim/faults", timeout=10)
        reply.raise_for_status()
        return reply.json()

    def close(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# One client run, in this process or in a subprocess


def make_engine(
    base_url: str, settings: ClientSettings, api_key: str | None = None
) -> OpenAIEngine:
    return OpenAIEngine(
        base_url,
        MODEL,
        api_key=api_key,
        max_concurrency=settings.max_concurrency,
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
        initial_backoff_s=settings.initial_backoff_s,
        max_backoff_s=settings.max_backoff_s,
        request_deadline_s=settings.request_deadline_s,
        breaker_failures=settings.breaker_failures,
        seed=settings.seed,
    )


class _SendLog(EngineWrapper):
    """Passes every chunk to `inner`, first calling `on_send(ids)` (what was sent)."""

    def __init__(self, inner: OpenAIEngine, on_send: Callable[[list[str]], None]) -> None:
        super().__init__(inner)
        self.on_send = on_send

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.on_send([r.id for r in requests])
        return self.inner.run(relquery_id, requests)


def _client_run(
    base_url: str,
    rows: int,
    cache_path: Path,
    settings: ClientSettings,
    on_send: Callable[[list[str]], None],
    progress: Callable[[int, int], None] | None = None,
) -> RunOutcome:
    engine = _SendLog(make_engine(base_url, settings), on_send)
    try:
        return run_requests(
            engine,
            "faults",
            synthetic_requests(rows, settings.seed),
            cache=ResponseCache(cache_path),
            chunk_size=settings.chunk_size,
            progress=progress,
        )
    finally:
        engine.close()


def _row_counts(row_ids: Sequence[str], responses: Sequence[Response]) -> dict[str, int]:
    """answered / failed / lost by matching response ids to row ids (duplicates are lost)."""
    by_id: dict[str, Response] = {}
    for r in responses:
        by_id.setdefault(r.id, r)
    answered = sum(1 for i in row_ids if i in by_id and by_id[i].error is None)
    failed = sum(1 for i in row_ids if i in by_id and by_id[i].error is not None)
    skipped = 0
    return {
        "rows_in": len(row_ids),
        "answered": answered,
        "skipped": skipped,
        "failed": failed,
        "lost": len(row_ids) - answered - skipped - failed,
    }


# ---------------------------------------------------------------------------------------------
# Scenarios


def _in_process_scenario(
    scenario: FaultScenario, rows: int, workdir: Path, settings: ClientSettings
) -> dict[str, Any]:
    cache_path = workdir / f"{scenario.name}.duckdb"
    row_ids = [f"row-{i:05d}" for i in range(rows)]
    start = time.perf_counter()
    with SimServerProcess(scenario.server_flags, log_path=workdir / f"{scenario.name}.log") as srv:
        sent_first: list[str] = []
        first = _client_run(srv.base_url, rows, cache_path, settings, sent_first.extend)
        sent_again: list[str] = []
        rerun = _client_run(srv.base_url, rows, cache_path, settings, sent_again.extend)
        counts = srv.fault_counts()
    wall = time.perf_counter() - start
    result = _row_counts(row_ids, rerun.responses)
    result.update(
        requests_sent=len(sent_first) + len(sent_again),
        requests_resent_after_rerun=len(set(sent_first) & set(sent_again)),
        first_run_failed=first.failed,
        http_calls=counts.pop("calls"),
        faults_injected=counts,
        wall_s=round(wall, 2),
    )
    return result
