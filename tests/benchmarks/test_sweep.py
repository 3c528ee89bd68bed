"""The closed-loop sweep's client model (`benchmarks.lib.sweep.ClientModel`): each cost term
shows in the metric it should, and only there. Red when a term is taken out of the model."""

from __future__ import annotations

import pytest

from benchmarks.lib.sweep import IDEAL_CLIENT, ClientModel, _Client, simulate_point

H100, LLAMA3 = "H100-80GB", "llama-3-8b"


def _point(concurrency: int, client: ClientModel, n_out: int = 64, waves: int = 4) -> dict:
    lengths = [(64, n_out)] * (waves * concurrency)
    return simulate_point(H100, LLAMA3, concurrency, lengths, timing="vllm-2026", client=client)


def test_a_saturated_client_paces_every_stream() -> None:
    # 8 streams asking for a token each ~6.6 ms (1,200 tokens/s) from a client that reads 500/s.
    chunk = 0.002
    point = _point(8, ClientModel(chunk_cpu_s=chunk))
    assert point["tpot_ms_p50"] == pytest.approx(1000 * 8 * chunk, rel=0.03)
    assert point["output_tok_per_s"] == pytest.approx(1 / chunk, rel=0.05)


def test_a_client_with_cpu_to_spare_leaves_tpot_to_the_engine() -> None:
    busy = _point(2, ClientModel(chunk_cpu_s=0.0005))
    ideal = _point(2, IDEAL_CLIENT)
    assert busy["tpot_ms_p50"] == pytest.approx(ideal["tpot_ms_p50"], rel=0.02)


def test_one_request_at_a_time_pays_the_request_cpu_and_the_latency_in_its_ttft() -> None:
    client = ClientModel(request_cpu_s=0.001, latency_s=0.003)
    slow, ideal = _point(1, client), _point(1, IDEAL_CLIENT)
    assert slow["ttft_ms_p50"] - ideal["ttft_ms_p50"] == pytest.approx(4.0, abs=1e-6)
    assert slow["tpot_ms_p50"] == pytest.approx(ideal["tpot_ms_p50"], rel=1e-9)


def test_request_cpu_is_shared_so_it_stretches_with_the_streams() -> None:
    # With 16 streams saturating the client, starting a request waits its share of the CPU.
    base = ClientModel(chunk_cpu_s=0.001)
    more = ClientModel(chunk_cpu_s=0.001, request_cpu_s=0.001)
    extra = _point(16, more)["ttft_ms_p50"] - _point(16, base)["ttft_ms_p50"]
    assert extra > 4.0  # several times the 1 ms it costs alone


def test_jitter_draws_each_latency_uniformly_around_the_mean() -> None:
    fixed = _Client(ClientModel(latency_s=0.004), 1, [8] * 4000)
    jittered = _Client(ClientModel(latency_s=0.004, jitter=True), 1, [8] * 4000)
    assert set(fixed._latency) == {0.004}
    assert 0.0 <= min(jittered._latency) and max(jittered._latency) <= 0.008
    assert sum(jittered._latency) / 4000 == pytest.approx(0.004, rel=0.03)
    assert len(set(jittered._latency)) == 4000


def test_given_prompts_share_their_prefix_in_the_cache() -> None:
    shared = [list(range(100, 164)) + [i] for i in range(4)]
    lengths = [(65, 8)] * 8
    cached = simulate_point(H100, LLAMA3, 1, lengths, timing="vllm-2026", prompt_ids=shared)
    fresh = simulate_point(H100, LLAMA3, 1, lengths, timing="vllm-2026")
    assert cached["ttft_ms_p50"] < fresh["ttft_ms_p50"]


def test_an_idle_engine_waits_for_a_client_still_reading_its_backlog() -> None:
    # The engine ends both streams long before the client has read them: it idles, and asks the
    # client only for its next request, not to run on past tokens it has yet to produce (the
    # client refuses a token from its past).
    lengths = [(64, 8), (64, 16)] * 3
    client = ClientModel(chunk_cpu_s=0.02)
    point = simulate_point(H100, LLAMA3, 2, lengths, timing="vllm-2026", client=client)
    assert 20.0 <= point["tpot_ms_p50"] <= 2 * 20.0 * 1.05
