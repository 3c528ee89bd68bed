"""Which replica of a fleet serves which requests: prefix groups kept whole, balanced by mass.

Pure planning (no I/O); `resources.openai.engine` executes the plan. The input is a run's
prompts in plan order (after dedup and GGR), the output `FleetPlan.queues[r]`: the parts
replica `r` serves, in plan order.

A **prefix group** (`prefix_groups`) is a maximal run of consecutive prompts in which each
shares with the previous one at least `GROUP_MIN_CHARS` (about one 16-token KV block)
characters more than the prefix common to all prompts of the run. That common prefix (the
instruction) is cached once per replica and groups nothing; what a group shares beyond it
is what must stay on one replica to be reused.

Invariants of `plan_fleet(prompts, n, ...)`:
- every request is in exactly one part and every part on exactly one replica's queue; a
  part is contiguous in plan order and inside one group; a replica's queue is in plan order
  (so GGR's order holds inside each replica);
- a group is cut into several parts only when its mass exceeds the fair share (total mass
  / n); then into `ceil(mass / fair)` contiguous parts of near-equal mass, each counting its
  shared prefix again (`Part.mass` includes it), so the plan's `repaid_chars` is what the cut
  costs; a cut whose repaid prefixes would add more than `MAX_CUT_OVERHEAD` of the group's
  mass is not made (the group stays whole);
- `routing="affinity"`: parts go longest-processing-time first to the least-loaded replica;
  a part whose first prompt continues a replica's `tails[r]` (the last prompt that replica
  served, from an earlier chunk of the same run) goes to that replica first;
  `routing="round_robin"`: request `i` alone to replica `i mod n` (the load balancer baseline);
- a request's mass is its uncached prompt (characters not shared with the previous request
  of its part, over `CHARS_PER_TOKEN`) plus its output budget, in tokens.

>>> movie = "Q: " + "a" * 70
>>> plan = plan_fleet([movie + "1", movie + "2", "Q: b"], 2)
>>> [[p.indices for p in queue] for queue in plan.queues]  # the group stays whole
[[[0, 1]], [[2]]]
>>> plan = plan_fleet([movie + chr(65 + k) * 400 for k in range(6)] + ["Q: b"], 2)
>>> [[p.indices for p in queue] for queue in plan.queues], plan.repaid_chars
([[[0, 1, 2], [6]], [[3, 4, 5]]], 73)
"""

from __future__ import annotations

import hashlib
import heapq
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_CUT_OVERHEAD",
    "GROUP_MIN_CHARS",
    "FleetPlan",
    "Part",
    "Routing",
    "group_key",
    "plan_fleet",
    "prefix_groups",
]

Routing = Literal["affinity", "round_robin", "router"]

GROUP_MIN_CHARS = 64
"""About one 16-token KV block of text: a shared prefix shorter than a block cannot give a
cache hit (vLLM and llama.cpp cache whole blocks / matching prefixes), so it does not make a
group."""

MAX_CUT_OVERHEAD = 0.1
"""A group is cut only if the prefixes its later parts pay again add at most this share of
its mass."""

CHARS_PER_TOKEN = 4.0
"""Characters per token for the mass estimate (Llama-style tokenizers on English text)."""


@dataclass
class Part:
    """Consecutive requests of one prefix group that one replica serves in order."""

    indices: list[int]
    group: int
    mass: float
    """Estimated tokens of work: uncached prompt tokens plus output budgets."""
    key: str = ""
    """The group's routing key (`group_key`); equal for every part of a group."""


@dataclass
class FleetPlan:
    """`queues[r]`: the parts replica `r` serves, in plan order; see the module invariants."""

    queues: list[list[Part]]
    repaid_chars: int = 0
    """Shared-prefix characters paid again because a group was cut into parts."""
    loads: list[float] = field(default_factory=list)
    """Planned mass per replica."""


def _lcp(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def prefix_groups(prompts: list[str], min_chars: int = GROUP_MIN_CHARS) -> list[int]:
    """The prefix group number of each prompt (see the module docstring), from 0 upwards."""
    if not prompts:
        return []
    common = len(os.path.commonprefix(prompts))
    groups = [0]
    for prev, cur in zip(prompts, prompts[1:], strict=False):
        joined = _lcp(prev, cur) >= common + min_chars
        groups.append(groups[-1] if joined else groups[-1] + 1)
    return groups


def group_key(prompt: str, common: int) -> str:
    """A stable key of the prefix group `prompt` starts: every prompt of a group shares its
    first `common + GROUP_MIN_CHARS` characters (each shares that many with its neighbour)."""
    head = prompt[: common + GROUP_MIN_CHARS]
    return hashlib.sha1(head.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _masses(prompts: Sequence[str], outputs: Sequence[int], groups: list[int]) -> list[float]:
    """Mass of each request given the previous one of its group is cached."""
    out = []
    for i, p in enumerate(prompts):
        shared = _lcp(prompts[i - 1], p) if i and groups[i - 1] == groups[i] else 0
        out.append((len(p) - shared) / CHARS_PER_TOKEN + outputs[i])
    return out


def _cut(members: list[int], masses: list[float], pieces: int) -> list[list[int]]:
    """`members` cut into at most `pieces` contiguous runs of near-equal mass."""
    total = sum(masses[i] for i in members)
    runs: list[list[int]] = [[]]
    acc = 0.0
    for i in members:
        if runs[-1] and acc >= total * len(runs) / pieces and len(runs) < pieces:
            runs.append([])
        runs[-1].append(i)
        acc += masses[i]
    return runs


def plan_fleet(
    prompts: Sequence[str],
    n_replicas: int,
    *,
    routing: Routing = "affinity",
    outputs: Sequence[int] | None = None,
    tails: Sequence[str | None] = (),
) -> FleetPlan:
    """The fleet plan of `prompts` over `n_replicas` (see the module invariants).

    `outputs[i]` is request i's output budget in tokens (default 0); `tails[r]` the last
    prompt replica r served in this run, None when it served none."""
    if n_replicas < 1:
        raise ValueError(f"n_replicas must be >= 1, got {n_replicas}")
    n = len(prompts)
    outputs = outputs if outputs is not None else [0] * n
    queues: list[list[Part]] = [[] for _ in range(n_replicas)]
    if not n:
        return FleetPlan(queues, 0, [0.0] * n_replicas)
    common = len(os.path.commonprefix(list(prompts)))
    if routing == "round_robin":
        groups = list(range(n))
        masses = _masses(prompts, outputs, groups)
        loads = [0.0] * n_replicas
        for i in range(n):
            r = i % n_replicas
            queues[r].append(Part([i], i, masses[i], group_key(prompts[i], common)))
            loads[r] += masses[i]
        return FleetPlan(queues, 0, loads)

    groups = prefix_groups(list(prompts))
    masses = _masses(prompts, outputs, groups)
    fair = sum(masses) / n_replicas
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    parts: list[Part] = []
    repaid = 0
    for g, idx in members.items():
        mass = sum(masses[i] for i in idx)
        pieces = min(len(idx), math.ceil(mass / fair)) if fair > 0 else 1
        key = group_key(prompts[idx[0]], common)
        runs = _cut(idx, masses, pieces) if pieces > 1 else [idx]
        extras = [_lcp(prompts[run[0] - 1], prompts[run[0]]) if k else 0
                  for k, run in enumerate(runs)]  # fmt: skip
        if sum(extras) / CHARS_PER_TOKEN > MAX_CUT_OVERHEAD * mass:
            runs, extras = [idx], [0]
        repaid += sum(extras)
        for run, extra in zip(runs, extras, strict=True):
            part_mass = sum(masses[i] for i in run) + extra / CHARS_PER_TOKEN
            parts.append(Part(run, g, part_mass, key))

    loads = [0.0] * n_replicas
    placed: dict[int, int] = {}  # part position -> replica
    threshold = common + GROUP_MIN_CHARS
    free = {r for r in range(n_replicas) if tails[r : r + 1] and tails[r] is not None}
    for pos, part in enumerate(parts if free else ()):  # continuations stay home
        first = prompts[part.indices[0]]
        home = next(
            (r for r in sorted(free) if tails[r:r + 1] and tails[r] is not None
             and _lcp(tails[r], first) >= threshold),
            None,
        )  # fmt: skip
        if home is not None:
            placed[pos] = home
            loads[home] += part.mass
            free.discard(home)
        if not free:
            break
    heap = [(loads[r], r) for r in range(n_replicas)]
    heapq.heapify(heap)
    order = sorted(
        (pos for pos in range(len(parts)) if pos not in placed), key=lambda p: -parts[p].mass
    )
    for pos in order:  # longest processing time first, to the least-loaded replica
        load, r = heapq.heappop(heap)
        placed[pos] = r
        loads[r] = load + parts[pos].mass
        heapq.heappush(heap, (loads[r], r))
    for pos in range(len(parts)):
        queues[placed[pos]].append(parts[pos])
    return FleetPlan(queues, repaid, loads)
