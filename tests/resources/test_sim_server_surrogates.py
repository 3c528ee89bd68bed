"""Issue 36 item 4: a lone UTF-16 surrogate (`"\\ud800"` in the JSON) in any text of a request
is the client's error: a 400 naming the field, not a 500 from the tokenizer; a well-formed
surrogate pair (an emoji) is ordinary text."""

import json

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.sim.server import serve_in_thread

SURROGATES = st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}")
TEXT = st.text(st.characters(codec="utf-8", exclude_characters='"\\'), max_size=20)


def escaped(text: str) -> str:
    return json.dumps(text)[1:-1]


def bodies(where: str, lone: str, before: str, after: str) -> tuple[str, str, str]:
    """(path, raw JSON body with `lone` spliced into the field, the field's dotted name)."""
    text = escaped(before) + lone + escaped(after)
    if where == "prompt":
        return "/completions", f'{{"prompt": "{text}", "max_tokens": 2}}', "prompt"
    if where == "prompt_list":
        return "/completions", f'{{"prompt": ["ok", "{text}"], "max_tokens": 2}}', "prompt[1]"
    if where == "content":
        raw = f'{{"messages": [{{"role": "user", "content": "{text}"}}], "max_tokens": 2}}'
        return "/chat/completions", raw, "messages[0].content"
    return "/completions", f'{{"prompt": "x", "stop": ["{text}"], "max_tokens": 2}}', "stop[0]"


@settings(max_examples=40, deadline=None)
@given(
    where=st.sampled_from(["prompt", "prompt_list", "content", "stop"]),
    lone=SURROGATES,
    before=TEXT,
    after=TEXT,
)
def test_a_lone_surrogate_anywhere_is_a_400_naming_its_field(where, lone, before, after):
    with serve_in_thread(model="llama-2-7b") as url:
        path, raw, field = bodies(where, lone, before, after)
        reply = httpx.post(url + path, content=raw, headers={"Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and "lone UTF-16 surrogate" in error["message"], error


def test_a_surrogate_pair_is_text_and_is_answered():
    with serve_in_thread(model="llama-2-7b") as url:
        raw = '{"prompt": "smile \\ud83d\\ude00 please", "max_tokens": 2}'
        reply = httpx.post(url + "/completions", content=raw)
    assert reply.status_code == 200, reply.text
