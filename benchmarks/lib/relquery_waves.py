"""relQuery priority waves for real engines: RelServe's priority estimate as vLLM priorities.

A harness, not part of the product (it lived in `resources/scheduling.py`, reachable only from
its tests). Why it is not wired into the Dagster lineage: Dagster materializes each query's
`llm_outputs` step separately, so no step owns the requests of several queries, and waves
across queries need one coordinator that holds them all (a shared engine-side queue fed by
every step, or one step over several queries), which the lineage does not have. Inside one
engine the same priorities are simulated by the `relserve` policies (`resources.sim.policies`);
this module lets a benchmark drive them on vLLM (`--scheduling-policy priority`).

When one engine serves several relQueries, `RelQueryScheduler` submits their requests in
*waves*. Before each wave it re-estimates every unfinished relQuery's priority with the same
Priority Estimation Model as the simulated RelServe (`resources.sim.pem`: Algorithm 1 and
Eq. 10 over the requests not yet submitted, uncached tokens from the relQuery's cache-miss ratio,
Eq. 11, here *observed* on its completed requests' `cached_tokens` instead of sampled from a
cache we cannot see), then fills the wave with requests of the relQueries in ascending priority
and sets `Request.priority` on each (vLLM's convention: lower runs first). vLLM's priority
scheduler orders the wave's requests inside the engine; the wave boundaries are where progress
(fewer requests left) and cache reuse (a lower miss ratio) change the priorities, as the
Dynamic Priority Updater does at every iteration inside RelServe. Optional starvation
prevention (Eq. 13): a relQuery none of whose requests has been submitted and whose unit waiting
time exceeds `starvation_threshold_s` gets priority 0 and goes first.

`serve_relqueries(engine, relqueries)` drives the waves on any `LLMEngine`: a `VLLMEngine`
built with `scheduling_policy="priority"` passes the priorities to `LLM.generate`, an
`OpenAIEngine` with `send_priority=True` sends them to a vLLM server started with
`--scheduling-policy priority`; other engines just serve the waves in order.

Invariants: every request is submitted exactly once, with its relQuery's priority at that wave;
a wave never holds more than `max_wave_requests` requests; within a relQuery, requests keep
their submission order; priorities are integers >= 0; the result has one `Response` per request
of each relQuery, in that relQuery's request order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from resources.engine import LLMEngine, Request, Response, RunResult, RunStats
from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.cost_model import coefficients_from_profile
from resources.sim.pem import LinearPredictors, pem
from resources.sim.profiles import resolve_deployment

__all__ = [
    "RelQueryScheduler",
    "SchedulerConfig",
    "Wave",
    "approx_token_count",
    "serve_relqueries",
]

log = logging.getLogger(__name__)


def approx_token_count(text: str) -> int:
    """A tokenizer-free estimate: one token per 4 characters (at least 1)."""
    return max(1, len(text) // 4)


@dataclass(frozen=True)
class SchedulerConfig:
    """Settings of `RelQueryScheduler`."""

    max_wave_requests: int = 256
    """Most requests per wave (vLLM's default max_num_seqs, so one wave can fill a batch)."""
    max_num_seqs: int = 256
    """The engine's max_num_seqs (Algorithm 1's decode batch limit)."""
    max_num_batched_tokens: int = 2048
    """The engine's max_num_batched_tokens (Algorithm 1's prefill batch limit)."""
    kv_capacity_tokens: int = 15_808
    """Tokens the engine's KV cache holds (Algorithm 1's cap; the default is OPT-13B on one
    A100-40GB at gpu_memory_utilization 0.9)."""
    initial_miss_ratio: float = 1.0
    """Cache-miss ratio assumed for a relQuery before any of its requests completed."""
    starvation_threshold_s: float | None = None
    """Eq. 13's threshold on unit waiting time (seconds per request); None disables it."""
    priority_scale: float = 1000.0
    """vLLM priority units per second of estimated remaining time (1000: milliseconds)."""

    def __post_init__(self) -> None:
        counts = {
            "max_wave_requests": self.max_wave_requests,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")
        if not 0.0 <= self.initial_miss_ratio <= 1.0:
            raise ValueError(f"initial_miss_ratio must be in [0, 1], got {self.initial_miss_ratio}")
        if self.starvation_threshold_s is not None and self.starvation_threshold_s < 0:
            raise ValueError(
                f"starvation_threshold_s must be >= 0 or None, got {self.starvation_threshold_s}"
            )
        if self.priority_scale <= 0:
            raise ValueError(f"priority_scale must be > 0, got {self.priority_scale}")


@dataclass(frozen=True)
class Wave:
    """One submission: requests with priorities set, and the relQuery each belongs to."""

    index: int
    requests: list[Request]
    relquery_ids: list[str]
    """relquery_ids[i] owns requests[i]."""
    priorities: dict[str, float]
    """Estimated remaining seconds (PEM) per relQuery in the wave, at submission."""


class _RelQuery:
    __slots__ = ("rid", "order", "requests", "tokens", "next", "added_at", "responses", "seen")

    def __init__(self, rid: str, order: int, requests: list[Request], tokens: list[int], now):
        self.rid = rid
        self.order = order
        self.requests = requests
        self.tokens = tokens
        self.next = 0
        """Index of the first request not yet submitted."""
        self.added_at = now
        self.responses: list[Response | None] = [None] * len(requests)
        self.seen = [0, 0]
        """(prompt tokens, cached tokens) of its completed requests."""


class RelQueryScheduler:
    """Waves of prioritised requests for several relQueries (see the module docstring).

    Use: `add` each relQuery, then repeatedly `next_wave()`, serve it, `complete(wave, ...)`,
    until `next_wave()` returns None; `responses(rid)` gives each relQuery's responses.
    """

    def __init__(
        self,
        predictors: LinearPredictors,
        config: SchedulerConfig | None = None,
        count_tokens: Callable[[str], int] = approx_token_count,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.predictors = predictors
        self.config = config or SchedulerConfig()
        self.count_tokens = count_tokens
        self.clock = clock
        self._relqueries: dict[str, _RelQuery] = {}
        self._waves = 0
        self._outstanding: Wave | None = None

    @classmethod
    def for_deployment(
        cls,
        gpu: str,
        model: str,
        config: SchedulerConfig | None = None,
        count_tokens: Callable[[str], int] = approx_token_count,
        tensor_parallel_size: int | None = None,
        gpu_memory_utilization: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
    ) -> RelQueryScheduler:
        """A scheduler whose Eq. 9 predictors and KV capacity come from the simulated engine's
        profile of `model` on `gpu` (`resources.sim.profiles`); ValueError names bad values."""
        dep = resolve_deployment(gpu, model, tensor_parallel_size, gpu_memory_utilization)
        base = config or SchedulerConfig()
        cfg = replace(base, kv_capacity_tokens=dep.num_kv_blocks * BLOCK_SIZE)
        pred = LinearPredictors.fit(
            coefficients_from_profile(dep),
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
        )
        return cls(pred, cfg, count_tokens, clock)

    # -- input ------------------------------------------------------------------------------------
    def add(self, relquery_id: str, requests: Sequence[Request]) -> None:
        """Register a relQuery (ValueError on a duplicate id or an empty relQuery)."""
        if relquery_id in self._relqueries:
            raise ValueError(f"relquery {relquery_id!r} was already added")
        if not requests:
            raise ValueError(f"relquery {relquery_id!r} has no requests")
        reqs = list(requests)
        tokens = [self.count_tokens(r.prompt) for r in reqs]
        order = len(self._relqueries)
        self._relqueries[relquery_id] = _RelQuery(relquery_id, order, reqs, tokens, self.clock())

    # -- estimates --------------------------------------------------------------------------------
    def miss_ratio(self, relquery_id: str) -> float:
        """Eq. 11 on the relQuery's completed requests (the initial ratio before any)."""
        prompt, cached = self._relqueries[relquery_id].seen
        if prompt <= 0:
            return self.config.initial_miss_ratio
        return (prompt - cached) / prompt

    def estimate(self, relquery_id: str) -> float:
        """PEM (Eq. 10) of the relQuery's requests not yet submitted, in seconds."""
        rq = self._relqueries[relquery_id]
        ratio = self.miss_ratio(relquery_id)
        cfg = self.config
        left = range(rq.next, len(rq.requests))
        return pem(
            [rq.tokens[i] * ratio for i in left],
            [rq.requests[i].max_tokens for i in left],
            self.predictors,
            cfg.kv_capacity_tokens,
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
        )

    def priorities(self) -> dict[str, float]:
        """Current priority (seconds; 0 for a starving relQuery) of every relQuery with
        requests left to submit."""
        cfg = self.config
        now = self.clock()
        out: dict[str, float] = {}
        for rid, rq in self._relqueries.items():
            if rq.next >= len(rq.requests):
                continue
            value = self.estimate(rid)
            threshold = cfg.starvation_threshold_s
            if threshold is not None and rq.next == 0:
                if (now - rq.added_at) / len(rq.requests) > threshold:  # Eq. 13
                    value = 0.0
            out[rid] = value
        return out

    # -- waves ------------------------------------------------------------------------------------
    def next_wave(self) -> Wave | None:
        """The next wave, or None when every request was submitted. RuntimeError if the
        previous wave was not `complete`d (its outcome feeds the new estimates)."""
        if self._outstanding is not None:
            raise RuntimeError(
                f"wave {self._outstanding.index} was not completed; call complete() first"
            )
        prios = self.priorities()
        if not prios:
            return None
        order = sorted(prios, key=lambda rid: (prios[rid], self._relqueries[rid].order))
        requests: list[Request] = []
        owners: list[str] = []
        room = self.config.max_wave_requests
        in_wave: dict[str, float] = {}
        for rid in order:
            if room <= 0:
                break
            rq = self._relqueries[rid]
            take = min(room, len(rq.requests) - rq.next)
            priority = int(round(prios[rid] * self.config.priority_scale))
            for req in rq.requests[rq.next : rq.next + take]:
                requests.append(replace(req, priority=priority))
                owners.append(rid)
            rq.next += take
            room -= take
            in_wave[rid] = prios[rid]
        wave = Wave(self._waves, requests, owners, in_wave)
        self._waves += 1
        self._outstanding = wave
        return wave

    def complete(self, wave: Wave, responses: Sequence[Response]) -> None:
        """Record the responses of `wave` (one per request, in order)."""
        if self._outstanding is None or wave.index != self._outstanding.index:
            raise ValueError(f"wave {wave.index} is not the outstanding wave")
        if len(responses) != len(wave.requests):
            raise ValueError(
                f"wave {wave.index} has {len(wave.requests)} requests but got "
                f"{len(responses)} responses"
            )
        cursor: dict[str, int] = {}
        for rid in wave.relquery_ids:
            if rid not in cursor:
                rq = self._relqueries[rid]
                cursor[rid] = rq.next - wave.relquery_ids.count(rid)
        for rid, resp in zip(wave.relquery_ids, responses, strict=True):
            rq = self._relqueries[rid]
            rq.responses[cursor[rid]] = resp
            cursor[rid] += 1
            if resp.error is None:
                rq.seen[0] += resp.prompt_tokens
                rq.seen[1] += resp.cached_tokens
        self._outstanding = None

    def waves(self) -> Iterator[Wave]:
        """`next_wave()` until None; `complete` each wave before asking for the next."""
        while (wave := self.next_wave()) is not None:
            yield wave

    def responses(self, relquery_id: str) -> list[Response]:
        """The relQuery's responses in request order (RuntimeError if some are missing)."""
        rq = self._relqueries[relquery_id]
        if any(r is None for r in rq.responses):
            raise RuntimeError(f"relquery {relquery_id!r} has requests not served yet")
        return list(rq.responses)  # type: ignore[arg-type]

    @property
    def relquery_ids(self) -> list[str]:
        return list(self._relqueries)


def serve_relqueries(
    engine: LLMEngine,
    relqueries: Mapping[str, Sequence[Request]] | Sequence[tuple[str, Sequence[Request]]],
    scheduler: RelQueryScheduler | None = None,
) -> dict[str, RunResult]:
    """Serve several relQueries on one engine in prioritised waves; one `RunResult` per relQuery.

    `scheduler` defaults to `RelQueryScheduler.for_deployment("A100-40GB", "opt-13b")`. Each
    wave is one `engine.run(f"wave-{i}", requests)`. A relQuery's `engine_time_s` and
    `wall_time_s` span from the start of its first wave to the end of its last.
    """
    items = list(relqueries.items()) if isinstance(relqueries, Mapping) else list(relqueries)
    if scheduler is None:
        scheduler = RelQueryScheduler.for_deployment("A100-40GB", "opt-13b")
    if not engine.honours_priority:
        log.warning(
            "engine %r does not pass request priorities (vLLM needs scheduling_policy='priority'"
            ", the OpenAI engine send_priority=True); waves are still served in priority order",
            engine,
        )
    for rid, requests in items:
        scheduler.add(rid, requests)
    span: dict[str, list[float]] = {}
    engine_clock = wall_clock = 0.0
    for wave in scheduler.waves():
        result = engine.run(f"wave-{wave.index}", wave.requests)
        scheduler.complete(wave, result.responses)
        st = result.stats
        start = (engine_clock, wall_clock)
        engine_clock += st.engine_time_s
        wall_clock += st.wall_time_s
        for rid in dict.fromkeys(wave.relquery_ids):
            s = span.setdefault(rid, [start[0], start[1], 0.0, 0.0])
            s[2], s[3] = engine_clock, wall_clock
    out: dict[str, RunResult] = {}
    for rid, _ in items:
        responses = scheduler.responses(rid)
        s = span[rid]
        out[rid] = RunResult(
            responses=responses,
            stats=RunStats.from_responses(
                responses,
                engine=engine.name,
                model=engine.model,
                hardware=engine.hardware,
                engine_time_s=s[2] - s[0],
                wall_time_s=s[3] - s[1],
            ),
        )
    return out
