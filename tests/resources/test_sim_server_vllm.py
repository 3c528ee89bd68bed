"""The sim server speaks vLLM's protocol: the official `openai` client against a real server on
127.0.0.1 (context window, empty prompt, sampling bounds, stop strings, refused fields), property
tests of the validation edges and of stop strings, and a clean shutdown on SIGTERM."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from resources.engine import EngineWrapper
from resources.sim.server import ApiError, ServerConfig, SimApp, SimServer, parse_call
from resources.sim.server.stops import cut_at_stop

openai = pytest.importorskip("openai")
SimulatedEngine = pytest.importorskip("resources.sim.engine").SimulatedEngine

REPO = Path(__file__).resolve().parents[2]
MODEL = "llama-2-7b"
WINDOW = 4096  # llama-2-7b's max_model_len
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def engine() -> Any:
    return SimulatedEngine(gpu="L4", model=MODEL, policy="vllm-v1")


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(engine(), config=ServerConfig(served_model_name=MODEL)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: SimServer) -> Any:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)


def bad_request(call: Any, **kwargs: Any) -> dict[str, Any]:
    """The error object of a call that must fail with 400."""
    with pytest.raises(openai.BadRequestError) as info:
        call(model=MODEL, **kwargs)
    assert info.value.status_code == 400
    return info.value.body  # the "error" object


# -- the official client against a real server -------------------------------------------------


def test_max_tokens_over_the_window_is_vllms_400(client: Any, server: SimServer) -> None:
    prompt = "word " * 1000
    prompt_tokens = server.app.facts.count_tokens(prompt)
    error = bad_request(client.completions.create, prompt=prompt, max_tokens=WINDOW)
    assert error["param"] == "input_tokens"
    assert error["message"].startswith(
        f"This model's maximum context length is {WINDOW} tokens. However, you requested "
        f"{WINDOW} output tokens and your prompt contains at least {prompt_tokens} input tokens, "
        f"for a total of at least {WINDOW + prompt_tokens} tokens. Please reduce the length of "
        "the input prompt or the number of requested output tokens."
    )
    chat = bad_request(
        client.chat.completions.create,
        messages=[{"role": "user", "content": prompt}],
        max_completion_tokens=WINDOW - 10,
    )
    assert chat["param"] == "input_tokens"
    ok = client.completions.create(model=MODEL, prompt=prompt, max_tokens=WINDOW - prompt_tokens)
    assert ok.usage.completion_tokens == WINDOW - prompt_tokens  # the window itself is allowed


def test_a_huge_max_tokens_is_a_small_fast_400(client: Any) -> None:
    error = bad_request(client.completions.create, prompt="hi", max_tokens=10**9)
    assert error["param"] == "max_tokens"
    assert "cannot be greater than max_model_len=4096" in error["message"]


def test_an_empty_prompt_is_vllms_400(client: Any) -> None:
    for prompt in ("", [""], ["ok", ""]):
        error = bad_request(client.completions.create, prompt=prompt)
        assert error["param"] == "prompt"
        assert error["message"].startswith(
            "Either prompt or prompt_embeds must be provided and non-empty."
        )


@pytest.mark.parametrize(
    ("field", "value", "wording"),
    [
        ("temperature", -1, "temperature must be non-negative, got -1"),
        ("temperature", "hot", "temperature: Input should be a valid number"),
        ("temperature", 2.5, "temperature must be in [0, 2], got 2.5"),
        ("top_p", 0, "top_p must be in (0, 1], got 0"),
        ("top_p", 1.5, "top_p must be in (0, 1], got 1.5"),
        ("top_k", -2, "top_k must be 0 (disable), or at least 1, got -2"),
        ("presence_penalty", 3, "presence_penalty must be in [-2, 2], got 3"),
        ("frequency_penalty", -3, "frequency_penalty must be in [-2, 2], got -3"),
        ("max_tokens", 0, "max_tokens must be at least 1, got 0"),
        ("n", 2, "n must be 1"),
        ("logprobs", 1, "logprobs is not supported"),
        ("logprobs", 0, "logprobs is not supported"),
        ("echo", True, "echo is not supported"),
        ("stop", "", "stop cannot contain an empty string"),
    ],
)
def test_invalid_fields_are_400s_naming_the_field(
    client: Any, field: str, value: Any, wording: str
) -> None:
    if field in ("top_k", "min_p"):  # vLLM's extra sampling fields travel in extra_body
        error = bad_request(client.completions.create, prompt="hi", extra_body={field: value})
    else:
        error = bad_request(client.completions.create, prompt="hi", **{field: value})
    assert error["param"] == field and error["type"] == "BadRequestError"
    assert wording in error["message"], error["message"]


def test_chat_refuses_logprobs_naming_the_field(client: Any) -> None:
    messages = [{"role": "user", "content": "hi"}]
    error = bad_request(client.chat.completions.create, messages=messages, logprobs=True)
    assert error["param"] == "logprobs"


def test_stop_cuts_the_answer_and_the_usage(client: Any, server: SimServer) -> None:
    full = client.completions.create(model=MODEL, prompt="Tell me", max_tokens=20)
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 20
    text = full.choices[0].text  # "[sim] lorem ipsum dolor ..."
    stopped = client.completions.create(
        model=MODEL, prompt="Tell me", max_tokens=20, stop=["dolor", "sit"]
    )
    choice = stopped.choices[0]
    assert choice.text == text[: text.index("dolor")] and choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] == "dolor"
    through = text[: text.index("dolor") + len("dolor")]
    assert stopped.usage.completion_tokens == server.app.facts.count_tokens(through) < 20
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me"}], max_tokens=20, stop="ipsum"
    )
    assert chat.choices[0].message.content == "[sim] lorem "
    assert chat.choices[0].finish_reason == "stop"
    kept = client.completions.create(
        model=MODEL, prompt="Tell me", max_tokens=20, stop="ipsum",
        extra_body={"include_stop_str_in_output": True},
    )  # fmt: skip
    assert kept.choices[0].text == "[sim] lorem ipsum"


def test_a_huge_request_does_not_hold_up_a_small_one(server: SimServer) -> None:
    """The largest request the window allows, sent with a 10**9 one and a small one at once:
    the small one is answered, the huge one is a 400, and the dispatcher held the largest
    batch for far less wall time than the simulated time it stands for."""
    base = server.base_url
    results: dict[str, Any] = {}

    def post(name: str, body: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        reply = httpx.post(f"{base}/completions", json=body, timeout=120)
        results[name] = (reply.status_code, reply.json(), time.perf_counter() - t0)

    bodies = {
        "huge": {"prompt": "a", "max_tokens": 10**9},
        "window": {"prompt": "b", "max_tokens": WINDOW - 1},
        "small": {"prompt": "c", "max_tokens": 2},
    }
    threads = [threading.Thread(target=post, args=item) for item in bodies.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results["huge"][0] == 400 and results["small"][0] == 200
    status, body, wall_s = results["window"]
    assert status == 200 and body["usage"]["completion_tokens"] == WINDOW - 1
    assert wall_s < body["sim"]["finish_s"][0] / 10, (wall_s, body["sim"])


# -- properties of validation, the window and stop strings (no sockets) -------------------------


def refused(body: dict[str, Any], chat: bool = False) -> str | None:
    """The field a body is refused for, or None when it is accepted."""
    try:
        parse_call(body, chat=chat, default_max_tokens=16)
    except ApiError as exc:
        assert exc.status == 400 and exc.message
        return exc.param
    return None


numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 10)


@FAST
@given(temperature=numbers, top_p=numbers)
def test_sampling_bounds_are_vllms(temperature: float, top_p: float) -> None:
    t_ok = math.isfinite(temperature) and 0 <= temperature <= 2
    p_ok = math.isfinite(top_p) and 0 < top_p <= 1
    param = refused({"prompt": "x", "temperature": temperature, "top_p": top_p})
    assert param == (None if t_ok and p_ok else "temperature" if not t_ok else "top_p")


@FAST
@given(
    max_tokens=st.integers(-5, 10**12)
    | st.from_regex(r"-?[0-9]{1,4}|[a-z]{1,3}", fullmatch=True)
    | st.booleans()
    | st.none()
)
def test_max_tokens_accepts_exactly_the_positive_integers(max_tokens: Any) -> None:
    param = refused({"prompt": "x", "max_tokens": max_tokens})
    as_int: Any = max_tokens
    if isinstance(max_tokens, str):  # pydantic's lax mode reads "5" as 5, as vLLM does
        as_int = int(max_tokens) if max_tokens.lstrip("-").isdigit() else "not a number"
    ok = max_tokens is None or (isinstance(as_int, int) and as_int >= 1)
    assert param == (None if ok else "max_tokens")


@pytest.fixture(scope="module")
def app() -> Iterator[SimApp]:
    sim = SimApp(engine(), ServerConfig(served_model_name=MODEL, batch_window_s=0.0))
    yield sim
    sim.close()


def post(app: SimApp, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reply = app.handle("POST", "/v1/completions", {}, json.dumps(body).encode())
    return reply.status, reply.body


@FAST
@given(words=st.integers(0, 4200), slack=st.integers(-3, 3) | st.integers(-5000, 5000))
def test_the_window_check_is_exact(app: SimApp, words: int, slack: int) -> None:
    """max_tokens = window - prompt tokens + slack: accepted exactly when slack <= 0."""
    prompt = "x" + " y" * words
    prompt_tokens = app.facts.count_tokens(prompt)
    max_tokens = WINDOW - prompt_tokens + slack
    assume(max_tokens >= 1)
    body = {"prompt": prompt, "max_tokens": max_tokens, "structured_outputs": {"choice": ["z"]}}
    status, reply = post(app, body)
    assert status == (200 if slack <= 0 else 400), reply
    if slack > 0:
        assert reply["error"]["param"] == ("max_tokens" if max_tokens > WINDOW else "input_tokens")


@FAST
@given(text=st.text(max_size=40), stops=st.lists(st.text(min_size=1, max_size=3), max_size=3))
def test_cut_at_stop_ends_before_the_earliest_stop(text: str, stops: list[str]) -> None:
    cut = cut_at_stop(text, stops)
    assert text.startswith(cut.through) and cut.through.startswith(cut.text)
    if cut.stop is None:
        assert cut.text == text and not any(s in text for s in stops)
    else:
        assert cut.through == cut.text + cut.stop
        assert not any(s in cut.through[:-1] for s in stops)  # none met earlier


@FAST
@given(start=st.integers(0, 120), length=st.integers(1, 12), max_tokens=st.integers(1, 40))
def test_stop_asks_the_engine_only_for_the_tokens_through_the_stop(
    app: SimApp, start: int, length: int, max_tokens: int
) -> None:
    _, full = post(app, {"prompt": "Describe", "max_tokens": max_tokens})
    answer = full["choices"][0]["text"]
    stop = answer[start : start + length]
    if not stop:
        return
    _, reply = post(app, {"prompt": "Describe", "max_tokens": max_tokens, "stop": stop})
    choice, usage = reply["choices"][0], reply["usage"]
    expected = cut_at_stop(answer, [stop])
    assert choice["text"] == expected.text and choice["finish_reason"] == "stop"
    through_tokens = max(1, app.facts.count_tokens(expected.through))
    assert usage["completion_tokens"] == min(max_tokens, through_tokens)
    if through_tokens < max_tokens:  # the engine stopped generating there, as vLLM does
        assert reply["sim"]["finish_s"][0] < full["sim"]["finish_s"][0]


# -- the command line stops cleanly on SIGTERM ---------------------------------------------------


def _ignore_term_and_int() -> None:
    """What a child of a Dagster-initialised process in a SIGINT-ignoring shell inherits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_sigterm_shuts_the_server_down_even_when_inherited_ignored(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "resources.sim.server", "--port", "0"]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stderr=err, stdout=subprocess.DEVNULL, preexec_fn=_ignore_term_and_int
        )
    try:
        deadline = time.monotonic() + 60
        while "sim server on " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = log.read_text().split("sim server on ")[1].split()[0]
        assert httpx.post(f"{url}/completions", json={"prompt": "x"}, timeout=30).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "sim server stopped (SIGTERM)" in log.read_text()


class Wrapped(EngineWrapper):
    """A simulated engine behind a wrapper: the server cannot preview its answers, so a stop
    string is applied to the full answer and the usage is recounted through the stop."""

    def __init__(self) -> None:
        super().__init__(engine())


def test_stop_on_an_engine_without_preview_recounts_the_usage() -> None:
    wrapped = Wrapped()
    sim = SimApp(wrapped, ServerConfig(served_model_name=MODEL, batch_window_s=0.0))
    try:
        assert sim.facts.preview is None
        _, full = post(sim, {"prompt": "Describe", "max_tokens": 20})
        _, reply = post(sim, {"prompt": "Describe", "max_tokens": 20, "stop": "sit"})
    finally:
        sim.close()
    expected = cut_at_stop(full["choices"][0]["text"], ["sit"])
    assert reply["choices"][0]["text"] == expected.text
    assert reply["usage"]["completion_tokens"] == wrapped.count_tokens(expected.through) < 20
