"""Faults cost a replica once, and every replica is checked and named (issue 34 items 3, 4, 7).

Real HTTP servers on 127.0.0.1 (`benchmarks.lib.hostile.HostileServer`), each counting the
completion calls it saw per prompt, under a real `OpenAIEngine`:

- an answer a replica gives after it was given up is kept, never thrown away and sent again
  (DESIGN section 9: never sent twice), and a slow replica loses its queue after a bounded wait;
- one replica's answers never reset another replica's circuit breaker (one failure count per
  replica);
- a replica given up stays given up across the chunks of one engine, until its back-off;
- no replica alive (or a router with no workers) stops the run at once, in one line;
- a fleet of two deployments, or a URL listed twice, is refused before anything is sent.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest

from benchmarks.lib.hostile import HostileServer, Reply, Silent, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.openai.health import FleetHealth
from resources.response_cache import ResponseCache
from resources.runner import run_requests

MODEL = "m"


def requests(n: int) -> list[Request]:
    return [
        Request(f"r{i}", f"Movie {i % 7}: " + f"plot {i % 7} " * 30 + f"| review {i}", 2)
        for i in range(n)
    ]


class Server:
    """A HostileServer answering /models as deployment `model`, completions after `delay_s`
    (or with `status`); `calls` counts completion calls per prompt."""

    def __init__(self, delay_s: float = 0.0, status: int = 200, model: str = MODEL,
                 message: str = "boom") -> None:  # fmt: skip
        self.calls: Counter[str] = Counter()
        self.posts: Counter[str] = Counter()
        """Every POST by path: completions and the planner's /tokenize alike."""
        self.lock = threading.Lock()
        self.delay_s, self.status, self.model, self.message = delay_s, status, model, message
        self.server = HostileServer(self.script)

    def script(self, method: str, path: str, body: dict) -> Reply:
        if path.endswith("/models"):
            return Reply(body={"data": [{"id": self.model, "owned_by": "vllm"}]})
        if method != "POST":
            return Reply(404, {"error": {"message": "not found"}})
        with self.lock:
            self.posts[path] += 1
        if not path.endswith("/completions"):  # /tokenize (the planner's): no tokenizer here
            return Reply(404, {"error": {"message": "not found"}})
        if str(body.get("prompt")).startswith("Movie "):  # not another test's stray call
            with self.lock:
                self.calls[body["prompt"]] += 1
        if self.status != 200:
            return Reply(self.status, {"error": {"message": self.message}}, delay_s=self.delay_s)
        return Reply(body=completion_body(), delay_s=self.delay_s)

    def __enter__(self) -> Server:
        self.server.__enter__()
        self.url = self.server.url
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def test_a_slow_replica_loses_its_queue_and_its_late_answers_are_kept_never_resent(
    monkeypatch,
) -> None:
    # stalled after the 0.5 s floor, what it holds abandoned only after 4 x that: its answers
    # (1.2 s) arrive after it was given up, before they are abandoned
    monkeypatch.setattr("resources.openai.run.ABANDON_FACTOR", 4.0)
    reqs = requests(60)
    with Server() as fast, Server(delay_s=1.2) as slow:
        engine = OpenAIEngine(f"{fast.url},{slow.url}", MODEL, max_concurrency=2, timeout_s=10)
        started = time.monotonic()
        result = engine.run("q", reqs)
        wall = time.monotonic() - started
    assert [r.error for r in result.responses] == [None] * len(reqs)
    sent = fast.calls + slow.calls
    assert sorted(sent) == sorted(r.prompt for r in reqs)
    assert max(sent.values()) == 1, "a request was sent twice"
    by = Counter(r.replica for r in result.responses)
    assert by[slow.url] == sum(slow.calls.values()) >= 1  # its late answers were kept
    assert by[fast.url] == sum(fast.calls.values())
    assert engine.health.dead(slow.url) is not None and "stalled" in engine.health.dead(slow.url)
    # its queue moved after a bounded wait: about one slow answer, not 30 / 2 of them
    assert wall < 6.0, wall


def test_a_hung_replica_loses_what_it_holds_after_a_bounded_wait_not_its_timeout() -> None:
    reqs = requests(60)
    with Server() as fast, Server(delay_s=25.0) as hung:
        engine = OpenAIEngine(f"{fast.url},{hung.url}", MODEL, max_concurrency=2, timeout_s=30)
        started = time.monotonic()
        result = engine.run("q", reqs)
        wall = time.monotonic() - started
    assert [r.error for r in result.responses] == [None] * len(reqs)
    assert {r.replica for r in result.responses} == {fast.url}
    assert sorted(fast.calls) == sorted(r.prompt for r in reqs)
    assert 1 <= sum(hung.calls.values()) <= 2  # what it held when it stalled, abandoned
    assert wall < 6.0, wall  # about 2 x the 0.5 s stall floor, not timeout_s = 30


def test_one_replicas_answers_never_reset_another_replicas_breaker() -> None:
    reqs = requests(80)
    with Server(delay_s=0.002) as good, Server(delay_s=0.05, status=500) as bad:
        engine = OpenAIEngine(f"{good.url},{bad.url}", MODEL, max_concurrency=2,
                              breaker_failures=3, max_retries=0)  # fmt: skip
        result = engine.run("q", reqs)
    assert [r.error for r in result.responses] == [None] * len(reqs)
    assert engine.health.dead(bad.url) is not None
    # given up at its 3rd failure in a row: at most one more attempt was already in flight
    assert sum(bad.calls.values()) <= 3 + 2 - 1, bad.calls


def test_replies_bad_for_one_request_only_never_give_up_a_replica_that_answers_others():
    # every attempt of requests 3 and 5 gets a 500; each counts once, not once per retry
    def script(method: str, path: str, body: dict) -> Reply:
        if path.endswith("/models"):
            return Reply(body={"data": [{"id": MODEL, "owned_by": "vllm"}]})
        if body["prompt"].endswith(("review 3", "review 5")):
            return Reply(500, {"error": {"message": "this prompt breaks me"}})
        return Reply(body=completion_body())

    with HostileServer(script) as server:
        engine = OpenAIEngine(server.url, MODEL, max_concurrency=1, max_retries=4,
                              breaker_failures=3, initial_backoff_s=0.001)  # fmt: skip
        result = engine.run("q", requests(8))
    assert result.stopped is None
    assert [r.id for r in result.responses if r.error] == ["r3", "r5"]
    # a replica answering 500 to three different requests in a row is given up (negative)
    with Server(status=500) as bad:
        engine = OpenAIEngine(bad.url, MODEL, max_concurrency=1, max_retries=4,
                              breaker_failures=3, initial_backoff_s=0.001)  # fmt: skip
        result = engine.run("q", requests(8))
    assert "circuit breaker open after 3 attempts" in result.stopped
    assert len(bad.calls) == 3  # three requests, each given all its retries


def test_a_replica_given_up_stays_given_up_across_chunks(tmp_path) -> None:
    reqs = requests(120)
    with Server() as good, Server(status=503) as bad:
        engine = OpenAIEngine(f"{good.url},{bad.url}", MODEL, max_concurrency=2,
                              breaker_failures=2, max_retries=0)  # fmt: skip
        cache = ResponseCache(tmp_path / "c.duckdb")
        outcome = run_requests(engine, "q", reqs, cache=cache, chunk_size=20)
    assert [r.error for r in outcome.responses] == [None] * len(reqs)
    assert engine.health.give_ups == {bad.url: 1}  # once for the run, not once per chunk
    assert sum(bad.calls.values()) <= 2 + 2 - 1, bad.calls


def test_fleet_health_backs_off_exponentially_and_forgets_after_a_served_run() -> None:
    health = FleetHealth(first_backoff_s=5, max_backoff_s=12)
    health.give_up("a", "x", now=0.0)
    assert health.dead("a") == "x" and health.due(4.9) == [] and health.due(5.0) == ["a"]
    assert health.live(["a", "b"]) == ["b"]
    health.revive("a")
    health.give_up("a", "y", now=10.0)  # again without a whole run served: doubled
    assert health.due(19.9) == [] and health.due(20.0) == ["a"]
    health.revive("a")
    health.give_up("a", "z", now=30.0)  # capped
    assert health.due(41.9) == [] and health.due(42.0) == ["a"]
    health.revive("a")
    health.served_run("a")
    health.give_up("a", "w", now=50.0)  # a served run: the first back-off again
    assert health.due(55.0) == ["a"]
    with pytest.raises(ValueError, match="first=0"):
        FleetHealth(first_backoff_s=0)


def test_a_replica_given_up_is_probed_again_after_its_backoff() -> None:
    with Server() as good, Server(status=503) as bad:
        engine = OpenAIEngine(f"{good.url},{bad.url}", MODEL, max_concurrency=2,
                              breaker_failures=1, max_retries=0)  # fmt: skip
        engine.health = FleetHealth(first_backoff_s=0.3)
        engine.run("q1", requests(10))
        assert engine.health.dead(bad.url) is not None
        calls = sum(bad.calls.values())
        engine.run("q2", requests(10))  # within the back-off: nothing sent to it
        assert sum(bad.calls.values()) == calls
        bad.status = 200
        time.sleep(0.35)
        result = engine.run("q3", requests(20))
    assert engine.health.dead(bad.url) is None  # answered its probe: sent work again
    assert Counter(r.replica for r in result.responses)[bad.url] > 0


def test_probing_a_silent_replica_again_delays_a_chunk_by_at_most_the_reprobe_timeout(
    monkeypatch,
) -> None:
    monkeypatch.setattr("resources.openai.engine.REPROBE_TIMEOUT_S", 0.2)
    with Server() as good, HostileServer(lambda *_: Silent()) as silent:
        engine = OpenAIEngine(f"{good.url},{silent.url}", MODEL, timeout_s=1.5)
        engine.health = FleetHealth(first_backoff_s=0.01)
        started = time.monotonic()
        assert engine.run("q1", requests(4)).stopped is None  # the first probe: 1.5 s
        assert time.monotonic() - started >= 1.5
        time.sleep(0.05)  # its back-off has passed: probed again before the next run
        started = time.monotonic()
        result = engine.run("q2", requests(4))
        assert time.monotonic() - started < 1.0
    assert result.stopped is None and engine.health.give_ups[silent.url] == 2
    assert "timed out after 0.2s" in engine.health.dead(silent.url)


def test_no_replica_alive_stops_at_once_whatever_the_table_size() -> None:
    urls = ",".join(closed_port_url() for _ in range(3))
    engine = OpenAIEngine(urls, MODEL, max_concurrency=4)
    started = time.monotonic()
    result = engine.run("q", requests(5000))
    assert time.monotonic() - started < 5
    assert result.stopped.startswith("stopped before sending: every replica is given up")
    assert "connection error" in result.stopped and "\n" not in result.stopped
    assert all(r.error == f"not sent: {result.stopped}" for r in result.responses)


def test_a_router_with_no_workers_stops_the_run_after_one_answer() -> None:
    with Server(status=503, message="No available workers") as router:
        engine = OpenAIEngine(router.url, MODEL, max_concurrency=4, max_retries=6,
                              breaker_failures=0, routing="router")  # fmt: skip
        started = time.monotonic()
        result = engine.run("q", requests(2000))
    assert time.monotonic() - started < 5
    assert "no worker behind the server" in result.stopped
    assert sum(router.calls.values()) <= 4  # the attempts already in flight, no retries
    # a 503 without that message is an ordinary retryable failure (negative case)
    with Server(status=503, message="overloaded") as busy:
        engine = OpenAIEngine(busy.url, MODEL, max_concurrency=1, max_retries=2,
                              breaker_failures=0, initial_backoff_s=0.001)  # fmt: skip
        result = engine.run("q", requests(2))
    assert result.stopped is None and sum(busy.calls.values()) == 6


def test_a_replica_of_another_deployment_refuses_the_fleet_before_sending() -> None:
    with Server() as a, Server(model="other-model") as b:
        engine = OpenAIEngine(f"{a.url},{b.url}", MODEL)
        result = engine.run("q", requests(10))
        assert sum(a.posts.values()) + sum(b.posts.values()) == 0  # not even a /tokenize
    assert f"replica {b.url} serves vllm[other-model]" in result.stopped
    assert result.stopped.startswith("stopped before sending: replica ")
    assert "refusing the fleet" in result.stopped and "API key" not in result.stopped
    assert engine.identity.startswith("refused fleet")  # never one deployment's cache key
    with Server() as a, Server() as b:  # negative: one deployment is served
        engine = OpenAIEngine(f"{a.url},{b.url}", MODEL)
        assert engine.run("q", requests(10)).stopped is None
        assert engine.identity == f"vllm[{MODEL}];completions"


def test_a_replica_listed_twice_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"lists the replica 'http://a:8000/v1' more than once"):
        OpenAIEngine("http://a:8000/v1,http://b:8000/v1,http://A:8000/v1/", MODEL)
    OpenAIEngine("http://a:8000/v1,http://a:8001/v1", MODEL)  # two ports: two replicas
