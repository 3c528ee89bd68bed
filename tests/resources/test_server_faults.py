"""Fault injection in the sim server, and the OpenAI engine surviving it (real loopback HTTP)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from llm_assets.output_spec import OutputSpec
from resources.engine import EngineWrapper, LLMEngine, Request, RunResult
from resources.openai.engine import OpenAIEngine
from resources.sim.engine import SimulatedEngine
from resources.sim.server import FaultConfig, FaultInjector, ServerConfig, SimServer
from tests.conftest import terminate_cleanly

MODEL = "llama-2-7b"
REPO = Path(__file__).resolve().parents[2]


def sim_engine() -> LLMEngine:
    return SimulatedEngine(gpu="L4", model=MODEL)


class Tap(EngineWrapper):
    """Counts the requests that reach the engine."""

    def __init__(self, inner: LLMEngine) -> None:
        super().__init__(inner)
        self.seen: list[str] = []

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.seen.extend(r.prompt for r in requests)
        return self.inner.run(relquery_id, requests)


def workload(n: int) -> list[Request]:
    head = "Is the review of this movie positive? Answer Yes or No.\n" * 4
    return [
        Request(f"w{i}", f"{head}Review {i}: {'good' if i % 2 else 'dull'} film.", 2,
                OutputSpec.choice(["Yes", "No"]))
        for i in range(n)
    ]  # fmt: skip


def engine_for(url: str, **kwargs: object) -> OpenAIEngine:
    settings: dict = {"initial_backoff_s": 0.005, "max_backoff_s": 0.02, "seed": 0,
                      "max_retries": 8, "timeout_s": 5.0}  # fmt: skip
    settings.update(kwargs)
    return OpenAIEngine(url, MODEL, **settings)


def serve(faults: FaultConfig, engine: LLMEngine | None = None) -> SimServer:
    config = ServerConfig(served_model_name=MODEL, batch_window_s=0.001, faults=faults)
    return SimServer(engine or sim_engine(), config=config)


# -- the configuration --------------------------------------------------------------------------


def test_fault_config_validates_and_names_the_bad_value() -> None:
    assert not FaultConfig().enabled and FaultConfig(latency_ms=1).enabled
    with pytest.raises(ValueError, match="rate must be in \\[0, 1\\], got 1.5"):
        FaultConfig(rate=1.5)
    with pytest.raises(ValueError, match="sum to at most 1, got 1.2"):
        FaultConfig(rate=0.6, drop_rate=0.6)
    with pytest.raises(ValueError, match="400-599, got 200"):
        FaultConfig(rate=0.1, status=200)
    with pytest.raises(ValueError, match="latency_ms=-1"):
        FaultConfig(latency_ms=-1)


def test_draws_are_seeded_disjoint_and_near_their_rates() -> None:
    config = FaultConfig(rate=0.1, hang_rate=0.05, drop_rate=0.05, malformed_rate=0.05, seed=3)
    a, b = FaultInjector(config), FaultInjector(config)
    draws = [a.draw()[0] for _ in range(4000)]
    assert draws == [b.draw()[0] for _ in range(4000)]
    counts = a.snapshot()
    assert counts["calls"] == 4000
    for kind, rate in (("status", 0.1), ("hang", 0.05), ("drop", 0.05), ("malformed", 0.05)):
        assert abs(counts[kind] / 4000 - rate) < 0.02, counts
    assert draws.count(None) == 4000 - sum(
        counts[k] for k in ("status", "hang", "drop", "malformed")
    )
    jittered = FaultInjector(FaultConfig(latency_ms=10, latency_jitter_ms=20))
    delays = [jittered.draw()[1] for _ in range(200)]
    assert all(0.010 <= d <= 0.030 for d in delays) and max(delays) - min(delays) > 0.01


# -- what the wire shows ------------------------------------------------------------------------


def post(url: str, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{url}/completions", json={"prompt": "hello", "max_tokens": 1}, timeout=5,
                      **kwargs)  # fmt: skip


@pytest.mark.parametrize("status", [429, 500, 503])
def test_status_faults_are_openai_shaped_and_never_reach_the_engine(status: int) -> None:
    tap = Tap(sim_engine())
    with serve(FaultConfig(rate=1.0, status=status), tap) as server:
        reply = post(server.base_url)
        assert reply.status_code == status
        assert "injected fault" in reply.json()["error"]["message"]
        assert httpx.get(f"{server.url}/health").status_code == 200  # routes other than
        assert httpx.get(f"{server.base_url}/models").status_code == 200  # completions: no fault
        assert httpx.get(f"{server.url}/sim/faults").json()["status"] == 1
    assert tap.seen == []


def test_malformed_replies_are_200_with_invalid_json() -> None:
    tap = Tap(sim_engine())
    with serve(FaultConfig(malformed_rate=1.0), tap) as server:
        reply = post(server.base_url)
    assert reply.status_code == 200
    with pytest.raises(ValueError):
        reply.json()
    assert tap.seen == []


def test_dropped_replies_end_mid_body() -> None:
    tap = Tap(sim_engine())
    with serve(FaultConfig(drop_rate=1.0), tap) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            post(server.base_url)
        # raw socket: status line and headers came, then half the body, then EOF
        host, port = server.host, server.port
        body = b'{"prompt": "x"}'
        with socket.create_connection((host, port), timeout=5) as sock:
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            sock.sendall(head % len(body) + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    head, _, partial = data.partition(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                 .split(b":")[1])  # fmt: skip
    assert head.startswith(b"HTTP/1.1 200") and 0 < len(partial) < length
    assert tap.seen == []


def test_hung_calls_answer_nothing_until_the_client_gives_up() -> None:
    with serve(FaultConfig(hang_rate=1.0, max_hang_s=30)) as server:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.base_url}/completions", json={"prompt": "x"}, timeout=0.3)
        assert time.monotonic() - started < 2
    # closing the server lets hung handlers go (the context exit above returned promptly)


def test_latency_delays_every_completion_call() -> None:
    with serve(FaultConfig(latency_ms=150)) as server:
        started = time.monotonic()
        assert post(server.base_url).status_code == 200
        assert time.monotonic() - started >= 0.15


# -- the engine against every fault -------------------------------------------------------------


@pytest.mark.parametrize(
    "faults",
    [
        FaultConfig(rate=0.3, status=503, seed=1),
        FaultConfig(rate=0.3, status=429, seed=2),
        FaultConfig(drop_rate=0.3, seed=3),
        FaultConfig(malformed_rate=0.3, seed=4),
        FaultConfig(hang_rate=0.1, seed=5),
        FaultConfig(
            rate=0.1, drop_rate=0.1, malformed_rate=0.1, latency_ms=5, latency_jitter_ms=10, seed=6
        ),  # fmt: skip
    ],
    ids=["503", "429", "drop", "malformed", "hang", "mixed"],
)
def test_the_engine_answers_every_request_and_faults_do_not_touch_the_accounting(
    faults: FaultConfig,
) -> None:
    requests = workload(24)
    tap = Tap(sim_engine())
    with serve(faults, tap) as server:
        engine = engine_for(server.base_url, max_concurrency=1, timeout_s=0.3)
        result = engine.run("faults", requests)
        engine.close()
        injected = server.app.faults.snapshot()
    assert [r.id for r in result.responses] == [r.id for r in requests]
    assert all(r.ok for r in result.responses), [r.error for r in result.responses if r.error]
    assert sum(v for k, v in injected.items() if k != "calls") > 0, injected
    # each request reached the engine exactly once: faulted attempts never did
    assert sorted(tap.seen) == sorted(r.prompt for r in requests)
    # and the token accounting equals a clean in-process run, one request per call
    reference = sim_engine()
    expected = [reference.run("faults", [r]).responses[0] for r in requests]
    got = [(r.prompt_tokens, r.cached_tokens) for r in result.responses]
    assert got == [(r.prompt_tokens, r.cached_tokens) for r in expected]


def test_always_failing_server_gives_error_rows_naming_the_last_status() -> None:
    with serve(FaultConfig(rate=1.0, status=503)) as server:
        engine = engine_for(server.base_url, max_retries=2, breaker_failures=0)
        result = engine.run("q", workload(3))
    assert [r.id for r in result.responses] == ["w0", "w1", "w2"]
    for r in result.responses:
        assert r.error == "failed after 3 attempts: HTTP 503: injected fault: HTTP 503"
    assert result.stats.errors == 3


def test_a_server_answering_only_5xx_is_given_up_by_the_breaker_and_the_run_stops() -> None:
    # a 5xx is an attempt without an answer, like no reply: it counts toward the breaker
    with serve(FaultConfig(rate=1.0, status=500)) as server:
        engine = engine_for(server.base_url, max_retries=5, breaker_failures=4)
        result = engine.run("q", workload(40))
        calls = server.app.faults.counts["calls"]
    assert result.stopped is not None and "circuit breaker open after 4 attempts" in result.stopped
    assert all("HTTP 500" in (r.error or "") for r in result.responses)
    assert calls < 40  # not every row retried with backoff


def test_request_deadline_turns_a_hanging_request_into_an_error_row() -> None:
    with serve(FaultConfig(hang_rate=1.0, max_hang_s=30)) as server:
        engine = engine_for(server.base_url, timeout_s=10.0, max_retries=50,
                            request_deadline_s=0.6)  # fmt: skip
        started = time.monotonic()
        result = engine.run("q", workload(2))
        elapsed = time.monotonic() - started
        engine.close()
    assert elapsed < 3.0  # the deadline, not 50 retries of a 10 s timeout
    for r in result.responses:
        assert r.error is not None
        assert "within the request deadline of 0.6s" in r.error and "timed out" in r.error


def test_deadline_stops_retries_whose_backoff_would_overrun_it() -> None:
    with serve(FaultConfig(rate=1.0, status=500)) as server:
        engine = engine_for(server.base_url, initial_backoff_s=0.2, max_backoff_s=5.0,
                            max_retries=20, request_deadline_s=1.0)  # fmt: skip
        started = time.monotonic()
        (response,) = engine.run("q", workload(1)).responses
    assert time.monotonic() - started < 1.5
    assert response.error and response.error.startswith("failed after ")
    assert "within the request deadline of 1s: HTTP 500" in response.error
    with pytest.raises(ValueError, match="request_deadline_s=0: Input should be greater than 0"):
        OpenAIEngine("http://h/v1", "m", request_deadline_s=0)
    with pytest.raises(ValueError, match="request_deadline_s=inf: Input should be a finite"):
        OpenAIEngine("http://h/v1", "m", request_deadline_s=float("inf"))


# -- the command line ---------------------------------------------------------------------------


def test_fault_flags_on_the_command_line(tmp_path: Path) -> None:
    sim_engine()
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "resources.sim.server", "--port", "0", "--fault-rate", "1",
           "--fault-status", "429", "--fault-latency-ms", "1", "--fault-seed", "7"]  # fmt: skip
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stderr=err, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            for line in log.read_text().splitlines():
                if "sim server on " in line:
                    url = line.split("sim server on ")[1].split()[0]
            time.sleep(0.05)
        reply = httpx.post(f"{url}/completions", json={"prompt": "x"}, timeout=10)
        assert reply.status_code == 429
        assert httpx.get(f"{url.removesuffix('/v1')}/sim/faults", timeout=5).json() == {
            "calls": 1, "status": 1, "hang": 0, "drop": 0, "malformed": 0
        }  # fmt: skip
    finally:
        terminate_cleanly(proc)  # the server shuts down cleanly and exits 0
    bad = subprocess.run(
        [sys.executable, "-m", "resources.sim.server", "--fault-rate", "0.7",
         "--fault-drop-rate", "0.7"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "sum to at most 1, got 1.4" in bad.stderr
