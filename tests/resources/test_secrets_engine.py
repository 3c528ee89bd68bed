"""An API key from the environment never shows: not in logs, stderr, errors or the cache file.

The sim server runs as a real subprocess that requires the key (`--api-key-env`), with faults
on so that retries, error messages and warnings are all exercised and logged.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

import pytest

from benchmarks.lib.fault_setup import SimServerProcess, synthetic_requests
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import TooManyErrors, raise_if_too_many_errors, run_requests

ENV_VAR = "LLM_ASSETS_TEST_API_KEY"


def test_api_key_from_the_environment_never_leaks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    key = f"sk-test-{secrets.token_hex(16)}"
    monkeypatch.setenv(ENV_VAR, key)
    caplog.set_level(logging.DEBUG)
    flags = ["--api-key-env", ENV_VAR, "--log-level", "DEBUG", "--fault-rate", "0.2",
             "--fault-drop-rate", "0.1", "--fault-malformed-rate", "0.1"]  # fmt: skip
    cache = ResponseCache(tmp_path / "home" / "responses.duckdb")
    requests = synthetic_requests(40)
    shown: list[str] = []
    with SimServerProcess(flags, log_path=tmp_path / "server.log") as server:
        engine = OpenAIEngine(server.base_url, "llama-2-7b", api_key=os.environ[ENV_VAR],
                              max_concurrency=4, initial_backoff_s=0.005, max_backoff_s=0.02,
                              max_retries=10, timeout_s=5.0)  # fmt: skip
        outcome = run_requests(engine, "secret", requests, cache=cache, chunk_size=10)
        shown += [repr(engine), str(engine), repr(outcome), str(outcome.stats)]
        engine.close()
        assert outcome.answered == len(requests), outcome.errors[:3]

        # the key is really required: a wrong one gets 401 error rows
        wrong = OpenAIEngine(server.base_url, "llama-2-7b", api_key="sk-wrong", max_retries=0)
        denied = run_requests(wrong, "denied", synthetic_requests(41)[40:], cache=cache)
        assert denied.failed == 1 and "HTTP 401" in (denied.errors[0].error or "")
        with pytest.raises(TooManyErrors) as info:
            raise_if_too_many_errors(denied, 0.0)
        shown.append(str(info.value))

        # and an exception raised with the key at hand (refused connection, retries exhausted)
        dead = OpenAIEngine("http://127.0.0.1:9/v1", "m", api_key=key, max_retries=1,
                            initial_backoff_s=0.001)  # fmt: skip
        refused = run_requests(dead, "dead", synthetic_requests(2))
        with pytest.raises(TooManyErrors) as info:
            raise_if_too_many_errors(refused, 0.5)
        shown.append(str(info.value))
        shown.append(repr(info.value))
        shown += [r.error or "" for r in refused.responses + denied.responses]

    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert retries, "faults should have caused logged retries"
    captured = capfd.readouterr()
    shown += [caplog.text, captured.out, captured.err]
    shown += [r.getMessage() for r in caplog.records]
    server_log = (tmp_path / "server.log").read_text()
    assert "POST /v1/completions" in server_log  # DEBUG request lines were logged
    shown.append(server_log)
    for text in shown:
        assert key not in text

    assert cache.count() == len(requests)
    files = [p for p in cache.path.parent.iterdir() if p.is_file()]
    assert files
    for path in files:  # the database and any write-ahead log
        assert key.encode() not in path.read_bytes()
