"""Which requests of a run share a worker: prefix groups kept together, in order.

A prefix group is a maximal run of consecutive prompts in which each prompt shares with the
previous one at least `GROUP_MIN_CHARS` characters more than the prefix common to ALL
prompts of the run (the instruction every request shares is cached after the first request
anyway; what GGR adds is the longer shared prefix of neighbours, e.g. one movie's
description). `plan_lanes` turns the groups into lanes, each served in order by one worker:

- every request is in exactly one lane, lanes keep request order inside, and the lanes,
  concatenated in order, are the requests in order;
- a group longer than `ceil(n / max_concurrency)` is cut into pieces of that length, so one
  big group cannot serialise the whole run; only the first piece `leads`, the others wait
  until the group's first request was answered (its prefix is then in the server's cache);
- `prefix_affinity=False` puts every request in its own lane (plain bounded concurrency).

`serve_lanes(lanes, serve, workers, stopped)` runs them: `workers` asyncio tasks (numbered
0..workers-1) take lanes in order and await `serve(i, worker)` for each index in turn; once
`stopped` is set no new request starts and the requests in flight are cancelled (their
indices are returned).

>>> [(l.indices, l.group, l.leads) for l in plan_lanes(["ab", "cd"], 4, True)]
[([0], 0, True), ([1], 1, True)]
"""

from __future__ import annotations

import asyncio
import math
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["GROUP_MIN_CHARS", "Lane", "plan_lanes", "prefix_groups", "serve_lanes"]

GROUP_MIN_CHARS = 64
"""About one 16-token KV block of text: a shared prefix shorter than a block cannot give a
cache hit (vLLM and llama.cpp cache whole blocks / matching prefixes), so it does not make a
group."""


@dataclass(frozen=True)
class Lane:
    """Requests (by index) one worker serves in order; `group` numbers the prefix group."""

    indices: list[int]
    group: int
    leads: bool
    """True for a group's first piece; other pieces wait for the group's first answer."""


def _shared(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def prefix_groups(prompts: list[str], min_chars: int = GROUP_MIN_CHARS) -> list[int]:
    """The prefix group number of each prompt (see the module docstring), from 0 upwards."""
    if not prompts:
        return []
    common = len(os.path.commonprefix(prompts))
    groups = [0]
    for prev, cur in zip(prompts, prompts[1:], strict=False):
        joined = _shared(prev, cur) >= common + min_chars
        groups.append(groups[-1] if joined else groups[-1] + 1)
    return groups


def plan_lanes(prompts: list[str], max_concurrency: int, prefix_affinity: bool) -> list[Lane]:
    """The lanes of a run of `prompts` (see the module docstring)."""
    if not prefix_affinity:
        return [Lane([i], i, True) for i in range(len(prompts))]
    cap = max(1, math.ceil(len(prompts) / max(1, max_concurrency)))
    members: dict[int, list[int]] = {}
    for i, g in enumerate(prefix_groups(prompts)):
        members.setdefault(g, []).append(i)
    lanes = []
    for g, idx in members.items():
        for k in range(0, len(idx), cap):
            lanes.append(Lane(idx[k : k + cap], g, k == 0))
    return lanes


async def serve_lanes(
    lanes: list[Lane],
    serve: Callable[[int, int], Awaitable[None]],
    workers: int,
    stopped: asyncio.Event,
) -> set[int]:
    """Serve every lane (see the module docstring); the indices cancelled in flight."""
    queue = deque(lanes)
    ready = {lane.group: asyncio.Event() for lane in lanes}
    in_flight: set[int] = set()

    async def worker(w: int) -> None:
        while queue and not stopped.is_set():
            lane = queue.popleft()
            if not lane.leads:
                await ready[lane.group].wait()
            for i in lane.indices:
                if stopped.is_set():
                    return
                in_flight.add(i)
                await serve(i, w)
                in_flight.discard(i)
                ready[lane.group].set()

    pending = {asyncio.create_task(worker(w)) for w in range(min(workers, len(lanes)))}
    watcher = asyncio.create_task(stopped.wait())
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
    finally:
        watcher.cancel()
        for task in pending:
            task.cancel()
    return in_flight
