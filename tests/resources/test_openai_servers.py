"""Issue 13's engine defects: each server gets output constraints in its own form, the context
window is read from the server, cached tokens a server does not report stay unknown, and a
per-run `max_tokens` keys the response cache."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import run_requests

YES_NO = OutputSpec.choice(["Yes", "No"])


def llama_cpp(n_ctx: int = 4096):
    """Answers like llama.cpp's llama-server: /props, /v1/models with meta, no vLLM fields."""

    def script(method: str, path: str, body: dict) -> Reply:
        if path == "/props":
            return Reply(body={"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 4})
        if path == "/v1/models":
            return Reply(body={"data": [{"id": "m", "owned_by": "llamacpp",
                                         "meta": {"n_ctx_train": 131072}}]})  # fmt: skip
        return Reply(body=completion_body(cached=None))

    return script


def vllm(max_model_len: int = 2048):
    def script(method: str, path: str, body: dict) -> Reply:
        if path == "/v1/models":
            return Reply(body={"data": [{"id": "m", "owned_by": "vllm",
                                         "max_model_len": max_model_len}]})  # fmt: skip
        if method == "GET":
            return Reply(404, {"error": {"message": "not found"}})
        return Reply(body=completion_body())

    return script


def posts(srv: HostileServer) -> list[dict[str, Any]]:
    return [s[3] for s in srv.seen if s[0] == "POST"]


def test_auto_style_sends_llama_cpp_a_grammar_and_reads_its_context_window() -> None:
    requests = [
        Request("a", "Is it good?", output=YES_NO),
        Request("b", "Score?", output=OutputSpec.number(0, 5)),
        Request("c", "JSON?", output=OutputSpec.json({"type": "object"})),
    ]
    with HostileServer(llama_cpp(n_ctx=4096)) as srv:
        engine = OpenAIEngine(srv.url, "m")
        result = engine.run("q", requests)
        assert engine.resolved_style == "llamacpp" and engine.max_model_len == 4096
        bodies = sorted(posts(srv), key=lambda b: b["prompt"])
    assert all(r.ok for r in result.responses)
    by_prompt = {b["prompt"]: b for b in bodies}
    assert by_prompt["Is it good?"]["grammar"] == 'root ::= "Yes" | "No"'
    assert "[0-9]+" in by_prompt["Score?"]["grammar"]
    assert by_prompt["JSON?"]["json_schema"] == {"type": "object"}
    assert not any("structured_outputs" in b or "guided_choice" in b for b in bodies)


def test_auto_style_on_vllm_sends_structured_outputs_and_reads_max_model_len() -> None:
    with HostileServer(vllm(max_model_len=2048)) as srv:
        engine = OpenAIEngine(srv.url, "m")
        engine.run("q", [Request("a", "x", output=YES_NO)])
        (body,) = posts(srv)
    assert body["structured_outputs"] == {"choice": ["Yes", "No"]} and "grammar" not in body
    assert engine.resolved_style == "vllm" and engine.max_model_len == 2048


@pytest.mark.parametrize(
    ("style", "field"),
    [("vllm", "structured_outputs"), ("vllm-guided", "guided_choice"), ("llamacpp", "grammar")],
)
def test_an_explicit_style_wins_over_the_probe(style: str, field: str) -> None:
    with HostileServer(llama_cpp()) as srv:
        OpenAIEngine(srv.url, "m", server_style=style).run("q", [Request("a", "x", output=YES_NO)])
        (body,) = posts(srv)
    assert field in body


def test_unreported_cached_tokens_stay_unknown_through_the_cache(tmp_path, caplog) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    requests = [Request(f"r{i}", f"prompt {i}") for i in range(3)]
    with HostileServer(llama_cpp()) as srv:
        first = run_requests(OpenAIEngine(srv.url, "m"), "q", requests, cache=cache)
        again = run_requests(OpenAIEngine(srv.url, "m"), "q", requests, cache=cache)
    assert first.stats.cached_tokens_unknown == 3 and not first.stats.cached_tokens_reported
    assert again.cache_hits == 3
    assert not any(r.cached_tokens_known for r in again.responses)
    warning = next(r.getMessage() for r in caplog.records if "cached_tokens" in r.getMessage())
    assert "llama-server" in warning and "--enable-prompt-tokens-details" not in warning


def test_a_per_run_max_tokens_reaches_the_server_and_keys_the_cache(tmp_path) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    requests = [Request("r0", "prompt", max_tokens=16)]
    with HostileServer(vllm()) as srv:
        run_requests(OpenAIEngine(srv.url, "m"), "q", requests, cache=cache)
        longer = run_requests(OpenAIEngine(srv.url, "m", max_tokens=64), "q", requests, cache=cache)
        budgets = [b["max_tokens"] for b in posts(srv)]
    assert budgets == [16, 64]  # not answered from the 16-token entry
    assert longer.cache_hits == 0 and cache.count() == 2


def test_the_context_window_is_read_from_the_sim_server() -> None:
    from resources.sim.server import serve_in_thread

    with serve_in_thread(gpu="L4", model="llama-2-7b") as url:
        assert OpenAIEngine(url, "llama-2-7b").max_model_len == 4096
