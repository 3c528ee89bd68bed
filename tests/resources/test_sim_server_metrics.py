"""The sim server's `GET /metrics`: vLLM's names, types and labels, counters equal to the usage
the clients got back, the simulated clock, no key needed; `--num-gpu-blocks-override`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lib.prom import sample_sums, samples, scrape, types
from resources.engine import EngineWrapper, Request, RunResult
from resources.sim.engine import SimulatedEngine
from resources.sim.server import ServerConfig, SimServer
from tests.conftest import terminate_cleanly
from tests.resources.test_sim_server import REPO, _free_port

MODEL = "llama-2-7b"

# vLLM's own names and types, as `prometheus_client` exposes the metrics that
# `PrometheusStatLogger` declares in vllm/v1/metrics/loggers.py (vllm-project/vllm, commit
# 005a810bc40f; a Counter "vllm:x" is the sample "vllm:x_total" of TYPE counter), labelled
# model_name=<served name>, engine=<engine index>.
VLLM_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries_total": "counter",
    "vllm:prefix_cache_hits_total": "counter",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
}
SIM_METRICS = {  # the simulator's own, never under vllm:
    "llm_assets_sim:engine_time_seconds_total": "counter",
    "llm_assets_sim:requests_total": "counter",
}

PREFIXES = [
    "You are a careful annotator. Decide if the review is positive.\n" * 3,
    "Rate the movie from 0 to 5. Reply with one number.\n" * 4,
    "Translate the title to French.\n",
]


def sim_engine(**fields: Any) -> SimulatedEngine:
    return SimulatedEngine(gpu="L4", model=MODEL, policy="vllm-v1", **fields)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    config = ServerConfig(served_model_name=MODEL, batch_window_s=0.001)
    with SimServer(sim_engine(), config=config) as srv:
        yield srv


def metrics_of(server: SimServer) -> dict[str, float]:
    return scrape(f"{server.url}/metrics")


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in after}


# -- counters equal what the clients got back ---------------------------------------------------

call = st.tuples(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=3),
    st.sampled_from(["completion", "chat", "too-long"]),
    st.integers(1, 4),
)


def send(client: httpx.Client, prompts: list[str], kind: str, max_tokens: int) -> httpx.Response:
    if kind == "chat":
        messages = [{"role": "user", "content": prompts[0]}]
        return client.post("/chat/completions", json={"messages": messages, "max_tokens": 2})
    if kind == "too-long":  # a 400: the engine never sees it, nothing is counted
        max_tokens = 10**6
    return client.post("/completions", json={"prompt": prompts, "max_tokens": max_tokens})


@settings(max_examples=25, deadline=None)
@given(calls=st.lists(call, min_size=1, max_size=5))
def test_counters_equal_the_usage_returned(server: SimServer, calls: list) -> None:
    before = metrics_of(server)
    sent = {"prompt": 0, "cached": 0, "completion": 0, "requests": 0, "engine_s": 0.0}
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for rows, kind, max_tokens in calls:  # one at a time: each call is its own batch
            prompts = [f"{PREFIXES[p]}Row {r}: a quiet film." for p, r in rows]
            reply = send(client, prompts, kind, max_tokens)
            if kind == "too-long":
                assert reply.status_code == 400
                continue
            body = reply.json()
            assert body["sim"]["batch_size"] == len(body["choices"])
            sent["prompt"] += body["usage"]["prompt_tokens"]
            sent["cached"] += body["usage"]["prompt_tokens_details"]["cached_tokens"]
            sent["completion"] += body["usage"]["completion_tokens"]
            sent["requests"] += len(body["choices"])
            sent["engine_s"] += max(body["sim"]["finish_s"])  # a batch's makespan
    got = delta(metrics_of(server), before)
    assert got["vllm:prefix_cache_hits_total"] == sent["cached"]
    assert got["vllm:prefix_cache_queries_total"] == sent["prompt"]
    assert got["vllm:prompt_tokens_total"] == sent["prompt"]
    assert got["vllm:generation_tokens_total"] == sent["completion"]
    assert got["llm_assets_sim:requests_total"] == sent["requests"]
    assert got["llm_assets_sim:engine_time_seconds_total"] == pytest.approx(sent["engine_s"])


def test_counters_add_up_under_concurrent_clients(server: SimServer) -> None:
    before = metrics_of(server)
    prompts = [[f"{PREFIXES[i % 3]}Row {i}."] * (1 + i % 2) for i in range(24)]
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda p: send(client, p, "completion", 2).json(), prompts))
    got = delta(metrics_of(server), before)
    usage = [r["usage"] for r in replies]
    assert got["vllm:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usage)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert got["vllm:prefix_cache_hits_total"] == cached > 0
    assert got["vllm:generation_tokens_total"] == sum(u["completion_tokens"] for u in usage)
    assert got["llm_assets_sim:requests_total"] == sum(map(len, prompts))


def test_without_prefix_caching_nothing_is_queried_as_on_vllm() -> None:
    with SimServer(sim_engine(enable_prefix_caching=False)) as srv:
        for _ in range(2):
            httpx.post(f"{srv.base_url}/completions", json={"prompt": PREFIXES[0]}, timeout=30)
        got = metrics_of(srv)
    assert got["vllm:prompt_tokens_total"] > 0
    assert got["vllm:prefix_cache_queries_total"] == got["vllm:prefix_cache_hits_total"] == 0


# -- names, types, labels, content type, no key -----------------------------------------------


def test_names_types_and_labels_are_vllms() -> None:
    name = 'org/model "x"\\v2'  # escaped in the label and read back whole
    with SimServer(sim_engine(), config=ServerConfig(served_model_name=name)) as srv:
        httpx.post(f"{srv.base_url}/completions", json={"prompt": PREFIXES[1]}, timeout=30)
        page = httpx.get(f"{srv.url}/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert types(page.text) == VLLM_METRICS | SIM_METRICS
    found = samples(page.text)
    assert sorted(n for n, _, _ in found) == sorted(VLLM_METRICS | SIM_METRICS)
    assert all(labels == {"model_name": name, "engine": "0"} for _, labels, _ in found)
    values = {n: v for n, _, v in found}
    assert 0.0 <= values["vllm:kv_cache_usage_perc"] <= 1.0  # a fraction, as vLLM's
    assert values["vllm:prompt_tokens_total"] > 0


def test_metrics_need_no_key_where_the_api_does() -> None:
    config = ServerConfig(served_model_name=MODEL, api_key="sk-server")
    with SimServer(sim_engine(), config=config) as srv:
        assert httpx.post(f"{srv.base_url}/completions", json={"prompt": "x"}).status_code == 401
        assert httpx.get(f"{srv.url}/metrics").status_code == 200
        assert httpx.post(f"{srv.url}/metrics").status_code == 405


class Gated(EngineWrapper):
    """The simulated engine, holding each batch until `release` is set (to watch the load)."""

    def __init__(self) -> None:
        super().__init__(sim_engine())
        self.release = threading.Event()

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.release.wait(30)
        return self.inner.run(relquery_id, requests)


def test_running_and_waiting_count_requests_in_and_behind_the_batch() -> None:
    engine = Gated()
    config = ServerConfig(served_model_name=MODEL, batch_window_s=0.001)
    with SimServer(engine, config=config) as srv:

        def post(prompts: list[str]) -> None:
            httpx.post(f"{srv.base_url}/completions", json={"prompt": prompts}, timeout=30)

        calls = [threading.Thread(target=post, args=([PREFIXES[0]],))]
        calls[0].start()
        load = wait_for(srv, lambda m: m["vllm:num_requests_running"] == 1)
        assert load["vllm:num_requests_waiting"] == 0
        calls += [threading.Thread(target=post, args=(PREFIXES[1:],))]  # two requests, one call
        calls[1].start()
        wait_for(srv, lambda m: m["vllm:num_requests_waiting"] == 2)
        engine.release.set()
        for thread in calls:
            thread.join(30)
        idle = metrics_of(srv)
    assert idle["vllm:num_requests_running"] == idle["vllm:num_requests_waiting"] == 0
    assert idle["llm_assets_sim:requests_total"] == 3


def wait_for(server: SimServer, ready: Any, timeout_s: float = 10.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while not ready(got := metrics_of(server)):
        assert time.monotonic() < deadline, f"metrics never got there: {got}"
        time.sleep(0.01)
    return got


# -- --num-gpu-blocks-override ----------------------------------------------------------------


@pytest.mark.parametrize(("blocks", "hits"), [(8, False), (None, True)])
def test_num_gpu_blocks_override_forces_eviction(blocks: int | None, hits: bool) -> None:
    """8 blocks (7 usable, 112 tokens): prompt B takes every block, so A's cached prefix is
    evicted and A misses on its return; with the derived KV cache A hits."""
    port = _free_port()
    cmd = [sys.executable, "-m", "resources.sim.server", "--port", str(port),
           "--batch-window-ms", "1", "--log-level", "WARNING"]  # fmt: skip
    if blocks is not None:
        cmd += ["--num-gpu-blocks-override", str(blocks)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while not healthy(url):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not come up in 20 s"
            time.sleep(0.1)
        a, b = "alpha beta gamma " * 25, "one two three four " * 25
        cached, lengths = [], []
        for prompt in (a, b, a):
            reply = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
            usage = reply.raise_for_status().json()["usage"]
            lengths.append(usage["prompt_tokens"] + 1)  # + its one output token
            cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        assert 6 * 16 < lengths[1] <= 7 * 16  # B needs all 7 usable blocks of the small cache
        assert (cached[2] > 0) is hits
        assert scrape(f"{url}/metrics")["vllm:prefix_cache_hits_total"] == sum(cached)
    finally:
        terminate_cleanly(proc)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


# -- the one parser (benchmarks/lib/prom.py), also llama_server.metrics()'s ----------------------

LLAMA_CPP_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""


def test_parser_sums_over_labels_and_refuses_what_it_cannot_read() -> None:
    page = LLAMA_CPP_PAGE + 'x_total{a="1",b="}, \\"q\\""} 2.5\nx_total{a="2"} 1 1700000000\n'
    assert sample_sums(page) == {
        "llamacpp:prompt_tokens_total": 120.0,
        "llamacpp:requests_processing": 0.0,
        "x_total": 3.5,
    }
    assert samples(page)[2][1] == {"a": "1", "b": '}, "q"'}
    assert types(page)["llamacpp:prompt_tokens_total"] == "counter"
    with pytest.raises(ValueError, match="bad labels in metrics line"):
        sample_sums("vllm:x{model_name=1} 3\n")  # an unquoted label value
    with pytest.raises(ValueError, match="not a Prometheus sample line"):
        sample_sums("no-value\n")
