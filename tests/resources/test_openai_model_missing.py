"""A wrong model name stops the run after the first reply that says so (issue 35, item 3).

A 404 whose body says the model does not exist (vLLM's, OpenAI's and llama.cpp's wording)
stops the run like a 401: the requests in flight are all that was sent, the rest fail with
`not sent: ...`, and the run's error is one line naming the model to check. Before, every
request was sent and failed on its own (968 of 968 with 404). A 404 about anything else stays
a failure of that request only."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.runner import TooManyErrors, raise_if_too_many_errors, run_requests

WORDINGS = {
    "vllm": {"object": "error", "message": "The model `m` does not exist.",
             "type": "NotFoundError", "param": None, "code": 404},
    "openai": {"error": {"message": "The model `m` does not exist or you do not have access "
                         "to it.", "type": "invalid_request_error", "param": None,
                         "code": "model_not_found"}},
    "llama.cpp": {"error": {"code": 404, "message": "model is not found",
                            "type": "not_found_error"}},
}  # fmt: skip


def engine(url: str, model: str = "m", **kwargs: Any) -> OpenAIEngine:
    defaults: dict[str, Any] = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, "seed": 0}
    return OpenAIEngine(url, model, **{**defaults, **kwargs})


def reqs(n: int) -> list[Request]:
    return [Request(f"r{i}", f"prompt number {i}") for i in range(n)]


@pytest.mark.parametrize("server", list(WORDINGS))
def test_a_404_saying_the_model_does_not_exist_stops_the_run(server: str) -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        return Reply(404, WORDINGS[server]) if method == "POST" else Reply(404, {})

    with HostileServer(script) as srv:
        outcome = run_requests(engine(srv.url, max_concurrency=4), "q", reqs(200), chunk_size=20)
    assert srv.calls <= 4  # at most the requests already in flight
    assert outcome.failed == 200 and outcome.sent == 20  # no second chunk was sent
    assert outcome.stopped and "HTTP 404" in outcome.stopped
    assert "check the model name 'm'" in outcome.stopped, outcome.stopped
    with pytest.raises(TooManyErrors) as info:
        raise_if_too_many_errors(outcome, 0.5)
    assert "\n" not in str(info.value) and "check the model name 'm'" in str(info.value)


def test_another_404_fails_only_its_request() -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        if method != "POST":
            return Reply(404, {})
        if body["prompt"].endswith(" 3"):
            return Reply(404, {"error": {"message": "adapter 'x' is not loaded"}})
        return Reply(body=completion_body())

    with HostileServer(script) as srv:
        outcome = run_requests(engine(srv.url, max_retries=0), "q", reqs(10))
    assert outcome.stopped is None and (outcome.answered, outcome.failed) == (9, 1)


def test_the_sim_server_stops_a_run_naming_a_model_it_does_not_serve() -> None:
    from resources.sim.server import serve_in_thread

    with serve_in_thread(gpu="L4", model="llama-2-7b") as url:
        wrong = engine(url, model="llama-2-7b-typo", max_concurrency=4)
        outcome = run_requests(wrong, "q", reqs(120), chunk_size=40)
        wrong.close()
    assert outcome.failed == 120 and outcome.sent == 40
    assert outcome.stopped and "The model `llama-2-7b-typo` does not exist" in outcome.stopped
    assert "check the model name 'llama-2-7b-typo'" in outcome.stopped
    answered_404 = [r for r in outcome.responses if (r.error or "").startswith("failed after")]
    assert 1 <= len(answered_404) <= 4, [r.error for r in outcome.responses[:6]]
