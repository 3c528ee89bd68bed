"""One OpenAI engine over a fleet of sim servers (issue 20): affinity keeps each prefix group
on one replica (the fleet's hit rate stays that of one server, round robin's does not), a
replica that dies mid-run has its work moved to the others (no row lost, a rerun sends
nothing), and a fleet with no replica left stops with a reason on every unanswered row.

Servers are in-thread `SimServer`s on 127.0.0.1; hit rates are read from their own
`GET /metrics` (vLLM's `prefix_cache_hits` / `prefix_cache_queries` counters)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from benchmarks.lib.prom import scrape
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import run_requests
from resources.sim.engine import SimulatedEngine
from resources.sim.server import ServerConfig, SimServer

MODEL = "llama-2-7b"
MOVIES = 12
REVIEWS = 8


def plan() -> list[Request]:
    """A GGR-ordered plan: per movie a long shared block (~150 tokens), then short reviews."""
    out = []
    for m in range(MOVIES):
        movie = f"Movie {m}: " + " ".join(f"plot{m}-{w}" for w in range(70))
        for r in range(REVIEWS):
            prompt = f"Is the review positive? {movie} | review {m}.{r}: " + "fine " * 12
            out.append(Request(f"{m}.{r}", prompt, max_tokens=2))
    return out


@contextmanager
def fleet(n: int) -> Iterator[list[SimServer]]:
    config = ServerConfig(served_model_name=MODEL, batch_window_s=0.001)
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                SimServer(SimulatedEngine(gpu="L4", model=MODEL, policy="vllm-v1"), config=config)
            )
            for _ in range(n)
        ]
        yield servers


def hit_rate(servers: list[SimServer]) -> float:
    pages = [scrape(f"{s.url}/metrics") for s in servers]
    hits = sum(p["vllm:prefix_cache_hits_total"] for p in pages)
    return hits / sum(p["vllm:prefix_cache_queries_total"] for p in pages)


def engine(servers: list[SimServer], **fields) -> OpenAIEngine:
    urls = ",".join(s.base_url for s in servers)
    return OpenAIEngine(urls, MODEL, max_concurrency=2, **fields)


def served(servers: list[SimServer]) -> list[float]:
    return [scrape(f"{s.url}/metrics")["llm_assets_sim:requests_total"] for s in servers]


def test_affinity_keeps_the_hit_rate_of_one_server_and_round_robin_does_not() -> None:
    requests = plan()
    rates = {}
    for name, n, routing in (("one", 1, "affinity"), ("affinity", 3, "affinity"),
                             ("round_robin", 3, "round_robin")):  # fmt: skip
        with fleet(n) as servers:
            result = engine(servers, routing=routing).run("q", requests)
            assert [r.error for r in result.responses] == [None] * len(requests)
            assert [r.id for r in result.responses] == [r.id for r in requests]
            rates[name] = hit_rate(servers)
            # the project's cached tokens are the servers' own counters
            pages = [scrape(f"{s.url}/metrics") for s in servers]
            assert result.stats.cached_tokens == sum(
                p["vllm:prefix_cache_hits_total"] for p in pages
            )
            if n > 1:
                counts = served(servers)
                assert all(c > 0 for c in counts), counts  # every replica worked
                assert sum(counts) == len(requests)
    assert rates["affinity"] >= 0.97 * rates["one"], rates
    assert rates["round_robin"] < rates["affinity"] - 0.2, rates


def test_a_replica_that_dies_mid_run_has_its_work_moved_and_no_row_is_lost(tmp_path) -> None:
    requests = plan()
    cache = ResponseCache(tmp_path / "cache.duckdb")
    with fleet(3) as servers:
        victim = servers[1]
        killed = threading.Event()

        def progress(done: int, total: int) -> None:
            if done >= len(requests) // 4 and not killed.is_set():
                killed.set()
                threading.Thread(target=victim.close, daemon=True).start()

        fleet_engine = engine(servers, breaker_failures=2, max_retries=1,
                              initial_backoff_s=0.01, progress=progress)  # fmt: skip
        outcome = run_requests(fleet_engine, "q", requests, cache=cache, chunk_size=1000)
        assert killed.is_set()
        errors = [r.error for r in outcome.responses if r.error is not None]
        assert errors == [], errors[:3]
        assert outcome.stopped is None
        survivors = served([servers[0], servers[2]])
        assert sum(survivors) > len(requests) * 3 // 4  # they took over the dead one's share
        # a rerun sends nothing: every answer was committed
        rerun = run_requests(engine([servers[0], servers[2]]), "q", requests, cache=cache)
        assert rerun.sent == 0
        assert [r.text for r in rerun.responses] == [r.text for r in outcome.responses]


def test_with_no_replica_left_every_unanswered_row_fails_with_the_reason() -> None:
    requests = plan()
    with fleet(2) as servers:
        for server in servers:
            server.close()
        result = engine(servers, breaker_failures=1, max_retries=0, probe=False).run("q", requests)
    assert result.stopped is not None and result.stopped.startswith("every replica failed")
    # each row says why: its own failure, or that the run stopped before it was sent
    for r in result.responses:
        assert "connection error" in r.error or r.error == f"not sent: {result.stopped}"


@pytest.mark.parametrize("routing", ["affinity", "round_robin"])
def test_one_url_is_a_fleet_of_one(routing: str) -> None:
    with fleet(1) as servers:
        result = engine(servers, routing=routing).run("q", plan()[:10])
    assert all(r.error is None for r in result.responses)
