"""Usage a request cannot have is refused (issue 22, item 7): a reply claiming 2**62 prompt
tokens for a short prompt, or more output tokens than `max_tokens`, becomes a failed row,
never a recorded cost. The bound (one token per UTF-8 byte plus `TEMPLATE_TOKENS`) must never
refuse a real tokenizer's count: checked against the Llama 3 tokenizer on hostile text."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.openai.wire import (
    TEMPLATE_TOKENS,
    Completion,
    MalformedReply,
    UsageBounds,
    completion_from_reply,
)
from tests.resources.sim.test_tokenizer import LLAMA3_JSON


def reply(prompt_tokens: int, output_tokens: int, cached: int = 0) -> dict:
    return {
        "choices": [{"text": "ok"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.one_of(st.none(), st.integers(0, 500)), st.integers(0, 3000),
       st.integers(0, 600))  # fmt: skip
def test_counts_beyond_what_the_request_can_have_are_refused(text, max_tokens, p, o) -> None:
    bounds = UsageBounds.of(text, max_tokens)
    most_prompt = len(text.encode("utf-8", "surrogatepass")) + TEMPLATE_TOKENS
    most_output = float("inf") if max_tokens is None else max_tokens + 1
    fits = p <= most_prompt and o <= most_output
    try:
        got = completion_from_reply(reply(p, o), chat=False, request_id="r1", bounds=bounds)
    except MalformedReply as exc:
        assert not fits, exc
        assert str(exc).startswith("request r1: usage.")
        return
    assert fits and got == Completion("ok", p, 0, o)


@functools.cache
def llama3():
    """The Llama 3 tokenizer, loaded once (about a second each time)."""
    pytest.importorskip("tokenizers")
    from resources.sim.tokenizer import load_tokenizer

    return load_tokenizer(LLAMA3_JSON)


@pytest.mark.skipif(not LLAMA3_JSON.is_file(), reason="../shared/tokenizers is absent")
@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=400))
def test_a_real_tokenizer_never_exceeds_the_bound(text: str) -> None:
    tokens = len(llama3().encode(text))
    assert tokens <= UsageBounds.of(text, None).prompt_tokens - TEMPLATE_TOKENS


@pytest.mark.parametrize(
    "usage, why",
    [((2**62, 2), "usage.prompt_tokens 4611686018427387904"), ((20, 9), "max_tokens")],
)
def test_an_implausible_reply_is_a_failed_row_not_a_cost(usage, why: str) -> None:
    prompt_tokens, output_tokens = usage

    def script(method: str, path: str, body: dict) -> Reply:
        if body.get("prompt", "").endswith("#1"):
            return Reply(body=reply(prompt_tokens, output_tokens))
        return Reply(body=completion_body())

    requests = [Request(f"r{i}", "x" * 90 + f"#{i}", max_tokens=4) for i in range(3)]
    with HostileServer(script) as srv:
        engine = OpenAIEngine(srv.url, "m", max_retries=0, probe=False)
        result = engine.run("q", requests)
    bad = result.responses[1]
    assert not bad.ok and why in bad.error
    assert bad.prompt_tokens == 0  # nothing of the claim reaches the accounting
    assert result.stats.prompt_tokens < 1000
    assert result.responses[0].ok and result.responses[2].ok
