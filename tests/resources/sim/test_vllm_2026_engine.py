"""Today's vLLM in the simulator: the engine behaviours of the "vllm-2026" timing profile
(`Efficiency.async_scheduling`, `Efficiency.cuda_graphs`) and the closed-loop client hook
(`SimulatedEngine.run_closed_loop`). Each test turns red when its term is taken out."""

from __future__ import annotations

import dataclasses

import pytest

from resources.sim import SimulatedEngine
from resources.sim.cost_model import (
    CURRENT_EFFICIENCY,
    DEFAULT_EFFICIENCY,
    cuda_graph_sizes,
    get_timing_profile,
    padded_tokens,
)
from resources.sim.relquery import RelQuery
from tests.resources.sim.helpers import IntTokenizer, prompt, req

SYNC = dataclasses.replace(CURRENT_EFFICIENCY, async_scheduling=False, cuda_graphs=False)


def _engine(efficiency) -> SimulatedEngine:
    return SimulatedEngine(
        "H100-80GB",
        "llama-3-8b",
        "vllm-v1",
        tokenizer=IntTokenizer(),
        enable_prefix_caching=False,
        efficiency=efficiency,
    )


def test_only_todays_profile_turns_the_behaviours_on() -> None:
    assert get_timing_profile("vllm-2026").async_scheduling
    assert get_timing_profile("vllm-2026").cuda_graphs
    assert not DEFAULT_EFFICIENCY.async_scheduling and not DEFAULT_EFFICIENCY.cuda_graphs


def _late_arrival_ttft(efficiency, arrival_s: float) -> tuple[float, float]:
    """(TTFT of a request arriving at `arrival_s` while another decodes, that one's TPOT)."""
    long = RelQuery("a", [req("a", prompt(range(100, 132)), max_tokens=60)], 0.0)
    late = RelQuery("b", [req("b", prompt(range(500, 532)), max_tokens=2)], arrival_s)
    out = _engine(efficiency).run_workload([long, late]).relqueries
    a, b = out[0].responses[0], out[1].responses[0]
    return b.ttft_s - arrival_s, (a.finish_s - a.ttft_s) / (a.output_tokens - 1)


def test_async_scheduling_makes_an_arrival_at_a_busy_engine_wait_one_more_step() -> None:
    # Mid-way through one of the long request's decode steps (~6.5 ms each on an H100).
    arrival = 0.1 + 0.0031
    asynchronous = dataclasses.replace(SYNC, async_scheduling=True)
    ttft_async, step = _late_arrival_ttft(asynchronous, arrival)
    ttft_sync, _ = _late_arrival_ttft(SYNC, arrival)
    assert ttft_async - ttft_sync == pytest.approx(step, rel=0.1)


def test_async_scheduling_adds_nothing_when_the_engine_is_idle() -> None:
    asynchronous = dataclasses.replace(SYNC, async_scheduling=True)
    one = [RelQuery("a", [req("a", prompt(range(100, 132)), max_tokens=4)], 0.5)]
    ttft = [
        _engine(e).run_workload(one).relqueries[0].responses[0].ttft_s for e in (asynchronous, SYNC)
    ]
    assert ttft[0] == ttft[1]


def test_cuda_graph_sizes_follow_vllms_default_formula() -> None:
    sizes = cuda_graph_sizes(max_num_seqs=1024, max_num_batched_tokens=8192)
    assert len(sizes) == 51 and sizes[:8] == (1, 2, 4, 8, 16, 24, 32, 40)
    assert sizes[-3:] == (480, 496, 512)
    assert cuda_graph_sizes(max_num_seqs=4, max_num_batched_tokens=8192) == (1, 2, 4, 8)
    assert [padded_tokens(n, sizes) for n in (1, 3, 9, 100, 300, 600)] == [1, 4, 16, 104, 304, 600]


@pytest.mark.parametrize(("n", "pad"), [(3, 1), (4, 0), (5, 3)])
def test_cuda_graphs_pad_a_decode_batch_to_the_next_captured_size(n: int, pad: int) -> None:
    requests = [
        req(str(i), prompt(range(1000 * i, 1000 * i + 16)), max_tokens=20) for i in range(n)
    ]
    graphs = dataclasses.replace(SYNC, cuda_graphs=True)
    tpot = []
    for efficiency in (graphs, SYNC):
        engine = _engine(efficiency)
        r = engine.run("x", requests).responses[0]
        tpot.append((r.finish_s - r.ttft_s) / (r.output_tokens - 1))
    assert tpot[0] - tpot[1] == pytest.approx(pad * engine.coefficients.a, abs=1e-12)


class _OneAfterAnother:
    """A closed-loop client: request i+1 is sent `think_s` after request i's last token."""

    def __init__(self, n_out: list[int], think_s: float) -> None:
        self.n_out, self.think_s = n_out, think_s
        self.tokens: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(n_out))}
        self.queue: list[tuple[int, float]] = [(0, 0.0)]

    def advance(self, until: float, stop_at_send: bool = False) -> list[tuple[int, float]]:
        sent = [s for s in self.queue if s[1] <= until]
        self.queue = [s for s in self.queue if s[1] > until]
        return sent

    def token(self, index: int, count: int, t: float) -> None:
        self.tokens[index].append((count, t))
        if count == self.n_out[index] and index + 1 < len(self.n_out):
            self.queue.append((index + 1, t + self.think_s))


def test_run_closed_loop_takes_arrivals_from_the_client_and_shows_it_every_token() -> None:
    engine = _engine(CURRENT_EFFICIENCY)
    requests = [req(str(i), prompt(range(100 * i, 100 * i + 40)), max_tokens=5) for i in range(3)]
    client = _OneAfterAnother([5, 5, 5], think_s=0.05)
    responses = engine.run_closed_loop("x", requests, client).responses
    for i, r in enumerate(responses):
        counts = [c for c, _ in client.tokens[i]]
        assert counts == [1, 2, 3, 4, 5]
        assert client.tokens[i][0][1] == r.ttft_s and client.tokens[i][-1][1] == r.finish_s
    for before, after in zip(responses, responses[1:], strict=False):
        assert after.ttft_s > before.finish_s + 0.05  # sent only after the previous one ended


def test_run_closed_loop_refuses_a_request_it_cannot_serve() -> None:
    engine = _engine(CURRENT_EFFICIENCY)
    too_long = req("x", prompt(range(9000)), max_tokens=1)
    with pytest.raises(ValueError, match=r"^closed loop: request 0 cannot be served: prompt of"):
        engine.run_closed_loop("x", [too_long], _OneAfterAnother([1], 0.0))
