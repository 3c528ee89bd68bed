"""The response cache knows who answered (issue 22 item 2): a sim server's answers are never
served for another server with the same model name, nor for the chat endpoint; replicas of one
deployment share them."""

from __future__ import annotations

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import run_requests
from tests.resources.test_openai_fleet import MODEL, fleet

REQUESTS = [Request(f"r{i}", f"Is review {i} positive?", max_tokens=2) for i in range(6)]


def vllm_server(method: str, path: str, body: dict) -> Reply:
    """A server that reports itself as vLLM, serving the same model name as the sim."""
    if path == "/v1/models":
        return Reply(body={"data": [{"id": MODEL, "owned_by": "vllm", "max_model_len": 4096}]})
    if method == "GET":
        return Reply(404, {"error": {"message": "not found"}})
    return Reply(body=completion_body())


def test_answers_of_one_server_are_not_reused_for_another_or_another_endpoint(tmp_path):
    cache = ResponseCache(tmp_path / "responses.duckdb")
    with fleet(1) as (sim,):
        first = run_requests(OpenAIEngine(sim.base_url, MODEL), "q", REQUESTS, cache=cache)
        assert first.sent == 6
        again = run_requests(OpenAIEngine(sim.base_url, MODEL), "q", REQUESTS, cache=cache)
        assert again.sent == 0  # the same server: reused
        chat = OpenAIEngine(sim.base_url, MODEL, use_chat=True)
        assert run_requests(chat, "q", REQUESTS, cache=cache).sent == 6  # another endpoint
    with HostileServer(vllm_server) as real:
        engine = OpenAIEngine(real.url, MODEL)
        outcome = run_requests(engine, "q", REQUESTS, cache=cache)
    assert outcome.sent == 6 and outcome.cache_hits == 0  # never the sim's answers
    assert [r.text for r in outcome.responses] != [r.text for r in first.responses]


def test_replicas_of_one_deployment_share_the_cache(tmp_path):
    cache = ResponseCache(tmp_path / "responses.duckdb")
    with fleet(3) as servers:
        one = OpenAIEngine(servers[2].base_url, MODEL)
        assert run_requests(one, "q", REQUESTS, cache=cache).sent == 6
        urls = ",".join(s.base_url for s in servers)
        assert run_requests(OpenAIEngine(urls, MODEL), "q", REQUESTS, cache=cache).sent == 0
        servers[0].close()  # the first replica is down when the fleet asks who it is
        assert run_requests(OpenAIEngine(urls, MODEL), "q", REQUESTS, cache=cache).sent == 0
