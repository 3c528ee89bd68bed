"""Targeted checks for OpenAI engine behaviour the mutation report found unguarded: error
messages that name what is wrong, the retry log's attempt count, credentials taken out of a
URL without a port, and the `name` OpenAI requires on a JSON schema."""

from __future__ import annotations

import json
import logging

import pytest

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.openai.lean import BadRequest, Target, request_bytes
from resources.openai.wire import (
    MalformedReply,
    completion_from_reply,
    split_url_credentials,
    structured_fields,
)


def test_a_header_with_a_line_break_is_refused_by_name():
    target = Target("h", 80, "/v1", b"POST /v1 HTTP/1.1\r\nHost: h\r\n")
    with pytest.raises(BadRequest, match=r"illegal header 'X-Evil': a line break"):
        request_bytes(target, b"", {"X-Evil": "a\r\nInjected: 1"}, b"{}")


def test_a_reply_with_two_choices_says_how_many_it_had():
    data = {"choices": [{"text": "a"}, {"text": "b"}], "usage": {}}
    with pytest.raises(MalformedReply, match=r"request r7: choices has 2 entries; expected one"):
        completion_from_reply(data, chat=False, request_id="r7")


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("http://u:p@host.example/v1", "http://host.example/v1"),
        ("http://u:p@host.example:8000/v1", "http://host.example:8000/v1"),
        ("http://u:p@[::1]/v1", "http://[::1]/v1"),
    ],
)
def test_split_url_credentials_keeps_the_port_only_when_given(url, clean):
    assert split_url_credentials(url) == (clean, "u", "p")


def test_an_openai_json_schema_is_named():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    spec = OutputSpec(kind="json", schema_json=json.dumps(schema))
    fields = structured_fields(spec, "openai")
    assert fields == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }
    }


def test_the_retry_log_counts_attempts_from_one(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def script(method: str, path: str, body: dict) -> Reply:
        if method == "GET":
            return Reply(404, {})
        calls.append(body)
        if len(calls) == 1:
            return Reply(503, {"error": {"message": "busy"}})
        return Reply(200, completion_body())

    caplog.set_level(logging.INFO, logger="resources.openai.engine")
    with HostileServer(script) as srv:
        engine = OpenAIEngine(
            srv.url, "m", initial_backoff_s=0.01, max_backoff_s=0.05, seed=0, max_retries=2
        )
        result = engine.run("q", [Request("r0", "prompt")])
    assert result.responses[0].error is None
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 1 and "request r0 attempt 1/3 failed" in retries[0], retries
