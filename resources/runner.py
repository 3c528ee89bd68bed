"""Run one relQuery through an engine in chunks, reusing and filling the response cache.

`run_requests(engine, relquery_id, requests, cache=...)`:

1. looks every request up in `answered` (answers this run already paid for) and the cache
   (`EngineKey.request_key`; `cache_hits` counts both);
2. sends only the missing ones to `engine.run`, in submission order, `chunk_size` at a time
   (`chunk_size x engine.num_replicas` for a fleet: each replica gets a chunk's worth);
3. after each chunk, commits its successful responses to the cache BEFORE starting the next
   chunk, then reports progress; so a crash (even kill -9) loses at most the chunk in flight,
   and a rerun sends only what was not committed (plus the failed requests: errors are never
   cached, so a rerun retries them).

Invariants of the `RunOutcome`:
- `responses` has exactly one `Response` per request, in request order, each with its
  request's `id` (cached ones included); nothing is dropped: a failed request is a response
  with `error` set;
- `n_requests == cache_hits + sent` (plus the requests never sent after a stop) and
  `n_requests == answered + failed`;
- `stats` totals only what was sent to the engine in this call (`stats.n_requests == sent`,
  tokens and times summed over the chunks); reused responses keep the token counts they were
  stored with (in `responses` and in `reused_prompt_tokens` / `reused_cached_tokens`) but are
  not counted as sent.

4. stops early when the engine reports it cannot go on (`RunResult.stopped`: a 401/403, a
   404 for a model the server does not have, a circuit breaker on a dead server): the
   chunk's answers are still committed, every request not yet sent gets an error row naming
   the reason, and `RunOutcome.stopped` holds it.

An engine with a `max_tokens` attribute that is not None (a per-run override) answers every
request with that output budget: the requests are rewritten before the cache lookup, so the
cache key is the budget actually used.

`raise_if_too_many_errors(outcome, max_error_rate)` is the guard an asset calls afterwards;
it raises on a stopped run first, with the stop reason as its one line.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from resources.engine import LLMEngine, Request, Response, RunStats
from resources.response_cache import EngineKey, ResponseCache

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "RunOutcome",
    "TooManyErrors",
    "raise_if_too_many_errors",
    "request_keys",
    "run_requests",
    "with_max_tokens",
]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 256
"""Requests per engine call: large enough to batch well, small enough that a crash loses
little work."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RunOutcome:
    """What `run_requests` did for one relQuery (see the module invariants)."""

    responses: list[Response]
    """One per request, in request order."""
    stats: RunStats
    """Engine totals over the requests sent in this call (not the reused ones)."""
    n_requests: int
    """Requests given."""
    cache_hits: int
    """Requests answered from the cache without being sent."""
    sent: int
    """Requests sent to the engine (each once; the engine's own retries are not counted)."""
    answered: int
    """Responses without `error` (reused ones included)."""
    failed: int
    """Responses with `error` set."""
    num_chunks: int
    """Engine calls made."""
    stored: int
    """New cache entries written by this call."""
    reused_prompt_tokens: int = 0
    """Prompt tokens of the reused responses, as stored."""
    reused_cached_tokens: int = 0
    """Cached prompt tokens of the reused responses, as stored."""
    stopped: str | None = None
    """Why the engine stopped early (then the unsent requests failed with that reason)."""

    @property
    def error_rate(self) -> float:
        """failed / n_requests (0.0 for an empty run)."""
        return self.failed / self.n_requests if self.n_requests else 0.0

    @property
    def errors(self) -> list[Response]:
        """The failed responses, in request order."""
        return [r for r in self.responses if r.error is not None]


def with_max_tokens(requests: Sequence[Request], max_tokens: int | None) -> list[Request]:
    """`requests` with their output budget replaced by `max_tokens` (unchanged when None)."""
    if max_tokens is None:
        return list(requests)
    return [dataclasses.replace(r, max_tokens=max_tokens) for r in requests]


class TooManyErrors(RuntimeError):
    """More requests failed than `max_error_rate` allows."""

    def __init__(self, message: str, outcome: RunOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


def run_requests(
    engine: LLMEngine,
    relquery_id: str,
    requests: Sequence[Request],
    cache: ResponseCache | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Progress | None = None,
    engine_key: EngineKey | None = None,
    answered: Mapping[str, Response] | None = None,
) -> RunOutcome:
    """Serve `requests` with `engine`, reusing `cache` and committing each chunk to it.

    `cache=None` (or a disabled cache) sends every request. `engine_key` (default
    `EngineKey.of(engine)`) decides which cached answers count as this engine's. `answered`
    holds answers this run already paid for, by request key (`request_keys`; the quality
    guard's sample): they are reused like cache hits, also with the cache off. `progress`
    is called with (requests done, total) once after the cache lookup and after each committed
    chunk. An engine that breaks its contract (wrong number or ids of responses) raises
    `RuntimeError`; chunks committed before it stay committed.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    wall0 = time.perf_counter()
    requests = with_max_tokens(requests, engine.max_tokens)
    total = len(requests)
    key_of = engine_key or EngineKey.of(engine)
    cache = cache if cache is not None else ResponseCache.disabled()
    keys = request_keys(engine, requests, key_of) if cache.enabled or answered else []
    found = cache.get_many(keys) if cache.enabled else {}
    if answered:
        found = {**found, **{k: answered[k] for k in keys if k in answered}}

    responses: list[Response | None] = [None] * total
    missing: list[int] = []
    reused: list[Response] = []
    for i, request in enumerate(requests):
        hit = found.get(keys[i]) if found else None
        if hit is not None:
            responses[i] = dataclasses.replace(hit, id=request.id)
            reused.append(hit)
        else:
            missing.append(i)
    cache_hits = total - len(missing)
    if progress is not None:
        progress(cache_hits, total)

    chunk_stats: list[RunStats] = []
    stored = 0
    done = cache_hits
    stopped: str | None = None
    sent = 0
    step = chunk_size * max(1, engine.num_replicas)
    for start in range(0, len(missing), step):
        positions = missing[start : start + step]
        if stopped is not None:
            for i in positions:
                responses[i] = Response(requests[i].id, "", 0, 0, 0, 0.0, 0.0,
                                        error=f"not sent: {stopped}")  # fmt: skip
            continue
        chunk = [requests[i] for i in positions]
        result = engine.run(relquery_id, chunk)
        sent += len(chunk)
        _check_contract(engine, chunk, result.responses)
        chunk_stats.append(result.stats)
        for i, response in zip(positions, result.responses, strict=True):
            responses[i] = response
        if cache.enabled:
            stored += cache.put_many(
                [(keys[i], r) for i, r in zip(positions, result.responses, strict=True)],
                engine=key_of.engine,
                model=key_of.model,
            )
        done += len(chunk)
        if progress is not None:
            progress(done, total)
        stopped = result.stopped

    final = [r for r in responses if r is not None]
    assert len(final) == total, "every request has a response"
    failed = sum(1 for r in final if r.error is not None)
    stats = _sum_stats(engine, key_of, chunk_stats, time.perf_counter() - wall0)
    outcome = RunOutcome(
        responses=final,
        stats=stats,
        n_requests=total,
        cache_hits=cache_hits,
        sent=sent,
        answered=total - failed,
        failed=failed,
        num_chunks=len(chunk_stats),
        stored=stored,
        reused_prompt_tokens=sum(r.prompt_tokens for r in reused),
        reused_cached_tokens=sum(r.cached_tokens for r in reused),
        stopped=stopped,
    )
    log.info(
        "relquery %s: %d requests, %d from cache, %d sent in %d chunks, %d failed",
        relquery_id,
        total,
        cache_hits,
        outcome.sent,
        outcome.num_chunks,
        failed,
    )
    return outcome


def request_keys(
    engine: LLMEngine, requests: Sequence[Request], key_of: EngineKey | None = None
) -> list[str]:
    """Each request's response-cache key as `run_requests` computes it (after the engine's
    output budget override, `with_max_tokens`)."""
    key_of = key_of or EngineKey.of(engine)
    return [key_of.request_key(r) for r in with_max_tokens(requests, engine.max_tokens)]


def raise_if_too_many_errors(outcome: RunOutcome, max_error_rate: float, *, show: int = 3) -> None:
    """Raise `TooManyErrors` when `outcome.error_rate > max_error_rate`; the message names the
    failed count, the rate, the limit and the first `show` errors (request id: error)."""
    if not 0.0 <= max_error_rate <= 1.0:
        raise ValueError(f"max_error_rate must be in [0, 1], got {max_error_rate}")
    if outcome.stopped is not None:
        raise TooManyErrors(
            f"{outcome.failed} of {outcome.n_requests} requests failed: {outcome.stopped}",
            outcome,
        )
    if outcome.error_rate <= max_error_rate:
        return
    first = "; ".join(f"{r.id}: {r.error}" for r in outcome.errors[:show])
    raise TooManyErrors(
        f"{outcome.failed} of {outcome.n_requests} requests failed "
        f"(error rate {outcome.error_rate:.1%} > max_error_rate {max_error_rate:.1%}); "
        f"first errors: {first}",
        outcome,
    )


def _check_contract(engine: LLMEngine, chunk: list[Request], responses: list[Response]) -> None:
    if len(responses) != len(chunk) or any(
        r.id != q.id for r, q in zip(responses, chunk, strict=False)
    ):
        got = [r.id for r in responses[:5]]
        want = [q.id for q in chunk[:5]]
        raise RuntimeError(
            f"engine {engine.name!r} returned {len(responses)} responses for {len(chunk)} "
            f"requests, or out of order (first ids {got}, expected {want})"
        )


def _sum_stats(
    engine: LLMEngine, key: EngineKey, parts: list[RunStats], wall_time_s: float
) -> RunStats:
    if not parts:
        return RunStats.empty(key.engine, key.model, engine.hardware, wall_time_s)
    return dataclasses.replace(RunStats.total(parts), wall_time_s=wall_time_s)
