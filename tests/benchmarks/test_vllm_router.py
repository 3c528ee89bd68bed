"""An existing router: vllm-router's `consistent_hash` in front of two sim server processes.

Skipped (one line) unless the `vllm-router` wheel is installed: `make vllm-router` (`.ci/run`
does it). Which server answered is read from each server's own completion counter
(`GET /sim/faults`) before and after each key's requests. Asserted: every request is answered,
the requests of one routing key (`X-Session-ID`) all land on one worker, and the keys use both
workers.
"""

import httpx
import pytest

from benchmarks.lib.vllm_router import (
    ROUTING_HEADER,
    completion_calls,
    router_binary,
    run_router,
    sim_servers,
)

pytestmark = pytest.mark.slow  # servers in subprocesses: `make test-slow`

if router_binary() is None:
    pytest.skip("vllm-router is not installed (make vllm-router)", allow_module_level=True)

KEYS = [f"group-{i}" for i in range(16)]  # all on one worker by chance: 2 * 2**-16
REQUESTS_PER_KEY = 3


def _complete(client: httpx.Client, key: str, row: int) -> None:
    body = {"model": "llama-2-7b", "prompt": f"{key} row {row}", "max_tokens": 2}
    reply = client.post("/completions", json=body, headers={ROUTING_HEADER: key})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"]


def test_consistent_hash_pins_each_routing_key_to_one_worker(tmp_path):
    worker_of: dict[str, int] = {}
    with sim_servers(2, log_dir=tmp_path) as servers:
        urls = [server.base_url for server in servers]
        with (
            run_router(urls, "consistent_hash", log_path=tmp_path / "router.log") as base_url,
            httpx.Client(base_url=base_url, timeout=30) as client,
        ):
            for key in KEYS:
                before = completion_calls(servers)
                for row in range(REQUESTS_PER_KEY):
                    _complete(client, key, row)
                deltas = [a - b for a, b in zip(completion_calls(servers), before, strict=True)]
                assert sorted(deltas) == [0, REQUESTS_PER_KEY], (key, deltas)  # one worker
                worker_of[key] = deltas.index(REQUESTS_PER_KEY)
    assert set(worker_of.values()) == {0, 1}, worker_of  # the keys spread over both workers


def test_the_engine_through_the_router_keeps_each_prefix_group_on_one_worker(tmp_path):
    """`routing: router`: one URL (vllm-router), the group key in `X-Session-ID`; with
    `consistent_hash` every row is answered and the fleet's hit rate (each server's own
    `/metrics`) is one server's and beats the same router's `round_robin`, which scatters the
    groups."""
    from benchmarks.lib.prom import scrape
    from resources.openai.engine import OpenAIEngine
    from tests.resources.test_openai_fleet import MODEL, fleet, hit_rate, plan

    requests = plan()
    rates = {}
    for policy in ("consistent_hash", "round_robin"):
        with sim_servers(2, log_dir=tmp_path / policy) as servers:
            log = tmp_path / f"{policy}.log"
            with run_router([s.base_url for s in servers], policy, log_path=log) as base_url:
                engine = OpenAIEngine(base_url, MODEL, routing="router", max_concurrency=4)
                result = engine.run("q", requests)
            assert [r.error for r in result.responses] == [None] * len(requests)
            pages = [scrape(f"{s.base_url.removesuffix('/v1')}/metrics") for s in servers]
            hits = sum(p["vllm:prefix_cache_hits_total"] for p in pages)
            rates[policy] = hits / sum(p["vllm:prefix_cache_queries_total"] for p in pages)
            assert min(p["llm_assets_sim:requests_total"] for p in pages) > 0  # both worked
    with fleet(1) as one:  # the hit rate of one server serving the whole plan
        OpenAIEngine(one[0].base_url, MODEL, max_concurrency=4).run("q", requests)
        rates["one server"] = hit_rate(one)
    assert rates["consistent_hash"] >= 0.97 * rates["one server"], rates
    # round robin scatters the groups: 0.70-0.76 measured (it varies with arrival order)
    assert rates["round_robin"] < rates["consistent_hash"], rates
