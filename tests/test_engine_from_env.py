"""One way from the environment to an engine (issue 23 item 2): `llm-assets run --engine KIND`
and the resource the code location binds for `LLM_ASSETS_ENGINE=KIND`, set up in a real
Dagster run, build the same engine settings from the same environment and refuse the same bad
environment with the same one-line error (both call `resources.llm_resources.engine_resource`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest

from jobs.resources import resources_for
from llm_assets.cli import commands as cli
from resources.llm_resources import LLMEngineResource

GOOD = {
    "openai": {
        "LLM_ASSETS_OPENAI_BASE_URL": "http://127.0.0.1:9/v1,http://127.0.0.1:10/v1",
        "LLM_ASSETS_OPENAI_MODEL": "tiny",
        "LLM_ASSETS_OPENAI_MAX_CONCURRENCY": "3",
        "LLM_ASSETS_OPENAI_TIMEOUT_S": "7.5",
        "LLM_ASSETS_OPENAI_ROUTING": "round_robin",
    },
    "vllm": {"LLM_ASSETS_VLLM_MODEL": "facebook/opt-125m"},
    # {tmp}: a folder holding a GGUF file `m.gguf` and an executable `llama-server` (the
    # engine resolves both when it is built; no server starts until a request needs one)
    "llama_cpp": {
        "LLM_ASSETS_LLAMA_CPP_MODEL": "{tmp}/m.gguf",
        "LLM_ASSETS_LLAMA_CPP_LLAMA_SERVER": "{tmp}/llama-server",
        "LLM_ASSETS_LLAMA_CPP_SLOTS": "3",
    },
}
BAD = {
    "openai, no model": ("openai", {"LLM_ASSETS_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}),
    "openai, a bad number": (
        "openai",
        {**GOOD["openai"], "LLM_ASSETS_OPENAI_MAX_CONCURRENCY": "lots"},
    ),
    "vllm, no model": ("vllm", {"LLM_ASSETS_VLLM_MAX_MODEL_LEN": "2048"}),
    "vllm, an empty model": ("vllm", {"LLM_ASSETS_VLLM_MODEL": ""}),
    "llama_cpp, an unknown model": ("llama_cpp", {"LLM_ASSETS_LLAMA_CPP_MODEL": "smollm2-13b"}),
    "llama_cpp, no slots": ("llama_cpp", {"LLM_ASSETS_LLAMA_CPP_SLOTS": "0"}),
}


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Sets exactly the given engine variables (every other LLM_ASSETS_OPENAI_/VLLM_/LLAMA_
    one removed); `{tmp}` in a value is a folder with a GGUF file and an executable."""
    for name in list(os.environ):
        if name.startswith(("LLM_ASSETS_OPENAI_", "LLM_ASSETS_VLLM_", "LLM_ASSETS_LLAMA_")):
            monkeypatch.delenv(name)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    (tmp_path / "llama-server").chmod(0o755)

    def set_all(values: dict[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value.format(tmp=tmp_path))

    return set_all


def cli_engine(kind: str):
    """What `llm-assets run --engine KIND` builds (the default switches)."""
    return cli.build_engine(kind, "L4", None, "vllm-v1", True)


def dagster_engine(kind: str):
    """The engine the code location's resource sets up in a real run, or the one-line
    message of the error that failed the run."""
    seen = []

    @dg.asset
    def engine_probe(llm_engine: LLMEngineResource) -> None:
        seen.append(llm_engine.engine)

    resource = resources_for(kind)["llm_engine"]
    result = dg.materialize(
        [engine_probe], resources={"llm_engine": resource}, raise_on_error=False
    )
    if result.success:
        return seen[0]
    failure = next(e for e in result.all_events if e.is_failure)
    error = failure.event_specific_data.error
    while error is not None and error.cls_name != "ValueError":
        error = error.cause
    assert error is not None, failure
    return error.message.removeprefix("ValueError: ").strip()


def settings(engine) -> dict:
    urls = getattr(engine, "base_urls", None)
    return {**engine.config.model_dump(), "urls": urls}


@pytest.mark.parametrize("kind", ["openai", "vllm", "llama_cpp"])
def test_the_cli_and_the_resource_build_the_same_settings(kind, environ) -> None:
    environ(GOOD[kind])
    from_cli, from_dagster = cli_engine(kind), dagster_engine(kind)
    assert not isinstance(from_dagster, str), from_dagster
    assert settings(from_cli) == settings(from_dagster)
    every_variable_read = {
        "openai": {"max_concurrency": 3, "timeout_s": 7.5, "routing": "round_robin"},
        "vllm": {"model": "facebook/opt-125m"},
        "llama_cpp": {"slots": 3},
    }[kind]
    assert every_variable_read.items() <= settings(from_cli).items()


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_cli_and_the_resource_give_the_same_one_line_error(case, environ, capsys) -> None:
    kind, values = BAD[case]
    environ(values)
    message = dagster_engine(kind)
    assert isinstance(message, str) and message and "\n" not in message, message
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli_engine(kind)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_the_console_script_prints_that_error(environ, tmp_path) -> None:
    kind, values = BAD["openai, no model"]
    environ(values)
    message = dagster_engine(kind)
    table, query = tmp_path / "t.csv", tmp_path / "q.sql"
    table.write_text("review\ngood\n")
    query.write_text("SELECT LLM('Fair? {review}', t.review) FROM t")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_assets.cli", "run", str(query), "--table", f"t={table}",
         "--engine", kind, "--no-cache"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "LLM_ASSETS_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr == f"error: {message}\n", proc.stderr
    assert "model" in message and "LLM_ASSETS_OPENAI_MODEL" in message
