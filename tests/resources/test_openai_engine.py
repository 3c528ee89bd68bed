"""OpenAIEngine against real HTTP servers on 127.0.0.1.

Two servers: the sim's own server (`resources.sim.server`, skipped until the simulated engine
exists) for the happy path and token accounting, and a small scripted stdlib server in this file
that answers each attempt as a test says (429, 5xx, hangs, bad JSON) for retries and timeouts.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.openai.engine import SERVER_STYLES, OpenAIEngine

SECRET = "sk-test-DO-NOT-LEAK-7f3a9c"


# -- a scripted loopback server -----------------------------------------------------------------


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None


def completion(text: str = "Yes", prompt_tokens: int = 10, cached: int | None = 4) -> dict:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 1,
        "total_tokens": prompt_tokens + 1,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": usage}


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict


class Scripted:
    """Records every request; `script(seen_so_far, request) -> Answer` decides the reply."""

    def __init__(self, script: Callable[[list[Seen], Seen], Answer]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0


@contextmanager
def scripted_server(script: Callable[[list[Seen], Seen], Answer]) -> Iterator[tuple[str, Scripted]]:
    state = Scripted(script)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            with state.lock:
                answer = state.script(list(state.seen), seen)
                state.seen.append(seen)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            ended = False
            try:
                time.sleep(answer.delay_s)
                payload = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
                with state.lock:  # ended before the reply leaves: the client may send its next
                    state.in_flight -= 1  # request before this thread runs again
                    ended = True
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in answer.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                if not ended:
                    with state.lock:
                        state.in_flight -= 1

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()


def fast_engine(base_url: str, **kwargs: Any) -> OpenAIEngine:
    defaults: dict[str, Any] = {
        "initial_backoff_s": 0.01,
        "max_backoff_s": 0.05,
        "timeout_s": 5.0,
        "seed": 0,
    }
    defaults.update(kwargs)
    return OpenAIEngine(base_url, "m", **defaults)


def reqs(n: int, **kwargs: Any) -> list[Request]:
    return [Request(f"r{i}", f"prompt number {i}", **kwargs) for i in range(n)]


# -- request bodies ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4, unique=True),
    st.integers(1, 5),
    st.sampled_from(["vllm", "vllm-guided", "llamacpp"]),
)
def test_a_constrained_choice_is_never_cut_short(values, max_tokens, style) -> None:
    """A grammar may spell a value in any tokenization, at worst one token per byte (Gemma 3
    spelled `positive`, one token, in three; a 3-token budget cut `negative` to `negat`): the
    budget sent must hold the longest value's bytes and an end token."""
    values = [v.strip() or "x" for v in values]
    spec = OutputSpec.choice(list(dict.fromkeys(values)))
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", server_style=style)
    body = engine.body(Request("a", "p", max_tokens=max_tokens, output=spec))
    longest = max(len(v.encode("utf-8", "surrogatepass")) for v in spec.values)
    assert body["max_tokens"] >= longest + 1
    assert body["max_tokens"] == max(max_tokens, longest + 1)  # no more than that either
    unconstrained = OpenAIEngine("http://127.0.0.1:9/v1", "m", server_style="none")
    assert unconstrained.body(Request("a", "p", max_tokens=max_tokens))["max_tokens"] == max_tokens


def test_body_carries_model_limits_and_structured_outputs() -> None:
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "llama")
    req = Request("a", "hello", max_tokens=3, output=OutputSpec.choice(["Yes", "No"]), priority=2)
    body = engine.body(req)
    assert body == {
        "model": "llama",
        "max_tokens": 4,  # a constrained choice: the longest value's bytes + 1 (not 3)
        "temperature": 0.0,
        "prompt": "hello",
        "structured_outputs": {"choice": ["Yes", "No"]},
    }
    assert "priority" not in body
    assert OpenAIEngine("http://h/v1", "m", send_priority=True).body(req)["priority"] == 2


def test_body_styles_and_chat() -> None:
    req = Request("a", "hello", output=OutputSpec.regex("[0-9]+"))
    guided = OpenAIEngine("http://h/v1", "m", server_style="guided").body(req)
    assert guided["guided_regex"] == "[0-9]+" and "structured_outputs" not in guided
    json_req = Request("b", "x", output=OutputSpec.json())
    assert OpenAIEngine("http://h/v1", "m", server_style="guided").body(json_req)[
        "response_format"
    ] == {"type": "json_object"}
    plain = OpenAIEngine("http://h/v1", "m", server_style="none").body(req)
    assert not {"structured_outputs", "guided_regex"} & set(plain)
    chat = OpenAIEngine("http://h/v1", "m", use_chat=True)
    assert chat.body(req)["messages"] == [{"role": "user", "content": "hello"}]
    assert chat.endpoint == "http://h/v1/chat/completions"
    assert "prompt" not in chat.body(req)


def test_constructor_errors_name_the_value_and_the_choices() -> None:
    with pytest.raises(
        ValueError,
        match=r"^OpenAIEngineConfig.server_style='xml': .*" + re.escape(str(list(SERVER_STYLES))),
    ):
        OpenAIEngine("http://h/v1", "m", server_style="xml")
    with pytest.raises(
        ValueError, match="max_concurrency=0: Input should be greater than or equal to 1$"
    ):
        OpenAIEngine("http://h/v1", "m", max_concurrency=0)
    with pytest.raises(ValueError, match="ftp://h"):
        OpenAIEngine("ftp://h", "m")


# -- scripted server: order, concurrency, retries, errors ---------------------------------------


def test_responses_come_back_in_request_order_with_bounded_concurrency() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        n = int(req.body["prompt"].rsplit(" ", 1)[1])
        return Answer(body=completion(text=f"t{n}"), delay_s=0.02 * ((7 * n) % 5))

    with scripted_server(script) as (url, state):
        progress: list[tuple[int, int]] = []
        engine = fast_engine(url, max_concurrency=4, progress=lambda d, t: progress.append((d, t)))
        result = engine.run("q", reqs(20))
        engine.close()
    assert [r.id for r in result.responses] == [f"r{i}" for i in range(20)]
    assert [r.text for r in result.responses] == [f"t{i}" for i in range(20)]
    assert state.max_in_flight <= 4
    assert progress[-1] == (20, 20) and len(progress) == 20
    stats = result.stats
    assert (stats.engine, stats.n_requests, stats.errors) == ("openai", 20, 0)
    assert (stats.prompt_tokens, stats.cached_tokens, stats.output_tokens) == (200, 80, 20)
    assert stats.engine_time_s > 0 and stats.engine_time_s == stats.wall_time_s
    assert all(0 < r.ttft_s == r.finish_s <= stats.engine_time_s for r in result.responses)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_retryable_statuses_are_retried(status: int) -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        if len(seen) < 2:
            return Answer(status, {"error": {"message": "busy"}})
        return Answer(body=completion())

    with scripted_server(script) as (url, state):
        result = fast_engine(url).run("q", reqs(1))
    assert result.responses[0].ok and result.responses[0].text == "Yes"
    assert len(state.seen) == 3


def test_retry_after_overrides_the_backoff() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        if not seen:
            return Answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
        return Answer(body=completion())

    with scripted_server(script) as (url, _):
        engine = fast_engine(url, initial_backoff_s=20.0, max_backoff_s=20.0)
        start = time.perf_counter()
        result = engine.run("q", reqs(1))
    assert result.responses[0].ok
    assert time.perf_counter() - start < 5.0


def test_client_errors_are_final_and_named() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        return Answer(400, {"error": {"message": "max_tokens must be >= 1", "param": "max_tokens"}})

    with scripted_server(script) as (url, state):
        result = fast_engine(url).run("q", reqs(2))
    assert len(state.seen) == 2  # no retries
    for resp in result.responses:
        assert resp.error and "HTTP 400" in resp.error and "max_tokens must be >= 1" in resp.error
        assert "1 attempt" in resp.error
    assert result.stats.errors == 2


def test_exhausted_retries_become_error_rows_not_exceptions() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        if req.body["prompt"].endswith(" 1"):
            return Answer(503, {"error": {"message": "overloaded"}})
        return Answer(body=completion())

    with scripted_server(script) as (url, _):
        result = fast_engine(url, max_retries=2).run("q", reqs(3))
    ok, bad, ok2 = result.responses
    assert ok.ok and ok2.ok
    assert bad.id == "r1" and bad.error == "failed after 3 attempts: HTTP 503: overloaded"
    assert result.stats.errors == 1


def test_malformed_json_is_retried_then_reported() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        return Answer(raw=b'{"choices": [')

    with scripted_server(script) as (url, state):
        result = fast_engine(url, max_retries=1).run("q", reqs(1))
    assert len(state.seen) == 2
    assert "not JSON" in (result.responses[0].error or "")


def test_timeouts_are_retried_then_reported() -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        return Answer(body=completion(), delay_s=1.0)

    with scripted_server(script) as (url, state):
        result = fast_engine(url, timeout_s=0.2, max_retries=1).run("q", reqs(1))
    assert len(state.seen) == 2
    assert "timed out after 0.2s" in (result.responses[0].error or "")


def test_connection_refused_is_an_error_row() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = fast_engine(f"http://127.0.0.1:{port}/v1", max_retries=1).run("q", reqs(2))
    assert [r.id for r in result.responses] == ["r0", "r1"]
    assert all("connection error" in (r.error or "") for r in result.responses)


def test_missing_cached_tokens_are_unknown_and_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        return Answer(body=completion(cached=None))

    caplog.set_level(logging.WARNING, logger="resources.openai.engine")
    with scripted_server(script) as (url, _):
        engine = fast_engine(url)
        result = engine.run("q", reqs(5))
        engine.run("q2", reqs(3))
    assert result.stats.cached_tokens == 0 and result.stats.prompt_tokens == 50
    assert result.stats.cached_tokens_unknown == 5 and not result.stats.cached_tokens_reported
    assert not any(r.cached_tokens_known for r in result.responses)
    warnings = [r for r in caplog.records if "cached_tokens" in r.getMessage()]
    assert len(warnings) == 1
    # the advice fits the server: a scripted server without /props is taken for vLLM
    assert "--enable-prompt-tokens-details" in warnings[0].getMessage()
    assert "unknown" in warnings[0].getMessage()


# -- the API key never leaks --------------------------------------------------------------------


def test_api_key_is_sent_but_never_logged_or_shown(caplog: pytest.LogCaptureFixture) -> None:
    def script(seen: list[Seen], req: Seen) -> Answer:
        if req.body["prompt"].endswith(" 0"):
            return Answer(body=completion())
        if req.body["prompt"].endswith(" 1"):  # a server echoing the key back
            return Answer(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}})
        return Answer(503, {"error": {"message": "down"}})

    caplog.set_level(logging.DEBUG)
    with scripted_server(script) as (url, state):
        # one request at a time: r0 is answered before r1's 401 stops the run (with several
        # in flight, the 401 could stop r0 first)
        engine = fast_engine(url, api_key=SECRET, max_retries=1, max_concurrency=1)
        result = engine.run("q", reqs(3))
        engine.close()
    assert all(s.headers.get("authorization") == f"Bearer {SECRET}" for s in state.seen)
    assert all(SECRET not in json.dumps(s.body) for s in state.seen)
    assert result.responses[0].ok
    assert "HTTP 401" in (result.responses[1].error or "")
    shown = [repr(engine), str(engine), f"{engine}", repr(result), str(result.stats)]
    shown += [r.error or "" for r in result.responses]
    shown += [caplog.text] + [r.getMessage() for r in caplog.records]
    assert caplog.records, "expected some log output to check"
    for text in shown:
        assert SECRET not in text
    assert "api_key='***'" in repr(engine)


# -- the sim's own server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_server() -> Iterator[str]:
    from resources.sim.server import serve_in_thread

    with serve_in_thread(gpu="L4", model="llama-2-7b") as base_url:
        yield base_url


def test_against_the_sim_server_shared_prefixes_hit_the_cache(sim_server: str) -> None:
    instruction = "Is the following review positive? Answer Yes or No.\n" * 6
    yes_no = OutputSpec.choice(["Yes", "No"])
    requests = [
        Request(f"r{i}", f"{instruction}Review: film {i} was fine.\n", 2, yes_no) for i in range(12)
    ]
    engine = OpenAIEngine(sim_server, "llama-2-7b", max_concurrency=4)
    result = engine.run("hit", requests)
    engine.close()
    assert [r.id for r in result.responses] == [r.id for r in requests]
    assert all(r.ok and r.text.strip() in {"Yes", "No"} for r in result.responses)
    assert result.stats.cached_tokens > 0
    assert result.stats.token_hit_rate > 0.5
    assert all(r.cached_tokens <= r.prompt_tokens for r in result.responses)


def test_against_the_sim_server_chat_and_priority(sim_server: str) -> None:
    engine = OpenAIEngine(sim_server, "llama-2-7b", use_chat=True, send_priority=True)
    result = engine.run("chat", reqs(3, output=OutputSpec.choice(["A", "B"]), priority=1))
    engine.close()
    assert all(r.ok and r.text in {"A", "B"} for r in result.responses), result.responses


def test_against_the_sim_server_a_wrong_model_is_an_error_row(sim_server: str) -> None:
    result = OpenAIEngine(sim_server, "gpt-9", max_retries=3).run("q", reqs(1))
    assert "HTTP 404" in (result.responses[0].error or "")
    assert "gpt-9" in (result.responses[0].error or "")
