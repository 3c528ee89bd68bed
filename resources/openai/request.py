"""One request of `OpenAIEngine`: attempts, hard deadlines, retries, the circuit breaker.

`serve_request` always returns a `Response` (answered, or with `error` naming the attempts,
the deadline when it ran out, and the last failure) and whether its last failure was one
another attempt could have cured; see `resources.openai.engine` for the invariants. Failures
are counted per replica, in ONE count (`Replica.failures`): every attempt at that replica
that got no HTTP reply (refused, reset, timed out) adds one, and so does the first 5xx or
malformed 200 of each request (its retries answered alike add nothing more: a reply bad for
one request only, every time, must not give up a replica that answers the others); an answer
from that replica (and only from it) resets it to 0; 408/409/429 and other 4xx neither add
nor reset. At `breaker_failures` the replica is given up, and so it is at
once when it says nothing stands behind it (a router with no workers); the run stops when no
replica is left (`RunState.give_up`). A replica given up stays so for the engine's life
(`resources.openai.health.FleetHealth`). One attempt is `resources.openai.attempt.post_once`,
run inside a hard `asyncio.timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import httpx

from resources.engine import Request, Response
from resources.openai.attempt import RequestFailed, post_once
from resources.openai.fleet import Replica
from resources.openai.health import FleetHealth
from resources.openai.settings import ClientSettings

__all__ = ["RunState", "failed_response", "serve_request"]

log = logging.getLogger("resources.openai.engine")


@dataclass
class RunState:
    """What the workers of one `run` share (one event loop, so no locks)."""

    total: int
    stopped: asyncio.Event
    stop_reason: str | None = None
    done: int = 0
    replicas: list[Replica] = field(default_factory=list)
    health: FleetHealth | None = None
    """The engine's record of given-up replicas (outlives the run)."""

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stopped.set()

    def give_up(self, replica: Replica, reason: str) -> None:
        """Replica `replica` is dead; the run stops when it was the last one alive."""
        if replica.dead is not None:
            return
        replica.dead = reason
        if self.health is not None:
            self.health.give_up(replica.base_url, reason, time.monotonic())
        live = [r for r in self.replicas if r.dead is None]
        if live:
            log.warning("replica %s given up (%s); %d left", replica.base_url, reason, len(live))
        elif len(self.replicas) == 1:
            self.stop(reason)
        else:
            self.stop(f"every replica failed (last: {reason})")


async def serve_request(
    settings: ClientSettings,
    client: httpx.AsyncClient,
    request: Request,
    relquery_id: str,
    style: str,
    state: RunState,
    start: float,
    replica: Replica,
    headers: dict[str, str],
) -> tuple[Response, bool]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.config.request_deadline_s
    body, url = settings.body(request, style), settings.endpoint_of(replica.base_url)
    retryable, counted = False, False
    last, notes, tries, out_of_time = "not attempted", "", 0, False
    for attempt in range(settings.config.max_retries + 1):
        budget = min(settings.config.timeout_s, deadline - loop.time())
        if budget <= 0:
            out_of_time = True
            break
        tries += 1
        try:
            async with asyncio.timeout(budget):
                got = await post_once(settings, client, url, body, request.id, headers)
        except TimeoutError:
            failure = RequestFailed(
                f"timed out after {budget:.3g}s (no complete reply; hard wall-clock deadline)",
                retryable=True,
                dead=True,
            )
        except RequestFailed as exc:
            failure = exc
        else:
            replica.failures = 0
            elapsed = time.perf_counter() - start
            if got.cached_tokens is None:
                settings.warn_no_cached_tokens(style)
            return Response(
                request.id,
                got.text,
                got.prompt_tokens,
                got.cached_tokens or 0,
                got.output_tokens,
                elapsed,
                elapsed,
                cached_tokens_known=got.cached_tokens is not None,
                replica=replica.base_url,
            ), False
        last, retryable = str(failure), failure.retryable
        counted = _count_failure(settings, failure, state, last, replica, counted)
        if state.stop_reason is not None or replica.dead is not None or not retryable:
            break
        if attempt == settings.config.max_retries:
            break
        delay = settings.backoff_s(attempt, failure.retry_after_s)
        if (
            failure.retry_after_s is not None
            and failure.retry_after_s > settings.config.max_backoff_s
        ):
            notes = (
                f" (the server asked to wait Retry-After {failure.retry_after_s:g}s, above "
                f"max_backoff_s={settings.config.max_backoff_s:g}s; waited {delay:g}s)"
            )
            log.warning("request %s: %s", request.id, notes.strip(" ()"))
        if loop.time() + delay >= deadline:
            out_of_time = True
            break
        log.info(
            "request %s attempt %d/%d failed (%s); retrying in %.2fs",
            request.id, attempt + 1, settings.config.max_retries + 1, last, delay,
        )  # fmt: skip
        try:
            await asyncio.wait_for(state.stopped.wait(), delay)
            break  # the run stopped while this request waited
        except TimeoutError:
            pass
    within = (
        f" within the request deadline of {settings.config.request_deadline_s:g}s"
        if out_of_time
        else ""
    )
    plural = "s" if tries != 1 else ""
    error = f"failed after {tries} attempt{plural}{within}: {last}{notes}"
    return failed_response(request.id, error, start), retryable


def _count_failure(
    settings: ClientSettings,
    failure: RequestFailed,
    state: RunState,
    last: str,
    replica: Replica,
    counted: bool,
) -> bool:
    """Count `failure` at `replica` (see the module docstring): stop the run, give the
    replica up, or add one to its count of failures in a row. `counted`: an earlier attempt
    of this request already added one with a reply (a 5xx, a malformed 200); a reply that is
    bad for this request only (every retry of it) then adds nothing more, while an attempt
    with no reply always adds one. Returns the new `counted`."""
    if failure.stop is not None:
        state.stop(f"stopped after {last} ({failure.stop})")
        return counted
    if failure.gone is not None:
        state.give_up(replica, f"{failure.gone} at {replica.base_url} (last: {last})")
        return counted
    if not failure.counts or (counted and not failure.dead):
        return counted
    replica.failures += 1
    n = settings.config.breaker_failures
    if n and replica.failures >= n:
        state.give_up(
            replica,
            f"circuit breaker open after {replica.failures} attempts in a row without an "
            f"answer at {replica.base_url} (last: {last})",
        )
    return counted or not failure.dead


def failed_response(request_id: str, error: str, start: float) -> Response:
    elapsed = time.perf_counter() - start
    return Response(request_id, "", 0, 0, 0, elapsed, elapsed, error=error)
