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

The product-path cases go through Dagster in process on the sim engine, and check each result
row against what its own source holds, so they add `mixed`: result rows that are not their
source's, or whose text differs from what was written (must be 0, like `lost`):
`concurrent-runs` (2 runs) and `concurrent-runs-5` (5 runs of distinct sizes, one shared
instance, one kept version per table) of q1's lineage at once on one home
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
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.lib.bounded_input import BOUNDED_INPUT_CASES, bounded_input_case
from benchmarks.lib.hostile_faults import HOSTILE_CASES, run_hostile_case
from llm_assets.data.movies import movie_reviews
from llm_assets.output_spec import OutputSpec
from resources.engine import EngineWrapper, Request, Response, RunResult
from resources.openai_engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import RunOutcome, run_requests

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
FAULT_MATRIX += (
    FaultScenario(
        "concurrent-runs", description="two runs of q1's lineage at once on one home (Dagster)"
    ),
    FaultScenario(
        "concurrent-runs-5",
        description="five runs of q1's lineage at once, distinct sizes, one kept version",
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
PRODUCT_CASES: tuple[str, ...] = ("concurrent-runs", "concurrent-runs-5", "stray-byte",
                                  "half-written")  # fmt: skip
"""The cases that check result rows against their source (they report `mixed`)."""
SMOKE_FAULTS: tuple[str, ...] = ("none", "503", "hang", "drop", "malformed", "kill9")
"""The scenarios of `smoke=True` (the test suite's version)."""
FAULT_MATRIX += tuple(  # the hostile files (`benchmarks.lib.bounded_input`)
    FaultScenario(name, description=what) for name, what in BOUNDED_INPUT_CASES.items()
)


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
