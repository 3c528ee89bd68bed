"""The Ray executor on a real local Ray cluster (2 CPUs, started once for the module) against
real sim server subprocesses: same answers as the fleet client, Ray keeps the blocks cut, a
replica actor killed with SIGKILL loses no row and pays at most one slice twice, and the
response cache makes a rerun free. Slow (a cluster, actor pools)."""

import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")

from benchmarks.lib.fault_setup import MODEL, SimServerProcess, synthetic_requests  # noqa: E402
from benchmarks.lib.prom import scrape  # noqa: E402
from resources.configs import OpenAIEngineConfig, RayEngineConfig  # noqa: E402
from resources.openai.engine import OpenAIEngine  # noqa: E402
from resources.ray_executor.blocks import block_groups_split, cut_blocks  # noqa: E402
from resources.ray_executor.engine import RayFleetEngine  # noqa: E402
from resources.ray_executor.executor import execute_on_ray, ray_cluster, run_on_ray  # noqa: E402
from resources.response_cache import ResponseCache  # noqa: E402
from resources.runner import run_requests  # noqa: E402

pytestmark = pytest.mark.slow

CLIENT = {"model": MODEL, "max_concurrency": 4, "server_style": "vllm", "timeout_s": 30.0,
          "seed": 0}  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster():
        yield


@pytest.fixture
def servers(tmp_path):
    with (
        SimServerProcess(log_path=tmp_path / "a.log") as a,
        SimServerProcess(log_path=tmp_path / "b.log") as b,
    ):
        yield [a.base_url, b.base_url]


def _computed(urls):
    return sum(scrape(f"{u.removesuffix('/v1')}/metrics")["llm_assets_sim:requests_total"]
               for u in urls)  # fmt: skip


def test_ray_answers_as_the_fleet_client_in_request_order(cluster, servers):
    requests = synthetic_requests(48)
    config = OpenAIEngineConfig(base_urls=servers, **CLIENT)
    expected = OpenAIEngine(config=config).run("direct", requests).responses
    for by in ("groups", "default"):
        run = execute_on_ray(requests, config, block_by=by, block_rows=8, relquery_id=by)
        got = run.result.responses
        assert [r.id for r in got] == [r.id for r in requests]
        assert [r.error for r in got] == [None] * len(requests)
        assert [r.text for r in got] == [r.text for r in expected]
        # Ray ran exactly the blocks cut, each on one replica actor
        assert sorted(run.block_replica) == [b[0] for b in run.blocks]
        assert run.blocks == cut_blocks([r.prompt for r in requests], 8, by)
        assert sum(run.sent) == len(requests)
    prompts = [r.prompt for r in requests]
    assert block_groups_split(prompts, cut_blocks(prompts, 8, "groups")) == 0
    assert run_on_ray([], servers, MODEL).responses == []


def test_a_killed_replica_actor_loses_no_row_and_pays_one_slice_at_most(cluster, servers, tmp_path):
    requests = synthetic_requests(96, seed=1)
    engine = RayFleetEngine(config=RayEngineConfig(base_urls=servers, ray_commit_every=4,
                                                   ray_block_rows=24, **CLIENT))  # fmt: skip
    killed = []

    def kill_one(ledger):
        def watch():
            while ray.get(ledger.summary.remote())["committed"] < 30:
                time.sleep(0.02)
            pid = ray.get(ledger.pids.remote())[0][-1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        threading.Thread(target=watch, daemon=True).start()

    engine.on_ledger = kill_one
    cache = ResponseCache(tmp_path / "cache.duckdb")
    first = run_requests(engine, "kill", requests, cache=cache, chunk_size=len(requests))
    assert killed, "the actor was never killed"
    assert [r.id for r in first.responses] == [r.id for r in requests]
    assert first.failed == 0 and first.answered == len(requests)
    assert len(engine.last_run.pids[0]) >= 2  # the replica was served again after the kill
    computed = _computed(servers)
    # only the slice in flight in the killed actor was computed twice
    assert len(requests) <= computed <= len(requests) + 4
    engine.on_ledger = None
    again = run_requests(engine, "kill", requests, cache=cache, chunk_size=len(requests))
    assert again.sent == 0 and again.cache_hits == len(requests)
    assert _computed(servers) == computed
    engine.close()


def test_an_answer_paid_through_the_fleet_client_is_free_through_ray(cluster, servers, tmp_path):
    requests = synthetic_requests(20, seed=2)
    cache = ResponseCache(tmp_path / "cache.duckdb")
    fleet = OpenAIEngine(config=OpenAIEngineConfig(base_urls=servers, **CLIENT))
    paid = run_requests(fleet, "q", requests, cache=cache)
    assert paid.sent == len(requests)
    engine = RayFleetEngine(config=RayEngineConfig(base_urls=servers, **CLIENT))
    free = run_requests(engine, "q", requests, cache=cache)
    assert free.sent == 0 and [r.text for r in free.responses] == [r.text for r in paid.responses]
    assert engine.last_run is None  # Ray was never asked


def test_ray_data_llm_http_processor_runs_without_vllm(cluster, tmp_path):
    """What `ray.data.llm` offers for OpenAI-compatible servers runs here without vLLM, but
    against ONE url per processor (no replica per actor, no prefix groups): why the executor
    uses `map_batches` with its own replica actors instead."""
    import importlib.util

    import ray.data
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: this test is about running without it")
    with SimServerProcess(log_path=tmp_path / "s.log") as server:
        config = HttpRequestProcessorConfig(url=f"{server.base_url}/completions", batch_size=4)
        processor = build_processor(
            config,
            preprocess=lambda row: {"payload": {"model": MODEL, "prompt": row["prompt"],
                                                "max_tokens": 2}},  # fmt: skip
            postprocess=lambda row: {"n": row["n"],
                                     "text": row["http_response"]["choices"][0]["text"]},
        )  # fmt: skip
        rows = [{"n": i, "prompt": f"Q: is movie {i} for kids?"} for i in range(6)]
        out = processor(ray.data.from_items(rows)).take_all()
    assert sorted(r["n"] for r in out) == list(range(6))
    assert all(r["text"] for r in out)


def test_a_query_through_ray_answers_the_rows_the_fleet_client_answers(cluster, servers):
    """The whole pipeline (plan, send, result, answer) on the Q2 movies query (a Yes/No filter,
    so a mixed-up answer changes the rows kept): the Ray engine and the fleet client give the
    same rows over the same replicas."""
    from llm_assets.benchmark_queries import SYSTEM_PROMPTS, compile_query
    from llm_assets.data import generate
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.run import run_query

    tables = generate("movies", seed=3)
    tables["reviews"] = tables["reviews"].sample(80, random_state=3).reset_index(drop=True)
    query = compile_query("q2", "movies")
    options = QueryOptions(system_prompt=SYSTEM_PROMPTS["q2"]["movies"])
    fleet = OpenAIEngine(config=OpenAIEngineConfig(base_urls=servers, **CLIENT))
    on_ray = RayFleetEngine(config=RayEngineConfig(base_urls=servers, **CLIENT))
    expected = run_query(query, tables, options, fleet)
    got = run_query(query, tables, options, on_ray)
    assert on_ray.last_run is not None and sum(on_ray.last_run.sent) == got.stages[0].sent > 0
    assert "failed" not in set(got.result["status"])
    assert list(got.result["status"]) == list(expected.result["status"])
    assert got.answer.equals(expected.answer) and 0 < len(got.answer) < len(got.result)
    on_ray.close()
