"""How many requests per second one client process sustains over N replicas (issue 20, item 7).

    python -m benchmarks.client_throughput [--requests 3000] [--replicas 1 2 4 8]
        [--backends stub sim] [--paths httpx lean aiohttp] [--profile PATH.prof] [--out PATH.json]

One `OpenAIEngine` (routing `affinity`, `max_concurrency` lanes per replica, the engine's
defaults otherwise) runs `--requests` short completions (unique ~120-character prompts, each
its own prefix group, `max_tokens=1`) against N server processes on 127.0.0.1, per backend:

- `stub`: `python -m benchmarks.client_throughput --serve-stub`, an asyncio HTTP/1.1 server
  that answers every POST with one fixed, valid completion (no parsing of the body beyond
  Content-Length, no simulation): what is left is the client's own cost per request;
- `sim`: `python -m resources.sim.server --batch-window-ms 0`, the project's simulated vLLM
  with its fastest settings (no coalescing window; the simulated engine still runs once per
  batch, on the server's CPU);

and per client path (`benchmarks.client_throughput.client_path`): `lean`, the engine as it
is (plain-http completions over its own HTTP/1.1 connections, `resources.openai.lean`),
`httpx`, every completion through httpx as before the lean path, and `aiohttp`, every
completion through aiohttp (its C HTTP parser, one `ClientSession` with a keep-alive
connector per worker task, as the lean path keeps one connection per lane): the library
candidate that could replace the hand-written path.

Per row: `requests_per_s` (requests / wall seconds of one `engine.run` of all of them, after
a short warm-up run), `client_cpu_ms_per_request` (`time.process_time` of the client process
over the run, per request: the client's own cost, whatever else loads the machine),
`client_bound_rps` (1000 / that: the rate the client would sustain on a core of its own),
`client_cpu_share` (client CPU seconds / wall seconds: near 1.0, the client's one event-loop
thread is saturated), `servers_cpu_ms_per_request` and `servers_cpu_share` (the server
processes' CPU from /proc), `costlier_side` (client or servers: which needs more CPU per
request, hence which saturates first where they share the cores), and `errors` (must be 0).
The client and every server share the machine's cores (2 here, with other work on them:
`load_avg_1min_before_after`), so `requests_per_s` is bounded by their summed CPU cost per
request, not by the client alone.

`--profile PATH.prof` adds one profiled run per client path on the stub with the largest N
(not in the rows: cProfile's own cost would distort them) and writes `PATH-<path>.prof`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.lib.client_report import write_report
from benchmarks.lib.fault_setup import healthy_base_url, stop_process
from benchmarks.lib.provenance import write_result
from resources.engine import Request
from resources.openai import attempt as openai_attempt
from resources.openai.engine import OpenAIEngine

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "client_throughput.json"
MODEL = "llama-2-7b"
_STUB_LINE = re.compile(r"stub on (http://[0-9.]+:\d+/v1)")

# -- the stub server ---------------------------------------------------------------------------

_COMPLETION = json.dumps(
    {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "text": "Yes", "finish_reason": "length", "logprobs": None}],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 1,
            "total_tokens": 31,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
).encode()
_MODELS = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]}
).encode()


def _reply(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _StubProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive: each request (headers, then Content-Length bytes) gets a fixed
    reply; POSTs the completion, GET /v1/models the model list, anything else a 404."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            line = head.split(b"\r\n", 1)[0]
            if line.startswith(b"POST"):
                out = _reply("200 OK", _COMPLETION)
            elif line.startswith(b"GET /v1/models") or line.startswith(b"GET /health"):
                out = _reply("200 OK", _MODELS)
            else:
                out = _reply("404 Not Found", b'{"error": "not found"}')
            self.transport.write(out)  # type: ignore[attr-defined]


async def _serve_stub() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_StubProtocol, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"stub on http://127.0.0.1:{port}/v1", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


class _Process:
    """A server subprocess whose base URL is read from its stderr log."""

    def __init__(self, cmd: list[str], log_path: Path, pattern: re.Pattern[str]) -> None:
        self.cmd, self.log_path, self.pattern = cmd, log_path, pattern
        self.base_url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _Process:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd} exited: {self.log_path.read_text()[-1000:]}")
            url = healthy_base_url(self.log_path, self.pattern)
            if url is not None:
                self.base_url = url
                return self
            time.sleep(0.05)
        self.__exit__()
        raise TimeoutError(f"{self.cmd} did not come up: {self.log_path.read_text()[-1000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


PATHS = ("httpx", "lean", "aiohttp")


async def _post_aiohttp(settings, client, url, body, headers):
    """`openai.attempt._post_httpx`'s contract over aiohttp: (status, reason, Retry-After,
    body), the body capped at `max_reply_bytes`; one session per worker task."""
    import aiohttp

    task = asyncio.current_task()
    session = _AIOHTTP_SESSIONS.get(task)
    if session is None:
        connector = aiohttp.TCPConnector(limit=1, keepalive_timeout=30)
        session = _AIOHTTP_SESSIONS[task] = aiohttp.ClientSession(connector=connector)
    cap = settings.config.max_reply_bytes
    try:
        async with session.post(url, json=body, headers=headers) as reply:
            data = await reply.content.read(cap + 1)
            if len(data) > cap:
                raise openai_attempt.RequestFailed(
                    f"reply body over max_reply_bytes={cap}", retryable=True
                )
            return reply.status, reply.reason or "", reply.headers.get("retry-after"), data
    except aiohttp.ClientError as exc:
        raise openai_attempt.RequestFailed(
            f"connection error: {type(exc).__name__}", retryable=True, dead=True
        ) from None


_AIOHTTP_SESSIONS: dict = {}


@contextmanager
def client_path(path: str) -> Iterator[None]:
    """`lean`: the engine as it is (plain-http completions over its own HTTP/1.1 streams);
    `httpx`: every completion through httpx, as before the lean path (what
    `openai.attempt.post_once` does for https, client auth or a proxy); `aiohttp`: every
    completion through aiohttp (`_post_aiohttp`, in place of the httpx call)."""
    if path not in PATHS:
        raise ValueError(f"unknown client path {path!r}")
    saved = openai_attempt.lean_target, openai_attempt._post_httpx
    if path != "lean":
        openai_attempt.lean_target = lambda client, url: None
    if path == "aiohttp":
        openai_attempt._post_httpx = _post_aiohttp
    try:
        yield
    finally:
        openai_attempt.lean_target, openai_attempt._post_httpx = saved
        _AIOHTTP_SESSIONS.clear()


@contextmanager
def servers(backend: str, n: int, log_dir: Path) -> Iterator[list[_Process]]:
    """N server processes of `backend` ("stub" or "sim"), stopped on exit."""
    if backend == "stub":
        cmd = [sys.executable, "-m", "benchmarks.client_throughput", "--serve-stub"]
        pattern = _STUB_LINE
    elif backend == "sim":
        cmd = [sys.executable, "-m", "resources.sim.server", "--host", "127.0.0.1", "--port",
               "0", "--model", MODEL, "--log-level", "INFO", "--batch-window-ms", "0"]  # fmt: skip
        pattern = re.compile(r"sim server on (http://[0-9.]+:\d+/v1)")
    else:
        raise ValueError(f"unknown backend {backend!r}")
    with ExitStack() as stack:
        yield [
            stack.enter_context(_Process(cmd, log_dir / f"{backend}{i}.log", pattern))
            for i in range(n)
        ]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the client --------------------------------------------------------------------------------


def short_requests(n: int) -> list[Request]:
    """`n` short unique prompts; none shares more than a few characters with another, so each
    is its own prefix group (the plan spreads them evenly)."""
    return [
        Request(
            f"r{i:06d}",
            f"{i:06d} Is this review positive? Review: a plain film, competent and quiet, "
            f"with one good scene near the end (number {i}).",
            max_tokens=1,
        )
        for i in range(n)
    ]


def measure(
    backend: str,
    n: int,
    requests: Sequence[Request],
    log_dir: Path,
    *,
    path: str = "lean",
    max_concurrency: int = 16,
    profile: Path | None = None,
) -> dict[str, object]:
    """One (backend, N, client path) row; see the module docstring."""
    with servers(backend, n, log_dir) as procs, client_path(path):
        engine = OpenAIEngine(
            ",".join(p.base_url for p in procs),
            MODEL,
            routing="affinity",
            max_concurrency=max_concurrency,
            server_style="vllm",
            probe=False,
            timeout_s=30.0,
        )
        engine.run("warm-up", list(requests[: 4 * n]))  # connections, imports, first batches
        servers_before = sum(_cpu_s(p.pid) for p in procs)
        profiler = cProfile.Profile() if profile is not None else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        result = engine.run("bench", list(requests))
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        servers_cpu = sum(_cpu_s(p.pid) for p in procs) - servers_before
    if profiler is not None and profile is not None:
        profiler.dump_stats(profile)
    count = len(requests)
    errors = [r.error for r in result.responses if r.error is not None]
    cpu_ms = 1000 * cpu / count
    return {
        "backend": backend,
        "client_path": path,
        "replicas": n,
        "requests": count,
        "max_concurrency": max_concurrency,
        "wall_s": round(wall, 3),
        "requests_per_s": round(count / wall, 1),
        "client_cpu_ms_per_request": round(cpu_ms, 3),
        "client_bound_rps": round(1000 / cpu_ms, 1) if cpu_ms else None,
        "client_cpu_share": round(cpu / wall, 3),
        "servers_cpu_ms_per_request": round(1000 * servers_cpu / count, 3),
        "servers_cpu_share": round(servers_cpu / wall, 3),
        "costlier_side": "client" if cpu > servers_cpu else "servers",
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def run(
    backends: Sequence[str],
    replicas: Sequence[int],
    num_requests: int,
    *,
    paths: Sequence[str] = PATHS,
    max_concurrency: int = 16,
    profile: Path | None = None,
) -> dict[str, object]:
    """Every (backend, N, client path) row, in that nesting order."""
    requests = short_requests(num_requests)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="client-throughput-") as tmp:
        for backend in backends:
            for n in replicas:
                for path in paths:
                    row = measure(
                        backend, n, requests, Path(tmp), path=path, max_concurrency=max_concurrency
                    )
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        if profile is not None:  # extra runs: the profiler's own cost would distort the rows
            profile.parent.mkdir(parents=True, exist_ok=True)
            for path in paths:
                measure(
                    "stub",
                    max(replicas),
                    requests,
                    Path(tmp),
                    path=path,
                    max_concurrency=max_concurrency,
                    profile=profile_path(profile, path),
                )
    return {
        "benchmark": "client_throughput",
        "command": "python -m benchmarks.client_throughput " + " ".join(sys.argv[1:]),
        "cores": os.cpu_count(),
        "load_avg_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "python": platform.python_version(),
        "requests": num_requests,
        "max_concurrency": max_concurrency,
        "rows": rows,
    }


def profile_path(profile: Path, path: str) -> Path:
    return profile.with_name(f"{profile.stem}-{path}{profile.suffix}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.client_throughput")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--backends", nargs="+", default=["stub", "sim"], choices=["stub", "sim"])
    p.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    p.add_argument("--max-concurrency", type=int, default=16)
    p.add_argument(
        "--profile", type=Path, default=None, help="cProfile output per path (stub, max N)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--report", action="store_true", help="rewrite the report from --out")
    p.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_stub:
        asyncio.run(_serve_stub())
        return 0
    if args.report:
        write_report(args.out, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    result = run(
        args.backends,
        args.replicas,
        args.requests,
        paths=args.paths,
        max_concurrency=args.max_concurrency,
        profile=args.profile,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, result)
    print(write_report(args.out, result))
    if args.profile is not None:
        for path in args.paths:
            prof = profile_path(args.profile, path)
            if prof.exists():
                print(f"\n## cProfile, {path}, stub x{max(args.replicas)}")
                pstats.Stats(str(prof)).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
