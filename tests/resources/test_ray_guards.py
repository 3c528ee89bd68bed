"""The Ray executor's error guards, each one line naming the value, before anything is sent or
submitted (no Ray cluster needed): a driver address where nothing answers, `--ray-address` and
`--executor ray` with an engine they do not fit, `ray_submit="job"` outside a Dagster asset,
without an address or with a replica URL carrying credentials; and the Parquet exchange of a
Ray job keeps requests and answers row for row."""

import socket

import pytest
from click.testing import CliRunner

from benchmarks.lib.fault_setup import MODEL, synthetic_requests
from llm_assets.cli import main as cli
from resources.configs import OpenAIEngineConfig, RayEngineConfig
from resources.engine import Response
from resources.ray_executor.exchange import (
    read_answers,
    read_requests,
    write_answers,
    write_requests,
)
from resources.ray_executor.executor import check_address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line(message: str, *facts: str) -> None:
    assert "\n" not in message.strip(), message
    for fact in facts:
        assert fact in message, (fact, message)


def test_a_driver_address_where_nothing_answers_is_one_line_naming_it():
    bad = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ValueError) as error:
        check_address(bad)
    _one_line(str(error.value), f"ray_address {bad!r}: nothing answers at 127.0.0.1:")
    with pytest.raises(ValueError) as error:
        check_address("head-without-port")
    _one_line(str(error.value), "ray_address 'head-without-port': expected host:port")
    check_address("auto")  # left to ray.init


def test_cli_ray_switches_that_do_not_fit_are_one_error_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("id,review\n1,good\n")
    (tmp_path / "q.sql").write_text("SELECT LLM('Positive? {review}', t.review) AS p FROM t\n")
    base = ["run", "q.sql", "--table", "t=t.csv"]
    for extra, line in (
        (["--ray-address", "10.0.0.1:6379"], "error: --ray-address '10.0.0.1:6379' is for "),
        (["--executor", "ray", "--engine", "vllm"], "error: --executor ray sends to "),
    ):
        result = CliRunner().invoke(cli, base + extra)
        assert result.exit_code == 2, result.output
        _one_line(result.output, line)


def test_cli_on_ray_with_a_bad_address_is_one_error_line(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
    from resources.sim.server import ServerConfig, serve_in_thread

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    (tmp_path / "t.csv").write_text("id,review\n1,good\n2,bad\n")
    (tmp_path / "q.sql").write_text("SELECT LLM('Positive? {review}', t.review) AS p FROM t\n")
    bad = f"127.0.0.1:{_closed_port()}"
    with serve_in_thread(config=ServerConfig(served_model_name=MODEL), model=MODEL) as url:
        monkeypatch.setenv("LLM_ASSETS_OPENAI_BASE_URL", url)
        monkeypatch.setenv("LLM_ASSETS_OPENAI_MODEL", MODEL)
        args = ["run", "q.sql", "--table", "t=t.csv", "--executor", "ray", "--ray-address", bad]
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    _one_line(result.output, f"error: ray_address {bad!r}: nothing answers at")


def test_a_ray_job_is_refused_outside_dagster_without_address_or_with_url_credentials():
    from resources.ray_executor.engine import RayFleetEngine
    from resources.ray_executor.pipes import job_client, run_as_ray_job

    requests = synthetic_requests(3)
    config = RayEngineConfig(base_url="http://127.0.0.1:1/v1", model=MODEL, ray_submit="job")
    with pytest.raises(ValueError) as error:
        RayFleetEngine(config=config).run("q", requests)
    _one_line(str(error.value), "ray_submit='job'", "inside a Dagster asset only")
    client = OpenAIEngineConfig(base_url="http://user:pw@replica:8000/v1", model=MODEL)
    with pytest.raises(ValueError) as error:
        run_as_ray_job(requests, client, config, "q", context=object())
    _one_line(str(error.value), "http://replica:8000/v1 carries user:password@")
    assert "pw" not in str(error.value)
    pytest.importorskip("dagster_ray", reason="dagster-ray is not installed")
    with pytest.raises(ValueError) as error:
        job_client(None)
    _one_line(str(error.value), "ray_submit='job' needs ray_address", "http://head:8265")


def test_the_exchange_keeps_requests_and_answers_row_for_row(tmp_path):
    requests = synthetic_requests(6)
    write_requests(requests, str(tmp_path / "job" / "requests.parquet"))
    assert read_requests(str(tmp_path / "job" / "requests.parquet")) == requests
    answers = [
        Response(r.id, "Yes", 40, 16 * i, 1, 0.1, 0.2, replica=f"http://r{i % 2}/v1")
        for i, r in enumerate(requests)
    ]
    answers[3] = Response(requests[3].id, "", 0, 0, 0, 0.0, 0.0, error="HTTP 500")
    write_answers(answers, str(tmp_path / "job" / "answers.parquet"))
    assert read_answers(str(tmp_path / "job" / "answers.parquet"), requests) == answers
    with pytest.raises(RuntimeError, match="6 answers for 5 requests"):
        read_answers(str(tmp_path / "job" / "answers.parquet"), requests[:5])
    with pytest.raises(RuntimeError, match="came back for request"):
        read_answers(str(tmp_path / "job" / "answers.parquet"), requests[::-1])
