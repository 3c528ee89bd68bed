"""Real weights end to end: the bundled models on llama.cpp's `llama-server`, started and
stopped by the `llama_cpp` engine, from the CLI and from a Dagster run.

Skipped (one line) unless the binary is built (`make llama-server`) and the models installed
(`make models`); `.ci/run` does both. Asserted, for both models: a `choice(...)` query answers
every row in its allowed form (llama.cpp's grammar), every row is answered or skipped with its
reason, and no server is left running after a run, a failed step or a `kill -9` of the
process that started it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from resources.llama_cpp.binary import server_binary
from resources.llama_cpp.models import BUNDLED, resolve_model

if server_binary() is None:
    pytest.skip("llama-server is not built (make llama-server)", allow_module_level=True)
try:
    MODELS = {name: resolve_model(name) for name in BUNDLED}
except (FileNotFoundError, ValueError) as exc:
    pytest.skip(f"bundled models not installed (make models): {exc}", allow_module_level=True)

from llm_assets import llm_query_assets  # noqa: E402
from llm_assets.assets.defaults import default_resources  # noqa: E402
from resources.engine import EngineWrapper  # noqa: E402
from resources.llama_cpp.engine import LlamaCppEngine  # noqa: E402
from resources.llm_resources import LlamaCppEngineResource  # noqa: E402
from tests.resources.test_llama_cpp_engine import _server_pids  # noqa: E402

pytestmark = pytest.mark.llama_cpp

ROOT = Path(__file__).resolve().parents[2]
REVIEWS = ROOT / "docs" / "examples" / "reviews.csv"
QUERY = ROOT / "docs" / "examples" / "sentiment.sql"
SQL = QUERY.read_text()


def _servers_of(home: Path) -> list[int]:
    """Live llama-server processes started under `LLM_ASSETS_HOME=home` (the variable is
    inherited from the process that started them), so a benchmark's servers running beside the
    tests on the same machine never count."""
    mine = f"LLM_ASSETS_HOME={home}".encode()
    pids = []
    for model in MODELS.values():
        for pid in _server_pids(str(model.path)):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in environ:
                pids.append(pid)
    return pids


def _no_server_left(home: Path, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _servers_of(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _servers_of(home)


def _cli(*args: str, home: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_assets.cli", *args],
        env={**os.environ, "LLM_ASSETS_HOME": str(home)},
        text=True,
        **popen,
    )


@pytest.mark.parametrize("model", sorted(BUNDLED))
def test_the_cli_answers_every_row_in_its_allowed_form_and_leaves_no_server(model, tmp_path):
    out = tmp_path / "out.csv"
    proc = _cli(
        "run", str(QUERY), "--table", f"reviews={REVIEWS}", "--engine", "llama_cpp",
        "--model", model, "--out", str(out), "--no-cache",
        home=tmp_path / "home", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["engine"] == "llama_cpp" and summary["model"] == model
    rows = pd.read_csv(out, keep_default_na=False)
    assert summary["rows"]["answered"] + summary["rows"]["skipped"] == len(rows) == 24
    assert summary["rows"]["failed"] == 0 and summary["errors"] == 0
    answered = rows[rows["status"] == "answered"]
    assert set(answered["sentiment"]) <= {"positive", "negative"}  # parse rate 100%
    assert rows.loc[rows["status"] == "skipped", "reason"].tolist() == [
        "null in LLM field 'review'"
    ]
    assert summary["cached_tokens"] > 0  # prompts share the instruction
    assert _no_server_left(tmp_path / "home")


def test_a_killed_cli_leaves_no_server_behind(tmp_path):
    """kill -9 runs no cleanup in the CLI: the server's watchdog ends it."""
    table = tmp_path / "many.csv"
    pd.DataFrame(
        {
            "id": range(400),
            "review": [f"Review {i}: the film was {'good ' * (i % 7)}." for i in range(400)],
        }
    ).to_csv(table, index=False)
    log_dir = tmp_path / "home" / "llama-server"
    proc = _cli(
        "run", str(QUERY), "--table", f"reviews={table}", "--engine", "llama_cpp", "--no-cache",
        home=tmp_path / "home", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the server answers requests
            logs = list(log_dir.glob("*.log"))
            if logs and "launch_slot_" in logs[0].read_text(errors="replace"):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the server never started serving")
        assert _servers_of(tmp_path / "home")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert _no_server_left(tmp_path / "home")
    finally:
        proc.kill()


def _defs(tmp_path, monkeypatch, name="reviews_sentiment"):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    return llm_query_assets(name, SQL, sources={"reviews": str(REVIEWS)})


def test_a_dagster_run_on_the_resource_answers_and_stops_its_server(tmp_path, monkeypatch):
    defs = _defs(tmp_path, monkeypatch)
    resources = {
        **default_resources("llama_cpp"),
        "llm_engine": LlamaCppEngineResource(model="gemma3-270m", slots=1),
    }
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=resources)
    assert result.success
    rows = result.output_for_node("reviews_sentiment__result")
    answered = rows[rows["status"] == "answered"]
    assert len(answered) == 23 and set(answered["sentiment"]) <= {"positive", "negative"}
    assert _no_server_left(tmp_path / "home")


class _FailsAfterAnswering(EngineWrapper):
    def run(self, relquery_id, requests):
        self.inner.run(relquery_id, requests)
        raise RuntimeError("the step fails after the server answered")


class _FailingResource(LlamaCppEngineResource):
    def build_engine(self):
        return _FailsAfterAnswering(LlamaCppEngine(config=self.settings()))


def test_a_failed_step_leaves_no_server_behind(tmp_path, monkeypatch):
    defs = _defs(tmp_path, monkeypatch)
    resources = {**default_resources("llama_cpp"), "llm_engine": _FailingResource(slots=1)}
    result = dg.materialize(list(defs.assets), resources=resources, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "after the server answered" in str(failure.event_specific_data.error)
    assert _no_server_left(tmp_path / "home")
