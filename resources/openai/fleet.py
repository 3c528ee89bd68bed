"""Serving a fleet plan: per-replica lanes, work stealing at the tail, failover.

`serve_fleet(replicas, serve, workers, stopped)` runs a `resources.openai.placement.FleetPlan`
whose queues have been put on `replicas` (a single URL, a router, is a fleet of one).
Invariants:

- each live replica has `workers` asyncio tasks; a task takes the next lane of its replica
  (the lanes of the part it started last), else a requeued request, else the replica's next
  part, else steals a whole part not yet started from the BACK of another queue (a dead
  replica's first, then the one with the most predicted seconds left), else ends. It steals
  only from a replica all of whose tasks hold a lane (that part would wait), so the tasks
  that start first never empty the queues of replicas whose tasks have not started yet, and
  only when the steal shortens the predicted makespan: the thief's predicted finish with the
  part (what it has left plus the part's seconds at the batch its lanes give it, over its
  speed) is earlier than the victim's predicted finish without stealing (`Replica.left_s`
  over its speed). A live victim's last part is never taken by a thief that would end it
  after the victim would have ended everything;
- time is predicted seconds (`Part.seconds`, the cost model's); each replica's measured
  speed (`measured_speeds`: predicted seconds served / wall seconds with a lane held) is
  what the next chunk's plan weighs replicas by; during a run `Replica.speed` (1 unless set)
  scales the steal test;
- a part becomes lanes of at most `Replica.cap` requests (one request per lane when affinity
  is off); a part's first lane leads, the others wait until the part's first request has
  been served (its prefix is then in the replica's cache), or only sent (below).
  `plan_caps` gives each task `lanes_per_worker` lanes' worth of the replica's plan: 1 for
  a server whose cache is per slot (llama.cpp: a group stays on one slot, served in order),
  `LANES_PER_WORKER` for a shared prefix cache (vLLM, SGLang), where shorter lanes even out
  the tail: a lane started last ends at most one lane's length after the others;
- on a shared prefix cache (`Replica.same_step`, set by `plan_caps` with more than one lane
  per task) the other lanes of a part wait only until the part's first request has been
  SENT, not answered: they reach the server after it, in its step or a later one, and vLLM
  v1 (and the sim) registers a block when the step that computes it is scheduled, so a later
  request of the same step reuses it. Waiting for the answer left those tasks idle for one
  whole batch per part (benchmarks.fleet, movies at N = 4: 13.6 s -> 10.7 s simulated, hit
  rate 0.835 both). On a per-slot cache (llama.cpp) they wait for the answer;
- `serve(i, replica)` serves request i and says whether the request must move: it returns
  False when the request ended (answered or failed for good) and True when it failed at
  this replica and should be tried at another (its replica died, `Replica.dead` set, or it
  failed there with a retryable error): then it is requeued as an orphan that avoids every
  replica it failed at (unless no live replica is left that it does not avoid: then any
  live one takes it), and a dead replica's unstarted lanes and parts go to the others too;
  when no replica is left alive `stopped` is set by the caller;
- once `stopped` is set no new request starts and the requests in flight are cancelled;
  `serve_fleet` returns the indices that were cancelled in flight.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from resources.openai.placement import Part

__all__ = ["Lane", "Replica", "measured_speeds", "part_lanes", "serve_fleet"]


@dataclass(frozen=True)
class Lane:
    """Requests (by index) one task serves in order; `part` numbers the part it comes from."""

    indices: list[int]
    part: int
    leads: bool
    avoid: frozenset[int] = frozenset()
    """Replicas (by index) this lane's request already failed at (orphans only)."""


def part_lanes(part: Part, number: int, cap: int) -> list[Lane]:
    """`part` (numbered `number`) cut into lanes of at most `cap` requests, in order."""
    return [
        Lane(part.indices[k : k + cap], number, k == 0) for k in range(0, len(part.indices), cap)
    ]


@dataclass
class Replica:
    """One server of the fleet and what is left for it to serve."""

    index: int
    base_url: str
    parts: deque[tuple[int, Part]] = field(default_factory=deque)
    """Parts not started yet (numbered), in plan order."""
    cap: int = 1
    """Most requests in one lane (ceil(planned requests / workers) with affinity, else 1)."""
    lanes: deque[Lane] = field(default_factory=deque)
    dead: str | None = None
    """Why the replica was given up (None while it is alive)."""
    failures: int = 0
    """Attempts in a row at this replica that got no answer it could give (no HTTP reply, a
    timeout, a 5xx, a malformed 200): the circuit breaker's one count, reset only by an
    answer from this replica (`resources.openai.request`)."""
    in_flight: dict[int, float] = field(default_factory=dict)
    """Requests (by index) sent to this replica and not ended, with when they were sent."""
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    """Seconds each of its last answered requests took (`resources.openai.stall`)."""
    served: int = 0
    """Requests this replica answered in this run."""
    busy: int = 0
    """Tasks of this replica holding a lane now."""
    started_s: float = 0.0
    """Predicted seconds of the requests of started parts not served yet (lanes, in flight)."""
    served_s: float = 0.0
    """Predicted seconds of the requests this replica answered."""
    busy_wall_s: float = 0.0
    """Wall seconds during which at least one task of this replica held a lane."""
    busy_since: float | None = None
    speed: float = 1.0
    """Relative speed the steal test divides predicted seconds by."""
    same_step: bool = False
    """The server shares one prefix cache across requests and a request reuses the blocks an
    earlier request of the same step computes (vLLM v1, the sim): followers start once the
    part's first request is sent."""

    def left_s(self, workers: int) -> float:
        """Predicted seconds of everything still assigned to this replica (at its batch)."""
        return self.started_s + sum(part.seconds(workers) for _, part in self.parts)


def measured_speeds(replicas: list[Replica]) -> list[float | None]:
    """Each replica's predicted seconds served per wall second with a lane held, relative to
    the fleet's median; None for a replica that served nothing (no measure)."""
    raw = [r.served_s / r.busy_wall_s if r.served and r.busy_wall_s > 0 else None
           for r in replicas]  # fmt: skip
    known = sorted(x for x in raw if x)
    if not known:
        return [None] * len(replicas)
    median = known[len(known) // 2]
    return [x / median if x else None for x in raw]


LANES_PER_WORKER = 4
"""Lanes per task of a replica's plan on a server with a shared prefix cache. One lane per
task (each the replica's ideal number of rounds) left a replica whose long lane started late
running past the others (benchmarks.fleet: see README, Scaling out)."""


def plan_caps(
    replicas: list[Replica], workers: int, affinity: bool, lanes_per_worker: int = 1
) -> None:
    """Set each replica's lane cap from its planned requests: `lanes_per_worker` lanes per
    task (see the module invariants)."""
    for replica in replicas:
        n = sum(len(part.indices) for _, part in replica.parts)
        lanes = max(1, workers) * max(1, lanes_per_worker)
        replica.cap = max(1, math.ceil(n / lanes)) if affinity else 1
        replica.same_step = lanes_per_worker > 1


async def serve_fleet(
    replicas: list[Replica],
    serve: Callable[[int, Replica], Awaitable[bool]],
    workers: int,
    stopped: asyncio.Event,
) -> set[int]:
    """Serve every planned request (see the module docstring); the indices cancelled in
    flight."""
    orphans: deque[Lane] = deque()
    ready: dict[int, asyncio.Event] = {}
    in_flight: set[int] = set()

    def release(replica: Replica) -> None:
        """A dead replica's started lanes go to the orphans (they lead: no cache to wait
        for); its parts stay where thieves look first."""
        while replica.lanes:
            lane = replica.lanes.popleft()
            orphans.append(Lane(lane.indices, lane.part, True))

    per_request: dict[int, float] = {}  # request -> predicted seconds (at `workers`)

    def start(replica: Replica, number: int, part: Part) -> None:
        ready.setdefault(number, asyncio.Event())
        replica.lanes.extend(part_lanes(part, number, replica.cap))
        each = part.seconds(workers) / max(1, len(part.indices))
        for i in part.indices:
            per_request[i] = each
        replica.started_s += part.seconds(workers)

    def worth_stealing(thief: Replica, victim: Replica, part: Part) -> bool:
        """The steal shortens the predicted makespan (see the module invariants)."""
        if victim.dead is not None:
            return True
        lanes = math.ceil(len(part.indices) / max(1, thief.cap))
        batch = min(workers, lanes)  # its lanes start a batch (a running one may not take them)
        ends = (thief.left_s(workers) + part.seconds(batch)) / thief.speed
        return ends < victim.left_s(workers) / victim.speed

    def next_lane(replica: Replica) -> Lane | None:
        if replica.lanes:
            return replica.lanes.popleft()
        live = {r.index for r in replicas if r.dead is None}
        for k, orphan in enumerate(orphans):
            if replica.index not in orphan.avoid or live <= orphan.avoid:
                del orphans[k]
                return orphan
        if replica.parts:
            start(replica, *replica.parts.popleft())
            return replica.lanes.popleft()
        victims = [
            r for r in replicas
            if r is not replica and r.parts and (r.dead is not None or r.busy >= workers)
        ]  # fmt: skip
        if not victims:
            return None
        victim = max(victims, key=lambda r: (r.dead is not None, r.left_s(workers) / r.speed))
        if not worth_stealing(replica, victim, victim.parts[-1][1]):
            return None
        start(replica, *victim.parts.pop())
        return replica.lanes.popleft()

    async def worker(replica: Replica) -> None:
        while not stopped.is_set() and replica.dead is None:
            lane = next_lane(replica)
            if lane is None:
                return
            event = ready.setdefault(lane.part, asyncio.Event())
            replica.busy += 1
            if replica.busy == 1:
                replica.busy_since = time.perf_counter()
            try:
                if not lane.leads:
                    await event.wait()
                for k, i in enumerate(lane.indices):
                    if stopped.is_set():
                        return
                    if replica.dead is not None:  # the rest of the lane moves on
                        orphans.append(Lane(lane.indices[k:], lane.part, True))
                        return
                    in_flight.add(i)
                    if k == 0 and lane.leads and replica.same_step and not event.is_set():
                        # the first request goes out first, then the part's other lanes
                        sending = asyncio.ensure_future(serve(i, replica))
                        await asyncio.sleep(0)
                        event.set()
                        moved = await sending
                    else:
                        moved = await serve(i, replica)
                    in_flight.discard(i)
                    replica.started_s = max(0.0, replica.started_s - per_request.get(i, 0.0))
                    if not moved:
                        replica.served_s += per_request.get(i, 0.0)
                    if moved:
                        orphans.append(Lane([i], lane.part, True, lane.avoid | {replica.index}))
                        if replica.dead is not None:
                            release(replica)  # the rest of this lane moves on just above
                    event.set()
            finally:
                replica.busy -= 1
                if replica.busy == 0 and replica.busy_since is not None:
                    replica.busy_wall_s += time.perf_counter() - replica.busy_since
                    replica.busy_since = None
                event.set()  # waiters never hang on a lane that ended in any way

    tasks = {asyncio.create_task(worker(replica)) for replica in replicas for _ in range(workers)}
    watcher = asyncio.create_task(stopped.wait())
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending | {watcher}, return_when=asyncio.FIRST_COMPLETED
            )
            if watcher in done:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                pending = set()
            pending.discard(watcher)
            for task in done - {watcher}:
                task.result()  # re-raises a bug in `serve`; faults never get here
            if not pending and not stopped.is_set() and _left(replicas, orphans):
                live = [r for r in replicas if r.dead is None]
                if not live:
                    break
                # work left but every task of the live replicas ended (an orphan arrived
                # after they looked): start one task per live replica again
                pending = {asyncio.create_task(worker(r)) for r in live}
    finally:
        watcher.cancel()
        for task in pending:
            task.cancel()
    return in_flight


def _left(replicas: list[Replica], orphans: deque[Lane]) -> bool:
    return bool(orphans) or any(r.parts or r.lanes for r in replicas)
