"""Issue 11 on the engine: no hang, one bad reply costs one row, fail fast, no leaked secret.

Every server here is a real one on 127.0.0.1 (`benchmarks.lib.hostile.HostileServer`) that
writes hostile bytes on the socket: a body dripped one byte at a time, a chunked body that
never ends, malformed 200s, 401s, a server that never answers.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from benchmarks.lib.hostile import Drip, Endless, HostileServer, Reply, Silent, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.runner import TooManyErrors, raise_if_too_many_errors, run_requests

KEY = "sk-Live-0123456789abcdefXYZ"


def engine(url: str, **kwargs: Any) -> OpenAIEngine:
    defaults: dict[str, Any] = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, "seed": 0}
    return OpenAIEngine(url, "m", **{**defaults, **kwargs})


def reqs(n: int) -> list[Request]:
    return [Request(f"r{i}", f"prompt number {i}") for i in range(n)]


def index_of(body: dict) -> int:
    return int(str(body.get("prompt", "x -1")).rsplit(" ", 1)[1])


# -- defect 3: a hard wall-clock deadline, body included -----------------------------------


@pytest.mark.parametrize(
    "action",
    [
        Drip(body=completion_body(), interval_s=0.2),
        Drip(body=completion_body(), interval_s=0.2, headers_too=True),
        Endless(interval_s=0.02),
    ],
    ids=["drip-body", "drip-headers", "endless-chunked"],
)
def test_a_dripping_or_endless_reply_ends_at_the_deadline(action) -> None:
    with HostileServer(lambda m, p, b: action if m == "POST" else Reply(404, {})) as srv:
        start = time.perf_counter()
        result = engine(srv.url, timeout_s=0.6, max_retries=1).run("q", reqs(1))
        took = time.perf_counter() - start
    (r,) = result.responses
    assert r.error and "timed out after 0.6s" in r.error and "2 attempts" in r.error
    # two attempts of 0.6 s plus a short backoff; per-read timeouts would never end here
    assert took < 2 * 0.6 + 1.0, took


def test_the_request_deadline_bounds_all_attempts_together() -> None:
    action = Drip(body=completion_body(), interval_s=0.1)
    with HostileServer(lambda m, p, b: action if m == "POST" else Reply(404, {})) as srv:
        start = time.perf_counter()
        out = engine(srv.url, timeout_s=5, request_deadline_s=0.8, max_retries=5).run("q", reqs(1))
        took = time.perf_counter() - start
    assert "request deadline of 0.8s" in (out.responses[0].error or "")
    assert took < 0.8 + 1.0, took


# -- defect 4: a malformed 200 is one error row, retried first --------------------------------

MALFORMED = {
    "text is a number": {"choices": [{"text": 42}], "usage": {"prompt_tokens": 1,
                                                              "completion_tokens": 1}},
    "text is null": {"choices": [{"text": None}], "usage": {"prompt_tokens": 1,
                                                            "completion_tokens": 1}},
    "three choices for n=1": {"choices": [{"text": "a"}] * 3, "usage": {
        "prompt_tokens": 1, "completion_tokens": 1}},
    "negative usage": {"choices": [{"text": "a"}], "usage": {"prompt_tokens": -5,
                                                             "completion_tokens": 1}},
    "usage beyond 64 bits": {"choices": [{"text": "a"}], "usage": {
        "prompt_tokens": 2**70, "completion_tokens": 1}},
    "cached above prompt": {"choices": [{"text": "a"}], "usage": {
        "prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {
            "cached_tokens": 9}}},
    "bool count": {"choices": [{"text": "a"}], "usage": {"prompt_tokens": True,
                                                         "completion_tokens": 1}},
    "no usage": {"choices": [{"text": "a"}]},
    "a list": [1, 2, 3],
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_200_fails_only_its_own_request_after_retries(shape: str) -> None:
    calls: dict[int, int] = {}

    def script(method: str, path: str, body: dict) -> Reply:
        if method != "POST":
            return Reply(404, {})
        i = index_of(body)
        calls[i] = calls.get(i, 0) + 1
        return Reply(body=MALFORMED[shape] if i == 3 else completion_body(f"t{i}"))

    with HostileServer(script) as srv:
        result = engine(srv.url, max_retries=2, max_concurrency=4).run("q", reqs(8))
    bad = result.responses[3]
    assert bad.error and "malformed completion" in bad.error and "request r3" in bad.error
    assert calls[3] == 3  # retried like a 5xx before giving up
    others = [r for r in result.responses if r.id != "r3"]
    assert all(r.ok and r.text == f"t{r.id[1:]}" for r in others)
    assert result.stats.errors == 1 and result.stats.prompt_tokens == 70


def test_the_chunk_with_a_malformed_reply_is_committed(tmp_path) -> None:
    from resources.response_cache import ResponseCache

    def script(method: str, path: str, body: dict) -> Reply:
        if method != "POST":
            return Reply(404, {})
        i = index_of(body)
        return Reply(body=MALFORMED["text is a number"] if i == 5 else completion_body())

    cache = ResponseCache(tmp_path / "c.duckdb")
    with HostileServer(script) as srv:
        outcome = run_requests(engine(srv.url, max_retries=0), "q", reqs(10), cache=cache)
    assert (outcome.answered, outcome.failed, cache.count()) == (9, 1, 9)


# -- defect 5: fail fast ----------------------------------------------------------------------


def test_a_wrong_key_stops_before_any_completion_when_models_says_401() -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        return Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY.lower()}"}})

    with HostileServer(script) as srv:
        outcome = run_requests(engine(srv.url, api_key=KEY), "q", reqs(138), chunk_size=20)
    assert srv.calls == 0  # only GET /models was asked
    assert outcome.failed == 138 and outcome.stopped and "HTTP 401" in outcome.stopped
    with pytest.raises(TooManyErrors) as info:
        raise_if_too_many_errors(outcome, 0.5)
    message = str(info.value)
    assert "\n" not in message and "HTTP 401" in message
    assert KEY.lower() not in message.lower() and "0123456789" not in message


def test_a_wrong_key_on_completions_stops_after_the_first_401() -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        if method == "GET":
            return Reply(404, {})
        return Reply(403, {"error": {"message": f"key {KEY[3:15]} is not allowed"}})

    with HostileServer(script) as srv:
        outcome = run_requests(
            engine(srv.url, api_key=KEY, max_concurrency=4), "q", reqs(138), chunk_size=20
        )
    assert srv.calls <= 4  # at most the requests already in flight
    assert outcome.failed == 138 and outcome.sent == 20  # no second chunk was sent
    assert all(KEY[3:15].lower() not in (r.error or "").lower() for r in outcome.responses)
    assert all("HTTP 403" in (r.error or "") for r in outcome.responses)


def test_a_dead_server_trips_the_circuit_breaker() -> None:
    with HostileServer(lambda m, p, b: Silent()) as srv:
        start = time.perf_counter()
        eng = engine(srv.url, timeout_s=0.3, max_retries=10, breaker_failures=3,
                     max_concurrency=2, probe=False)  # fmt: skip
        outcome = run_requests(eng, "q", reqs(40), chunk_size=10)
        took = time.perf_counter() - start
    assert outcome.stopped and "circuit breaker open after 3" in outcome.stopped
    assert outcome.failed == 40 and outcome.sent == 10
    # ceil(3 / 2) = 2 rounds of 0.3 s, plus backoffs; without the breaker 40 x 11 x 0.3 s
    assert took < 3.0, took
    assert srv.calls <= 4


def test_retry_after_above_the_cap_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        if method == "GET":
            return Reply(404, {})
        return Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "120"})

    caplog.set_level(logging.WARNING)
    with HostileServer(script) as srv:
        result = engine(srv.url, max_retries=1, max_backoff_s=0.05).run("q", reqs(1))
    error = result.responses[0].error or ""
    assert "Retry-After 120s" in error and "max_backoff_s=0.05s" in error
    assert any("Retry-After 120s" in r.getMessage() for r in caplog.records)


# -- defect 6: secrets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "echo",
    [KEY, KEY.lower(), KEY.upper(), KEY[:10], KEY[-9:].lower(), f"xx{KEY[5:13]}yy"],
    ids=["exact", "lower", "upper", "prefix", "suffix-lower", "inner-8"],
)
def test_any_8_char_fragment_of_the_key_is_redacted(echo: str) -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        if method == "GET":
            return Reply(404, {})
        return Reply(400, {"error": {"message": f"bad request for key {echo}"}})

    with HostileServer(script) as srv:
        result = engine(srv.url, api_key=KEY).run("q", reqs(1))
    error = result.responses[0].error or ""
    assert "HTTP 400" in error and "***" in error
    low = error.lower()
    assert all(KEY.lower()[i : i + 8] not in low for i in range(len(KEY) - 7))


def test_url_credentials_never_show_but_are_used() -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        return Reply(body=completion_body()) if method == "POST" else Reply(404, {})

    with HostileServer(script) as srv:
        url = srv.url.replace("http://", "http://alice:hunter2-secret-pw@")
        eng = engine(url)
        result = eng.run("q", reqs(1))
        dead = engine("http://bob:s3cr3t-password-x@127.0.0.1:9/v1", max_retries=0, probe=False)
        refused = dead.run("q", reqs(1))
    assert result.responses[0].ok
    auth = srv.seen[-1][2].get("authorization", "")
    assert auth.startswith("Basic ")  # the credentials went out as basic auth
    shown = [repr(eng), str(eng), eng.base_url, repr(dead), refused.responses[0].error or ""]
    for text in shown:
        assert "hunter2" not in text and "s3cr3t" not in text and "alice:" not in text
    assert eng.base_url == srv.url
