"""The Ray executor on a real local Ray cluster with Ray's job server: a head started by the
fixture (`ray start --head --block`, the dashboard on, token authentication as Ray 2.60's
default) in front of two sim server subprocesses, on a table that is none of the repo's
fixtures (rows of ../shared/data/contributions.csv). The CLI (`--executor ray
--ray-address`, this process the Ray driver) and a Dagster asset whose stage is a Ray job
submitted through dagster-ray's Pipes client answer the same rows as the in-process sim path.
Slow (a Ray head with its dashboard, Ray jobs)."""

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
pytest.importorskip("dagster_ray", reason="dagster-ray is not installed (pip install '.[ray]')")
if importlib.util.find_spec("aiohttp_cors") is None:  # a ray[default] requirement
    pytest.skip(
        "Ray's job server needs ray[default]: pip install '.[ray]'", allow_module_level=True
    )

import dagster as dg  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from benchmarks.lib.fault_setup import MODEL, SimServerProcess  # noqa: E402
from llm_assets import default_resources, llm_query_assets  # noqa: E402
from llm_assets.cli import main as cli  # noqa: E402
from resources.llm_resources import RayEngineResource, ResponseCacheResource  # noqa: E402
from tests.conftest import ROOT, shared_file  # noqa: E402

pytestmark = pytest.mark.slow

SQL = """SELECT c.TRAN_ID, c.NAME, c.EMPLOYER,
       LLM('Which sector does this employer belong to? {EMPLOYER} {OCCUPATION}',
           c.EMPLOYER, c.OCCUPATION, output => 'choice(finance,health,tech,other)') AS sector
FROM contributions c
WHERE LLM('Is this donor retired or not employed? {OCCUPATION} {EMPLOYER}',
          c.OCCUPATION, c.EMPLOYER) = 'Yes'
"""
"""Two LLM stages: a Yes/No filter (a mixed-up answer changes the rows kept) and a choice."""

CLIENT = {"model": MODEL, "max_concurrency": 4, "server_style": "vllm", "timeout_s": 60.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """90 rows of the FEC contributions file: employers repeat, so GGR forms prefix groups."""
    rows = pd.read_csv(shared_file("data", "contributions.csv"), dtype=str).iloc[2000:2090]
    path = tmp_path_factory.mktemp("table") / "contributions.csv"
    rows.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head with its job server on 127.0.0.1, in its own process group (stopped by that
    group's id); workers and jobs import this checkout and find `python` in this venv. Token
    authentication off on the head (`ray start` turns it on by default in Ray 2.60, while a
    client reads RAY_AUTH_MODE once, when Ray is imported: this process's client is off)."""
    folder = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # short: Ray's socket paths
    port, dashboard = _free_port(), _free_port()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT), "PATH": path}
    ray = str(Path(sys.executable).parent / "ray")
    command = [ray, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
               str(port), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
               "--include-dashboard=true", "--num-cpus", "2", "--object-store-memory",
               str(300 * 2**20), "--temp-dir", str(folder), "--disable-usage-stats"]  # fmt: skip
    log = open(folder / "head.log", "wb")  # noqa: SIM115 - closed at teardown
    head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{dashboard}"
    try:
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 240
        status = None
        while status != "SUCCEEDED":  # ready: a job that imports this package ran
            try:
                client = JobSubmissionClient(url)
                job = client.submit_job(entrypoint="python -c 'import resources.ray_executor'")
                while not (status := client.get_job_status(job)).is_terminal():
                    time.sleep(1)
            except Exception:  # the job server, then its agent, come up after the head
                status = None
            if status != "SUCCEEDED":
                if head.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((folder / "head.log").read_text()[-2000:]) from None
                time.sleep(2)
        yield {"gcs": f"127.0.0.1:{port}", "dashboard": url}
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            try:
                head.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("servers")
    with (
        SimServerProcess(log_path=logs / "a.log") as a,
        SimServerProcess(log_path=logs / "b.log") as b,
    ):
        yield [a.base_url, b.base_url]


def _rows(frame: pd.DataFrame) -> pd.DataFrame:
    """What a user reads of `result`: every row's status and answers, in row order."""
    keep = [c for c in frame.columns if c in ("TRAN_ID", "NAME", "status", "passed", "sector")
            or c.startswith("_llm")]  # fmt: skip
    return frame[keep].sort_values("TRAN_ID", kind="stable").reset_index(drop=True)


def test_cli_on_ray_answers_the_rows_of_the_in_process_sim(ray_head, servers, table, tmp_path,
                                                           monkeypatch):  # fmt: skip
    (tmp_path / "q.sql").write_text(SQL)
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    args = ["run", "q.sql", "--table", f"contributions={table}", "--no-cache"]
    sim = CliRunner().invoke(cli, [*args, "--out", "sim.parquet"])
    assert sim.exit_code == 0, sim.output
    monkeypatch.setenv("LLM_ASSETS_OPENAI_BASE_URL", ",".join(servers))
    monkeypatch.setenv("LLM_ASSETS_OPENAI_MODEL", MODEL)
    monkeypatch.setenv("LLM_ASSETS_OPENAI_SERVER_STYLE", "vllm")
    ray_args = ["--executor", "ray", "--ray-address", ray_head["gcs"], "--out", "ray.parquet"]
    # the CLI as a user runs it, a process of its own: in one process, a driver that started
    # and shut down a local cluster (an earlier test) and then joins this head loses its
    # actors (ActorDiedError, Ray 2.60), which a separate CLI process never meets
    on_ray = subprocess.run([sys.executable, "-m", "llm_assets.cli", *args, *ray_args],
                            cwd=tmp_path, env={**os.environ, "RAY_AUTH_MODE": "disabled"},
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    report = json.loads(on_ray.stdout.strip().splitlines()[-1])
    assert report["requests_sent"] > 0 and sorted(report["replica_answers"]) == sorted(servers)
    expected, got = pd.read_parquet("sim.parquet"), pd.read_parquet("ray.parquet")
    assert "failed" not in set(got["status"])
    pd.testing.assert_frame_equal(_rows(got), _rows(expected))
    assert 0 < got["passed"].sum() < len(got)  # the LLM filter kept some rows, not all


def _materialize(name: str, table: Path, resources: dict, instance) -> dg.ExecuteInProcessResult:
    defs = llm_query_assets(name, SQL, sources={"contributions": str(table)})
    return dg.materialize([*defs.assets], resources=resources, instance=instance,
                          raise_on_error=False)  # fmt: skip


def _llm_outputs_metadata(result) -> list[dict]:
    return [e.materialization.metadata for e in result.get_asset_materialization_events()
            if e.materialization.asset_key.path[-1].startswith("llm_outputs")]  # fmt: skip


def test_a_dagster_asset_through_pipes_answers_the_rows_of_the_in_process_sim(
    ray_head, servers, table, tmp_path, monkeypatch
):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    engine = RayEngineResource(base_urls=servers, ray_address=ray_head["dashboard"],
                               ray_submit="job", **CLIENT)  # fmt: skip
    cache = ResponseCacheResource(path=str(tmp_path / "responses.duckdb"))
    with dg.instance_for_test() as instance:
        sim = _materialize("contrib_sim", table, default_resources("sim"), instance)
        assert sim.success
        resources = {**default_resources("ray"), "llm_engine": engine, "response_cache": cache}
        on_ray = _materialize("contrib_ray", table, resources, instance)
        assert on_ray.success, [e.message for e in on_ray.all_events if e.is_failure]
        expected = sim.asset_value(dg.AssetKey(["contrib_sim", "result"]))
        got = on_ray.asset_value(dg.AssetKey(["contrib_ray", "result"]))
        assert "failed" not in set(got["status"])
        pd.testing.assert_frame_equal(_rows(got), _rows(expected))
        assert 0 < got["passed"].sum() < len(got)
        stages = _llm_outputs_metadata(on_ray)
        assert len(stages) == 2
        for meta in stages:  # every stage was a Ray job, its figures folded into the metadata
            jobs = meta["ray_jobs"].value
            assert jobs and all(j["job_id"].startswith("pipes-") for j in jobs)
            sent = meta["requests_sent"].value
            assert sent > 0 and sum(j["answered"] for j in jobs) == sent
            assert sum(sum(j["sent_per_replica"]) for j in jobs) == sent
            assert meta["replica_answers"].value  # answers name their replica
        again = _materialize("contrib_ray", table, resources, instance)  # the response cache
        assert again.success
        assert [m["requests_sent"].value for m in _llm_outputs_metadata(again)] == [0, 0]
        assert all("ray_jobs" not in m for m in _llm_outputs_metadata(again))


def test_a_bad_job_server_address_fails_the_step_in_one_line_naming_it(servers, table, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    bad = f"http://127.0.0.1:{_free_port()}"
    engine = RayEngineResource(base_urls=servers, ray_address=bad, ray_submit="job", **CLIENT)
    resources = {**default_resources("ray"), "llm_engine": engine,
                 "response_cache": ResponseCacheResource(enabled=False)}  # fmt: skip
    with dg.instance_for_test() as instance:
        result = _materialize("contrib_bad", table, resources, instance)
    assert not result.success
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error, messages = failures[0].step_failure_data.error, []
    while error is not None:  # Dagster wraps the step's own error: read down to it
        messages.append(error.message.strip())
        error = error.cause
    mine = [m for m in messages if f"ray_address {bad!r}: no Ray job server answers there" in m]
    assert mine and "\n" not in mine[0], messages
