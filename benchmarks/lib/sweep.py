"""A closed-loop concurrency sweep on the simulated engine, as `vllm bench serve
--max-concurrency C` (or another benchmark client) runs one on a real server.

`C` clients each send a request, read its stream to the last token, and send the next. The
client is co-simulated with the engine (`SimulatedEngine.run_closed_loop`): a request reaches
the engine when its client has sent it, and its tokens reach the client as the engine produces
them. Metrics are measured on the client's side, as the benchmarks measure them: TTFT from
starting a request to reading its first token, TPOT over the later tokens, output throughput.

`ClientModel` says what the client costs. The default is an ideal client (`vllm bench serve`,
asyncio: its per-token work is far below a decode step), which sends the next request the
moment the last token arrives. A client in one Python process whose threads share the
interpreter lock (a thread per concurrent request, each parsing its stream) is one CPU shared by
all its streams: `request_cpu_s` of work to start each request, `chunk_cpu_s` to read each
streamed token, served round-robin (processor sharing) among the threads that have work; plus
`latency_s` between the client sending and the engine receiving (HTTP, the server's request
handling) that takes none of the client's CPU. When C streams ask for more than 1 / chunk_cpu_s
tokens per second, the client, not the engine, sets their pace.

Lengths may vary per request, so requests start and finish at different times and prefill
chunks share steps with decodes (the interference a real sweep shows); `prompt_ids` replaces the
random prompts (no prefix-cache hits, as `--dataset-name random`) with given ones, used in turn.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.cost_model import CostCoefficients

__all__ = ["IDEAL_CLIENT", "ClientModel", "SweepPoint", "random_lengths", "simulate_point"]

SweepPoint = dict[str, float]


@dataclass(frozen=True)
class ClientModel:
    """What the benchmark client costs (see the module docstring)."""

    request_cpu_s: float = 0.0
    """Client CPU to start one request (build and send it), shared with the other threads."""
    chunk_cpu_s: float = 0.0
    """Client CPU to read one streamed token, shared with the other threads."""
    latency_s: float = 0.0
    """From the client sending a request to the engine receiving it, outside the client's CPU:
    the mean; with `jitter`, each request's is drawn uniformly from [0, 2 * latency_s]."""
    jitter: bool = False
    ramp_s: float = 0.0
    """Client k of C starts its first request at k / C * ramp_s (0: all at once, as `vllm bench
    serve`; a long-running harness's threads drift out of phase, which a ramp stands for)."""


IDEAL_CLIENT = ClientModel()


class _Ids:
    """Prompts are space-separated token ids (lengths exact, no tokenizer in between)."""

    name = "token-ids"

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def random_lengths(
    n: int, input_range: tuple[int, int], output_range: tuple[int, int], seed: int = 0
) -> list[tuple[int, int]]:
    """`n` (input, output) lengths drawn uniformly from the inclusive ranges (seeded)."""
    rng = random.Random(seed)
    return [(rng.randint(*input_range), rng.randint(*output_range)) for _ in range(n)]


class _Client:
    """`C` client threads on one CPU (processor sharing), as a `ClosedLoopClient`.

    Request i belongs to thread i % C, which runs its requests in order. Each thread has a queue
    of work: starting a request (`request_cpu_s`), then one item of `chunk_cpu_s` per token as
    the token arrives. The CPU serves every thread with work at an equal share: a virtual clock
    `v` runs at 1 / (threads with work), and an item of w seconds started at virtual time v0
    ends when the clock reaches v0 + w."""

    def __init__(
        self, model: ClientModel, concurrency: int, n_out: Sequence[int], seed: int = 0
    ) -> None:
        self.model = model
        rng = random.Random(seed)
        self._latency = [
            rng.uniform(0.0, 2.0 * model.latency_s) if model.jitter else model.latency_s
            for _ in n_out
        ]
        self.c = concurrency
        self.n_out = list(n_out)
        n = len(self.n_out)
        self.start = [math.nan] * n
        self.first = [math.nan] * n
        self.last = [math.nan] * n
        self.t = 0.0
        self.v = 0.0
        self.busy = 0
        self._seq = 0
        self._work: list[list[tuple[int, int]]] = [[] for _ in range(concurrency)]
        """Per thread: (request, token count) items; count 0 = starting the request."""
        self._serving = [False] * concurrency
        self._ends: list[tuple[float, int, int]] = []  # (virtual end, tiebreak, thread)
        self._ready: list[tuple[float, int, int, int]] = []  # (time, tiebreak, request, count)
        for k in range(min(concurrency, n)):
            self._push_ready(model.ramp_s * k / concurrency, k, 0)

    def _push_ready(self, t: float, request: int, count: int) -> None:
        self._seq += 1
        heapq.heappush(self._ready, (t, self._seq, request, count))

    def _serve(self, thread: int) -> None:
        if self._serving[thread] or not self._work[thread]:
            return
        count = self._work[thread][0][1]
        work = self.model.request_cpu_s if count == 0 else self.model.chunk_cpu_s
        self._serving[thread] = True
        self.busy += 1
        self._seq += 1
        heapq.heappush(self._ends, (self.v + work, self._seq, thread))

    def token(self, index: int, count: int, t: float) -> None:
        if t < self.t:
            raise RuntimeError(f"token at {t} s reached a client already at {self.t} s")
        self._push_ready(t, index, count)

    def advance(self, until: float, stop_at_send: bool = False) -> list[tuple[int, float]]:
        sent: list[tuple[int, float]] = []
        if until < self.t:
            return sent  # already there
        while True:
            t_end = self.t + (self._ends[0][0] - self.v) * self.busy if self._ends else math.inf
            t_ready = self._ready[0][0] if self._ready else math.inf
            t_next = min(t_end, t_ready)
            if t_next > until or t_next == math.inf:
                if until < math.inf:
                    if self.busy:
                        self.v += (until - self.t) / self.busy
                    self.t = until
                return sent
            if self.busy:
                self.v += (t_next - self.t) / self.busy
            self.t = t_next
            if t_ready <= t_end:
                _, _, request, count = heapq.heappop(self._ready)
                thread = request % self.c
                if count == 0:
                    self.start[request] = self.t
                self._work[thread].append((request, count))
                self._serve(thread)
                continue
            v_end, _, thread = heapq.heappop(self._ends)
            self.v = v_end
            self._serving[thread] = False
            self.busy -= 1
            request, count = self._work[thread].pop(0)
            if count == 0:
                sent.append((request, self.t + self._latency[request]))
            else:
                if count == 1:
                    self.first[request] = self.t
                if count == self.n_out[request]:
                    self.last[request] = self.t
                    if request + self.c < len(self.n_out):
                        self._push_ready(self.t, request + self.c, 0)
            self._serve(thread)
            if stop_at_send and sent:
                return sent


def simulate_point(
    gpu: str,
    model: str,
    concurrency: int,
    lengths: Sequence[tuple[int, int]],
    timing: str = "vllm-2024",
    usage: str = "serve",
    seed: int = 0,
    coefficients: CostCoefficients | None = None,
    client: ClientModel = IDEAL_CLIENT,
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> SweepPoint:
    """Median TTFT and TPOT (ms) and output tokens/s of `lengths` (input, output) through
    `concurrency` closed-loop clients on a `vllm serve` engine (its default batch limits: the
    clients bound the concurrency). Prompts are random (no prefix-cache hits, as `vllm bench
    serve --dataset-name random`) unless `prompt_ids` gives them (used in turn; the inputs of
    `lengths` are then their lengths). `coefficients` (e.g. a `fit` of measurements) replace
    the timing profile's cost model; `client` is the benchmark client (`ClientModel`)."""
    rng = random.Random(seed)
    prompts = [
        " ".join(map(str, prompt_ids[i % len(prompt_ids)]))
        if prompt_ids
        else " ".join(str(rng.randrange(1000, 120_000)) for _ in range(n_in))
        for i, (n_in, _) in enumerate(lengths)
    ]
    requests = [
        Request(id=str(i), prompt=p, max_tokens=n_out, output=OutputSpec.text())
        for i, (p, (_, n_out)) in enumerate(zip(prompts, lengths, strict=True))
    ]
    engine = SimulatedEngine(
        gpu,
        model,
        "vllm-v1",
        tokenizer=_Ids(),
        usage=usage,
        timing=timing,
        coefficients=coefficients,
    )
    sim = _Client(client, concurrency, [n_out for _, n_out in lengths], seed)
    result = engine.run_closed_loop("sweep", requests, sim)
    sim.advance(math.inf)  # the client reads the tokens of the last step
    out = [r.output_tokens for r in result.responses]
    if out != sim.n_out:
        raise ValueError("the engine cut some outputs short of their lengths (context length)")
    ttft = [f - s for f, s in zip(sim.first, sim.start, strict=True)]
    tpot = [(e - f) / (n - 1) for f, e, n in zip(sim.first, sim.last, out, strict=True) if n > 1]
    return {
        "concurrency": concurrency,
        "ttft_ms_p50": 1000 * statistics.median(ttft),
        "tpot_ms_p50": 1000 * statistics.median(tpot),
        "output_tok_per_s": sum(out) / (max(sim.last) - min(sim.start)),
    }
