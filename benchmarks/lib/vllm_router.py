"""vllm-router (PyPI `vllm-router`, a Rust router in a manylinux wheel) in front of sim servers.

    with sim_servers(2, log_dir=tmp) as servers:
        with run_router([s.base_url for s in servers], "consistent_hash") as base_url:
            httpx.post(f"{base_url}/completions", json=..., headers={ROUTING_HEADER: "group-7"})

`run_router` starts `vllm-router --host 127.0.0.1 --port P --worker-urls URL... --policy POLICY`
on a free loopback port and yields its base URL ending in `/v1`; `sim_servers` starts N
`python -m resources.sim.server --port 0` processes (`benchmarks.lib.fault_setup.SimServerProcess`).

What vllm-router 0.1.17 asks of its workers (checked against the sim server, which answers
`/health`, `/v1/models`, `/v1/completions`, `/v1/chat/completions`):

- every policy: `GET /health` (startup and every `--health-check-interval-secs`);
- `consistent_hash`: nothing more. The key is the first non-empty header of `x-session-id`,
  `x-user-id`, `x-tenant-id`, `x-correlation-id`, `x-request-id`, `x-trace-id`
  (`ROUTING_HEADER` is the first); without one it is the prompt text (`request:<text>`, or a
  hash of it past 100 characters): a body `user` field is not read on `/v1/completions`;
- `cache_aware` and `kv_aware`: `POST /tokenize` and `POST /v1/completions/render` per request
  (404 here: the router falls back to routing on text); `kv_aware` also `GET /get_server_info`
  and `GET /kv_event_sources` (404 here: no KV-event subscribers, it degrades to least load);
- `power_of_two`: `GET /get_load` every `--worker-startup-check-interval` seconds (404 here).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from benchmarks.lib.fault_setup import SimServerProcess

__all__ = [
    "POLICIES",
    "ROUTING_HEADER",
    "completion_calls",
    "router_binary",
    "run_router",
    "sim_servers",
]

POLICIES = ("round_robin", "random", "cache_aware", "consistent_hash", "power_of_two", "kv_aware")
ROUTING_HEADER = "X-Session-ID"
"""The header vllm-router's `consistent_hash` reads first (then x-user-id, x-tenant-id, ...)."""


def router_binary() -> str | None:
    """Path of the `vllm-router` launcher beside this interpreter, else on PATH; None when the
    wheel is not installed (`make vllm-router` installs the pinned one)."""
    beside = Path(sys.executable).parent / "vllm-router"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm-router")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _option_flags(options: dict[str, object]) -> list[str]:
    """`cache_threshold=0.5` -> `--cache-threshold 0.5`; `True` -> the bare flag; `False`/None
    -> nothing."""
    flags: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags.extend([flag, str(value)])
    return flags


def _tail(path: Path, lines: int = 5) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the router colours its log lines
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


@contextmanager
def run_router(
    worker_urls: Sequence[str],
    policy: str = "consistent_hash",
    *,
    log_path: Path | None = None,
    startup_timeout_s: float = 30.0,
    log_level: str = "warning",
    **policy_options: object,
) -> Iterator[str]:
    """Run vllm-router in front of `worker_urls` (a trailing `/v1` is dropped) and yield its
    base URL, `http://127.0.0.1:PORT/v1`, once its `/health` answers 200.

    Invariants: the router and its Prometheus listener bind fresh loopback ports (two routers
    never share the default 29000); on exit the process is gone (SIGTERM, then SIGKILL after
    10 s). `policy_options` become flags (`balance_abs_threshold=8` ->
    `--balance-abs-threshold 8`). Raises RuntimeError naming the binary and the last log lines
    when it is missing, exits, or is not healthy soon after `startup_timeout_s` (the router's own
    `--worker-startup-timeout-secs`: a worker that never answers `/health` stops it).
    """
    binary = router_binary()
    if binary is None:
        raise RuntimeError("vllm-router is not installed (run `make vllm-router`)")
    roots = [url.rstrip("/").removesuffix("/v1") for url in worker_urls]
    port = _free_port()
    cmd = [binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *roots,
           "--policy", policy, "--prometheus-port", str(_free_port()),
           "--worker-startup-timeout-secs", str(math.ceil(startup_timeout_s)),
           "--worker-startup-check-interval", "1", "--log-level", log_level,
           *_option_flags(policy_options)]  # fmt: skip
    with ExitStack() as stack:
        if log_path is None:
            log_path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "router.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            # the router gives up on unhealthy workers by itself (and says so) within the limit
            root = f"http://127.0.0.1:{port}"
            _wait_healthy(proc, binary, root, log_path, startup_timeout_s + 5)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            _stop(proc)


def _wait_healthy(
    proc: subprocess.Popen[bytes], binary: str, root: str, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{binary} exited with {proc.returncode} before serving: {_tail(log_path)}"
            )
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(
        f"{binary} did not answer {root}/health within {timeout_s:g}s: {_tail(log_path)}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def sim_servers(
    n: int, *, log_dir: Path, flags: Sequence[str] = ()
) -> Iterator[list[SimServerProcess]]:
    """N `python -m resources.sim.server --port 0` processes on 127.0.0.1, each logging to
    `log_dir/sim<i>.log`; `server.base_url` ends in `/v1`. All are stopped on exit."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(SimServerProcess(flags, log_path=log_dir / f"sim{i}.log"))
            for i in range(n)
        ]


def completion_calls(servers: Sequence[SimServerProcess]) -> list[int]:
    """Completion calls each server has received so far (`GET /sim/faults` -> `calls`)."""
    return [server.fault_counts()["calls"] for server in servers]
