"""One run of `OpenAIEngine` over its replicas, inside the event loop `OpenAIEngine.run`
drives (`serve_run`); see `resources.openai.engine` for the invariants.

The run is planned over the replicas by the engine (`OpenAIEngine.plan`), each replica's lanes
capped (`resources.openai.fleet.plan_caps`) and served by `resources.openai.fleet.serve_fleet`, one
`resources.openai.request.serve_request` per request over one httpx client per worker task.
A request failing with a retryable error is tried at a live replica it has not failed at; a
replica given up hands its unfinished requests to the live ones, while an answer it still
gives to a request it held is kept (never thrown away and sent again). Replicas the engine's
`FleetHealth` holds given up start the run given up (nothing is planned on them); when none
is left the run stops before sending, in one line. In a fleet, a watchdog gives up a hung or
very slow replica (`resources.openai.stall`) every `WATCH_TICK_S`, and abandons the
requests it still holds after `ABANDON_FACTOR` x its stall bound (no answer came; they move,
as after a timeout); an answer that came before is kept. The result holds one
`Response` per request, in request order: a request never answered gets an error saying
whether it was cancelled in flight or not sent, and why the run stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from resources.engine import Request, Response
from resources.openai.fleet import (
    LANES_PER_WORKER,
    Replica,
    measured_speeds,
    plan_caps,
    serve_fleet,
)
from resources.openai.health import FleetHealth
from resources.openai.placement import FleetPlan
from resources.openai.probe import ServerInfo
from resources.openai.request import RunState, failed_response, serve_request
from resources.openai.settings import ClientSettings
from resources.openai.stall import stalled

__all__ = ["serve_run"]

log = logging.getLogger("resources.openai.engine")

WATCH_TICK_S = 0.1
"""Seconds between two looks of the stall watchdog."""
ABANDON_FACTOR = 2.0
"""A request held by a stalled replica is abandoned (and moves) once it has waited this many
times the replica's stall bound: an adaptive timeout, far below `timeout_s` on a fleet whose
other replicas answer fast. An answer that arrives before is kept."""


async def serve_run(
    settings: ClientSettings,
    plan: FleetPlan | None,
    tails: list[str | None],
    relquery_id: str,
    requests: list[Request],
    style: str,
    info: ServerInfo,
    start: float,
    health: FleetHealth | None = None,
    refused: str | None = None,
) -> tuple[list[Response], str | None, list[str | None]]:
    """One `Response` per request of `requests`, in request order, why the run stopped (None
    when it did not) and each replica's last answered prompt (the next chunk's `tails`).
    `plan` places `requests` on the replicas (None only when there are none), `tails` the
    previous chunk's last prompts, `style` is the resolved server style, `info` what the
    server said, `start` the run's `time.perf_counter()`, `health` the engine's given-up
    replicas (updated by this run), `refused` why the fleet is refused (nothing is sent)."""
    cfg = settings.config
    total = len(requests)
    replicas = [Replica(k, url) for k, url in enumerate(settings.base_urls)]
    state = RunState(total, asyncio.Event(), replicas=replicas, health=health)
    for replica in replicas:
        replica.dead = health.dead(replica.base_url) if health is not None else None
    if info.auth_error is not None:
        state.stop(f"stopped before sending: {info.auth_error} (check the API key)")
    elif refused is not None:
        state.stop(f"stopped before sending: {refused}")
    elif total and all(r.dead is not None for r in replicas):
        state.stop(
            "stopped before sending: every replica is given up: "
            + "; ".join(f"{r.base_url} ({r.dead})" for r in replicas)
        )
    results: list[Response | None] = [None] * total
    in_flight: set[int] = set()
    tails = [*tails, *[None] * (len(replicas) - len(tails))]
    if total and plan is not None and state.stop_reason is None:
        for replica, queue in zip(replicas, plan.queues, strict=True):
            replica.parts.extend(
                (n, part) for n, part in enumerate(queue, start=replica.index * total)
            )
        # llama.cpp caches per slot: a group stays on one slot; a shared cache: short lanes
        per_slot = style == "llamacpp"
        plan_caps(replicas, cfg.max_concurrency, cfg.prefix_affinity,
                  1 if per_slot else LANES_PER_WORKER)  # fmt: skip
        keys = {i: part.key for queue in plan.queues for part in queue for i in part.indices}
        base_headers = settings.headers(relquery_id)
        failed_at: dict[int, set[int]] = {}  # request -> replicas it failed at (retryable)
        # one client of one connection per worker: a worker serves its lanes over one
        # keep-alive connection (httpcore's shared pool scans every connection per request)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        clients: dict[asyncio.Task, httpx.AsyncClient] = {}
        async with contextlib.AsyncExitStack() as stack:

            async def client() -> httpx.AsyncClient:
                task = asyncio.current_task()
                if task not in clients:
                    clients[task] = await stack.enter_async_context(
                        httpx.AsyncClient(
                            timeout=httpx.Timeout(cfg.timeout_s),
                            limits=limits,
                            auth=settings.auth(),
                            verify=settings.tls(),
                        )
                    )
                return clients[task]

            async def serve(i: int, replica: Replica) -> bool:
                headers = base_headers
                if settings.routing == "router":
                    headers = {**base_headers, cfg.routing_key_header: keys[i]}
                sent = replica.in_flight[i] = time.perf_counter()
                try:
                    async with asyncio.timeout(None) as scopes[i]:  # the watchdog may cut it
                        response, retryable = await serve_request(
                            settings, await client(), requests[i], relquery_id, style, state,
                            start, replica, headers,
                        )  # fmt: skip
                except TimeoutError:  # abandoned: no answer came, none can come any more
                    waited = time.perf_counter() - sent
                    reason = f"abandoned after {waited:.3g}s at {replica.base_url} ({replica.dead})"
                    response, retryable = failed_response(requests[i].id, reason, start), True
                finally:
                    replica.in_flight.pop(i, None)
                    scopes.pop(i, None)
                if response.error is None:  # kept, even when its replica was given up since
                    replica.latencies.append(time.perf_counter() - sent)
                    replica.served += 1
                    tails[replica.index] = requests[i].prompt
                elif len(replicas) > 1 and retryable and state.stop_reason is None:
                    # a retryable failure is tried at a live replica it has not failed at
                    failed_at.setdefault(i, set()).add(replica.index)
                    if any(r.dead is None and r.index not in failed_at[i] for r in replicas):
                        return True
                if response.error is not None and replica.dead is not None:
                    if any(r.dead is None for r in replicas):
                        return True  # moves to a live replica
                results[i] = response
                state.done += 1
                if settings.progress is not None:
                    settings.progress(state.done, total)
                return False

            async def watch() -> None:
                """Give up stalled replicas; abandon what they hold past ABANDON_FACTOR x
                their stall bound (it then moves, like a timed-out attempt)."""
                cut: dict[int, float] = {}
                while True:
                    await asyncio.sleep(WATCH_TICK_S)
                    now = time.perf_counter()
                    for replica, reason, bound in stalled(replicas, now):
                        state.give_up(replica, reason)
                        cut[replica.index] = ABANDON_FACTOR * bound
                    for k, limit in cut.items():
                        for i, sent in list(replicas[k].in_flight.items()):
                            if now - sent > limit and i in scopes:
                                scopes[i].reschedule(asyncio.get_running_loop().time())

            scopes: dict[int, asyncio.Timeout] = {}

            watcher = asyncio.create_task(watch()) if len(replicas) > 1 else None
            try:
                in_flight = await serve_fleet(replicas, serve, cfg.max_concurrency, state.stopped)
            finally:
                if watcher is not None:
                    watcher.cancel()
        for replica in replicas:
            if health is not None and replica.dead is None and replica.served:
                health.served_run(replica.base_url)
        plan.measured_speeds = measured_speeds(replicas)  # the next chunk's plan weighs them
        if len(replicas) > 1:
            log.info(
                "relquery %s over %d replicas: %s answered",
                relquery_id,
                len(replicas),
                ", ".join(f"{r.base_url} {r.served}" + (" (dead)" if r.dead else "")
                          for r in replicas),
            )  # fmt: skip
    reason = state.stop_reason
    final: list[Response] = []
    for i, r in enumerate(results):
        if r is None:
            where = "cancelled in flight" if i in in_flight else "not sent"
            r = failed_response(requests[i].id, f"{where}: {reason or 'the run ended'}", start)
        final.append(r)
    if reason is not None:
        log.error("relquery %s: %s", relquery_id, reason)
    return final, reason, tails
