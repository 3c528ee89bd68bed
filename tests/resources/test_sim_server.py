"""The sim's OpenAI-compatible server: request parsing (pure), the admission batcher, and the
real server on 127.0.0.1 backed by the simulated engine (skipped until that engine exists)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from llm_assets.output_spec import OutputSpec
from resources.engine import EngineWrapper, LLMEngine, Request, Response, RunResult, RunStats
from resources.openai.engine import OpenAIEngine
from resources.sim.engine import SimulatedEngine
from resources.sim.server import (
    ApiError,
    EngineBatcher,
    EngineFailure,
    ServerConfig,
    SimServer,
    parse_call,
    render_chat,
    serve_in_thread,
)
from tests.conftest import terminate_cleanly

REPO = Path(__file__).resolve().parents[2]
MODEL = "llama-2-7b"


def parse_output_spec(body: dict) -> OutputSpec:
    """The output spec a completions body with these constraint fields asks for."""
    return parse_call({"prompt": "x", **body}, chat=False, default_max_tokens=16).output


def api_error(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    return info.value


# -- parsing: output specs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "spec"),
    [
        ({}, OutputSpec.text()),
        ({"structured_outputs": {"choice": ["Yes", "No"]}}, OutputSpec.choice(["Yes", "No"])),
        ({"structured_outputs": {"regex": "[0-9]+"}}, OutputSpec.regex("[0-9]+")),
        ({"structured_outputs": {"json": {"type": "object"}}}, OutputSpec.json({"type": "object"})),
        (
            {"structured_outputs": {"json": '{"type": "object"}'}},
            OutputSpec.json({"type": "object"}),
        ),
        ({"structured_outputs": {"json_object": True}}, OutputSpec.json()),
        ({"structured_outputs": {"choice": None, "regex": "a+"}}, OutputSpec.regex("a+")),
        ({"guided_choice": ["A", "B"]}, OutputSpec.choice(["A", "B"])),
        ({"guided_regex": "x|y"}, OutputSpec.regex("x|y")),
        ({"guided_json": {"type": "array"}}, OutputSpec.json({"type": "array"})),
        ({"response_format": {"type": "json_object"}}, OutputSpec.json()),
        ({"response_format": {"type": "text"}}, OutputSpec.text()),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "object"}},
                }
            },
            OutputSpec.json({"type": "object"}),
        ),
    ],
)
def test_parse_output_spec_accepts_vllm_fields(body: dict, spec: OutputSpec) -> None:
    assert parse_output_spec(body) == spec


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"structured_outputs": "yes"}, "structured_outputs", "valid dictionary"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice", "at least 1 item"),
        ({"structured_outputs": {"regex": "("}}, "structured_outputs.regex", "not a valid regex"),
        ({"structured_outputs": {"json": "{nope"}}, "structured_outputs.json", "not valid JSON"),
        ({"structured_outputs": {"json": [1]}}, "structured_outputs.json", "valid dictionary"),
        (
            {"structured_outputs": {"grammar": "root ::= x"}},
            "structured_outputs.grammar",
            "not supported",
        ),
        (
            {"structured_outputs": {"choice": ["a"], "regex": "a"}},
            "structured_outputs",
            "only use one kind of constraints",
        ),
        ({"guided_choice": "Yes"}, "guided_choice", "valid list"),
        ({"guided_choice": []}, "guided_choice", "choice"),  # was a 500 (issue 22 item 10)
        (
            {"guided_choice": ["a"], "guided_regex": "a"},
            "guided_regex",
            "several output constraints",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
    ],
)
def test_parse_output_spec_errors_name_the_field(body: dict, param: str, fragment: str) -> None:
    err = api_error(parse_output_spec, body)
    assert err.status == 400 and err.param == param
    assert fragment in err.message


def test_render_chat_is_deterministic_and_shares_prefixes() -> None:
    system = {"role": "system", "content": "Classify reviews."}
    a = render_chat([system, {"role": "user", "content": "good"}])
    b = render_chat([system, {"role": "user", "content": [{"type": "text", "text": "bad"}]}])
    assert a == render_chat([system, {"role": "user", "content": "good"}])
    assert a.startswith("<|system|>\nClassify reviews.\n<|user|>\n") and a.endswith(
        "<|assistant|>\n"
    )
    assert b.startswith("<|system|>\nClassify reviews.\n<|user|>\nbad")


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0].type"),
    ],
)
def test_render_chat_errors_name_the_message(messages: Any, param: str) -> None:
    assert api_error(render_chat, messages).param == param


def test_parse_call_reads_prompt_limits_and_priority() -> None:
    call = parse_call(
        {"prompt": ["a", "b"], "max_tokens": 3, "priority": -2}, chat=False, default_max_tokens=16
    )
    assert call.prompts == ("a", "b") and call.max_tokens == 3 and call.priority == -2
    assert parse_call({"prompt": "a"}, chat=False, default_max_tokens=16).max_tokens == 16
    chat = parse_call(
        {"messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 5},
        chat=True,
        default_max_tokens=16,
    )
    assert chat.max_tokens == 5 and chat.prompts[0].endswith("<|assistant|>\n")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([1, 2], "body"),
        ({"prompt": 7}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "a", "max_tokens": "five"}, "max_tokens"),
        ({"prompt": "a", "max_tokens": 2.5}, "max_tokens"),
        ({"prompt": "a", "priority": 1.5}, "priority"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": "a", "stream": True}, "stream"),
    ],
)
def test_parse_call_errors_name_the_field(body: Any, param: str) -> None:
    err = api_error(parse_call, body, chat=False, default_max_tokens=16)
    assert err.status == 400 and err.param == param, err.message


def test_server_config_validates() -> None:
    with pytest.raises(ValueError, match="batch_window_s must be >= 0, got -1"):
        ServerConfig(batch_window_s=-1)
    assert "api_key" not in repr(ServerConfig(api_key="sk-x"))


# -- the admission batcher ----------------------------------------------------------------------


class RecordingEngine(LLMEngine):
    """A minimal engine that records each `run` batch and fails if runs overlap."""

    name, model, hardware = "recording", "m", "cpu"

    def __init__(self, delay_s: float = 0.01, fail_on: str | None = None) -> None:
        self.batches: list[tuple[str, list[str]]] = []
        self.delay_s = delay_s
        self.fail_on = fail_on
        self._busy = threading.Lock()

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        assert self._busy.acquire(blocking=False), "engine.run called concurrently"
        try:
            time.sleep(self.delay_s)
            if any(r.prompt == self.fail_on for r in requests):
                raise RuntimeError("simulated engine crash")
            self.batches.append((relquery_id, [r.prompt for r in requests]))
            responses = [
                Response(r.id, r.prompt.upper(), len(r.prompt), 0, 1, 0.0, 0.0) for r in requests
            ]
            stats = RunStats("sim", "m", "cpu", len(requests), 0, 0, 0, 0.0, 0.0)
            return RunResult(responses, stats)
        finally:
            self._busy.release()


def _submit_in_order(batcher: EngineBatcher, items: list[tuple[str, str]]) -> list[Any]:
    """Submit each item from its own thread; item i joins the queue right after item i-1."""
    results: list[Any] = [None] * len(items)

    def worker(i: int, relquery: str, prompt: str) -> None:
        deadline = time.monotonic() + 10
        while batcher.tickets_admitted < i and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            results[i] = batcher.submit(relquery, [Request(f"id{i}", prompt)])
        except EngineFailure as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i, *item)) for i, item in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_batcher_admits_in_arrival_order_and_never_overlaps_runs() -> None:
    engine = RecordingEngine(delay_s=0.02)
    batcher = EngineBatcher(engine, window_s=0.0)
    items = [("q", f"p{i}") for i in range(12)]
    results = _submit_in_order(batcher, items)
    batcher.close()
    flat = [p for _, batch in engine.batches for p in batch]
    assert flat == [p for _, p in items]
    assert [res[0][0].text for res in results] == [p.upper() for _, p in items]
    assert len(engine.batches) < len(items)  # arrivals during a run were coalesced


def test_batcher_window_coalesces_and_splits_by_relquery() -> None:
    engine = RecordingEngine(delay_s=0.0)
    batcher = EngineBatcher(engine, window_s=0.3)
    items = [("q1", "a"), ("q1", "b"), ("q2", "c"), ("q1", "d")]
    _submit_in_order(batcher, items)
    batcher.close()
    assert engine.batches == [("q1", ["a", "b"]), ("q2", ["c"]), ("q1", ["d"])]


def test_batcher_reports_engine_failures_to_every_ticket_and_keeps_serving() -> None:
    engine = RecordingEngine(delay_s=0.0, fail_on="boom")
    batcher = EngineBatcher(engine, window_s=0.2)
    results = _submit_in_order(batcher, [("q", "ok"), ("q", "boom")])
    assert all(isinstance(r, EngineFailure) and "simulated engine crash" in str(r) for r in results)
    responses, size = batcher.submit("q", [Request("later", "fine")])
    assert responses[0].text == "FINE" and size == 1
    batcher.close()
    with pytest.raises(EngineFailure, match="shutting down"):
        batcher.submit("q", [Request("x", "y")])


def test_batcher_close_answers_tickets_still_in_the_window() -> None:
    engine = RecordingEngine(delay_s=0.0)
    batcher = EngineBatcher(engine, window_s=30.0)
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.extend(_submit_in_order(batcher, [("q", "late")]))
    )
    worker.start()
    while batcher.tickets_admitted < 1:
        time.sleep(0.001)
    batcher.close()
    worker.join(5)
    assert isinstance(results[0], EngineFailure) and "shutting down" in str(results[0])
    assert engine.batches == []


# -- the real server with the simulated engine ------------------------------------------------


def sim_engine() -> LLMEngine:
    return SimulatedEngine(gpu="L4", model=MODEL, policy="vllm-v1", enable_prefix_caching=True)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(sim_engine(), config=ServerConfig(served_model_name=MODEL)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        yield c


def test_health_and_models(server: SimServer, client: httpx.Client) -> None:
    assert httpx.get(f"{server.url}/health").status_code == 200
    models = client.get("/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_completion_reports_usage_like_vllm(client: httpx.Client) -> None:
    prompt = "You are a careful annotator. Decide if the review is positive.\n" * 5
    body = {"model": MODEL, "prompt": prompt + "Review: great", "max_tokens": 4}
    first = client.post("/completions", json=body).json()
    second = client.post("/completions", json={**body, "prompt": prompt + "Review: awful"}).json()
    for reply in (first, second):
        usage = reply["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert 0 <= usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"]
        assert 1 <= usage["completion_tokens"] <= 4
        assert reply["object"] == "text_completion" and reply["model"] == MODEL
        assert reply["choices"][0]["finish_reason"] in {"stop", "length"}
        assert isinstance(reply["choices"][0]["text"], str)
        assert reply["sim"]["finish_s"][0] >= reply["sim"]["ttft_s"][0] >= 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


@pytest.mark.parametrize(
    "constraint",
    [
        {"structured_outputs": {"choice": ["Yes", "No"]}},
        {"guided_choice": ["Yes", "No"]},
    ],
)
def test_structured_choice_is_honoured(client: httpx.Client, constraint: dict) -> None:
    body = {"prompt": "Is water wet?", "max_tokens": 2, **constraint}
    reply = client.post("/completions", json=body).json()
    assert reply["choices"][0]["text"].strip() in {"Yes", "No"}


def test_chat_completion_and_priority(client: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 3,
        "priority": 5,
        "structured_outputs": {"choice": ["A", "B"]},
    }
    reply = client.post("/chat/completions", json=body).json()
    assert reply["object"] == "chat.completion"
    message = reply["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"].strip() in {"A", "B"}


def test_multi_prompt_completion_returns_one_choice_per_prompt(client: httpx.Client) -> None:
    reply = client.post("/completions", json={"prompt": ["one", "two", "three"]}).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert reply["sim"]["batch_size"] >= 3


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/completions", {"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
        ("/completions", {"prompt": "x", "guided_regex": "("}, 400, "guided_regex"),
        ("/completions", {"prompt": "x", "model": "gpt-9"}, 404, "model"),
        ("/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("/embeddings", {"input": "x"}, 404, "path"),
    ],
)
def test_errors_are_openai_shaped_and_name_the_field(
    client: httpx.Client, path: str, body: dict, status: int, param: str
) -> None:
    reply = client.post(path, json=body)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["param"] == param and error["code"] == status and error["message"]


def test_invalid_json_and_wrong_method(client: httpx.Client) -> None:
    bad = client.post("/completions", content=b"{not json", headers={"Content-Type": "x"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert client.get("/completions").status_code == 405
    deep = b'{"prompt": "x", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # was a 500
    nested = client.post("/completions", content=deep, headers={"Content-Type": "x"})
    assert nested.status_code == 400 and "nested too deeply" in nested.json()["error"]["message"]
    empty = client.post("/completions", json={"prompt": "x", "guided_choice": []})  # was a 500
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "guided_choice"


def test_api_key_and_prompt_tokens_details_flags() -> None:
    config = ServerConfig(
        served_model_name=MODEL, api_key="sk-server", enable_prompt_tokens_details=False
    )
    with serve_in_thread(sim_engine(), config=config) as base_url:
        assert httpx.post(f"{base_url}/completions", json={"prompt": "x"}).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (
            httpx.post(f"{base_url}/completions", json={"prompt": "x"}, headers=wrong).status_code
            == 401
        )
        ok = httpx.post(
            f"{base_url}/completions",
            json={"prompt": "x"},
            headers={"Authorization": "Bearer sk-server"},
        )
        assert ok.status_code == 200
        assert "prompt_tokens_details" not in ok.json()["usage"]
        assert httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url.removesuffix("/v1") + "/health", timeout=1)


# -- token accounting equals the in-process engine ----------------------------------------------


def workload(n: int = 16) -> list[Request]:
    instruction = "Rate the satisfaction of the review from 0 to 5. Reply with a number.\n" * 4
    movies = ["Movie A: a heist film set in Lyon. ", "Movie B: a slow family drama. "]
    return [
        Request(
            f"w{i}",
            f"{instruction}{movies[i % 2] * 3}\nReview {i}: it was {'good' if i % 3 else 'bad'}.",
            max_tokens=2,
            output=OutputSpec.choice(["0", "1", "2", "3", "4", "5"]),
        )
        for i in range(n)
    ]


def tokens(responses: Sequence[Response]) -> list[tuple[int, int]]:
    return [(r.prompt_tokens, r.cached_tokens) for r in responses]


def test_sequential_http_accounting_equals_in_process_runs() -> None:
    requests = workload()
    reference = sim_engine()
    expected = [reference.run("acct", [r]).responses[0] for r in requests]
    with serve_in_thread(sim_engine(), config=ServerConfig(served_model_name=MODEL)) as url:
        result = OpenAIEngine(url, MODEL, max_concurrency=1).run("acct", requests)
    assert tokens(result.responses) == tokens(expected)
    assert [r.text for r in result.responses] == [r.text for r in expected]
    assert result.stats.cached_tokens > 0


def test_one_multi_prompt_call_equals_one_in_process_run() -> None:
    requests = workload()
    expected = sim_engine().run("acct", requests).responses
    with serve_in_thread(sim_engine(), config=ServerConfig(served_model_name=MODEL)) as url:
        reply = httpx.post(
            f"{url}/completions",
            json={"prompt": [r.prompt for r in requests], "max_tokens": 2,
                  "structured_outputs": {"choice": ["0", "1", "2", "3", "4", "5"]}},
            timeout=30,
        ).json()  # fmt: skip
    assert reply["usage"]["prompt_tokens"] == sum(r.prompt_tokens for r in expected)
    cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == sum(r.cached_tokens for r in expected)


class Tap(EngineWrapper):
    """Passes every batch to `inner` and keeps a copy of its requests (what the engine saw)."""

    def __init__(self, inner: LLMEngine) -> None:
        super().__init__(inner)
        self.batches: list[list[Request]] = []

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.batches.append(list(requests))
        return self.inner.run(relquery_id, requests)


def test_concurrent_http_accounting_equals_in_process_runs_of_the_same_batches() -> None:
    requests = workload(24)
    tap = Tap(sim_engine())
    config = ServerConfig(served_model_name=MODEL, batch_window_s=0.02)
    with SimServer(tap, config=config) as server:
        result = OpenAIEngine(server.base_url, MODEL, max_concurrency=8).run("acct", requests)
    assert result.stats.errors == 0
    assert 1 < len(tap.batches) < len(requests)  # coalesced, and more than one batch
    assert sorted(r.prompt for b in tap.batches for r in b) == sorted(r.prompt for r in requests)
    replay = sim_engine()
    by_prompt = {}
    for batch in tap.batches:  # the same slices, in the same order, in-process
        for req, resp in zip(batch, replay.run("acct", batch).responses, strict=True):
            by_prompt[req.prompt] = resp
    assert tokens(result.responses) == tokens([by_prompt[r.prompt] for r in requests])
    assert result.stats.prompt_tokens == sim_engine().run("acct", requests).stats.prompt_tokens


# -- the command line -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_command_line_serves_until_terminated() -> None:
    sim_engine()  # skip cleanly when the simulated engine is missing
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "resources.sim.server", "--port", str(port), "--gpu", "L4",
           "--policy", "vllm-v1", "--no-prefix-cache", "--batch-window-ms", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not come up in 20 s"
            time.sleep(0.1)
        body = {"prompt": "same prompt " * 40, "max_tokens": 2}
        url = f"http://127.0.0.1:{port}/v1/completions"
        httpx.post(url, json=body, timeout=10)
        again = httpx.post(url, json=body, timeout=10).json()
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # --no-prefix-cache
    finally:
        terminate_cleanly(proc)  # the server shuts down cleanly and exits 0
