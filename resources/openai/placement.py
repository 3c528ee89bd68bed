"""Which replica of a fleet serves which requests: prefix groups of KV blocks, balanced in
predicted seconds.

Pure planning (no I/O); `resources.openai.engine` executes the plan. The input is a run's
prompts in plan order (after dedup and GGR) and the engine's tokenizer (`tokenize`: the
server's own via `/tokenize`, else the sim's `ApproxTokenizer`); the output
`FleetPlan.queues[r]`: the parts replica `r` serves, in plan order.

The unit is the engine's: what a prefix cache reuses is whole KV blocks of `block_size`
tokens (vLLM, the sim: 16). The **fleet-wide prefix** is the full blocks every prompt shares
(the instruction): each replica caches it once, so it groups nothing. A **prefix group**
(`prefix_groups`) is a maximal run of consecutive prompts in which each shares with the
previous one at least one full block more than the fleet-wide prefix: sending the two to
different replicas would recompute that block, sending them to one replica never costs a
hit. Every prompt of a group shares its first `(common + 1)` blocks with the group's first
prompt (a common prefix of neighbours is one of all), which is the group's routing key.

Time is the cost model's (`resources.sim.cost_model`, `CostRates`): a request costs the
prefill of its uncached tokens (its prompt less the full blocks it shares with the previous
request of its part, or the fleet-wide prefix) plus the decode of its output budget at the
replica's batch (`f / batch` per output token: an iteration's fixed cost is shared by the
requests in flight), so an output token weighs about ten prefill tokens, as on the GPU.

Invariants of `plan_fleet(prompts, n, ...)`:
- every request is in exactly one part and every part on exactly one replica's queue; a
  part is contiguous in plan order and inside one group; a replica's queue is in plan order
  (so GGR's order holds inside each replica);
- a group is kept whole unless its predicted seconds exceed the fair share (total / n) by
  more than cutting it costs: then it is cut into `ceil(seconds / fair)` contiguous parts
  of near-equal seconds, each later part paying the prefill of the blocks it shares with
  the part before it again (`Part.seconds` counts it; `repaid_tokens` sums it);
- `routing="affinity"`: parts go longest first to the replica that would finish them
  earliest (`(load + seconds) / speed`, `speeds` the replicas' measured relative speeds,
  1 each by default); a part whose first prompt continues a replica's `tails[r]` (the last
  prompt that replica served, from an earlier chunk of the same run) goes to that replica
  first; `routing="round_robin"`: request `i` alone to replica `i mod n` (the baseline).

>>> head = "Q: " + "a " * 40
>>> plan = plan_fleet([head + "1", head + "2", "Q: b", "Q: c"], 2, outputs=[16] * 4)
>>> [[p.indices for p in queue] for queue in plan.queues]  # the group stays whole
[[[0, 1]], [[2], [3]]]
>>> prompts = [head + f"{k} " + "word " * 400 for k in range(6)] + ["Q: b"]
>>> plan = plan_fleet(prompts, 2, outputs=[16] * 7)
>>> [[p.indices for p in queue] for queue in plan.queues], plan.repaid_tokens
([[[0, 1, 2], [6]], [[3, 4, 5]]], 32)
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from resources.sim.cost_model import CostCoefficients, coefficients_from_profile
from resources.sim.profiles import resolve_deployment
from resources.sim.tokenizer import ApproxTokenizer

__all__ = [
    "BLOCK_SIZE",
    "CostRates",
    "FleetPlan",
    "Part",
    "Routing",
    "group_key",
    "plan_fleet",
    "prefix_groups",
]

Routing = Literal["affinity", "round_robin", "router"]
Tokenize = Callable[[str], Sequence[int]]

BLOCK_SIZE = 16
"""vLLM's default KV block (`CacheConfig.block_size` on CUDA) and the sim's."""


@functools.cache
def _approx() -> Tokenize:
    return ApproxTokenizer().encode


@dataclass(frozen=True)
class CostRates:
    """Predicted seconds on one replica, from the cost model's coefficients (seconds per
    token, per KV read, per prefill request, per iteration) and `batch`, the requests a
    replica keeps in flight. Only ratios matter to balance; the scale is one GPU's."""

    coefficients: CostCoefficients
    batch: int = 16
    block_size: int = BLOCK_SIZE

    @classmethod
    def for_deployment(
        cls, hardware: str = "L4", model: str = "llama-2-7b", batch: int = 16
    ) -> CostRates:
        """The rates of `hardware` x `model` when the profiles know them, else of an L4 with
        Llama-2-7B (a remote server's GPU is unknown; the decode/prefill ratio is similar)."""
        try:
            deployment = resolve_deployment(hardware, model)
        except ValueError:
            deployment = resolve_deployment("L4", "llama-2-7b")
        return cls(coefficients_from_profile(deployment), max(1, batch))

    def request(self, prompt: int, uncached: int, output: int) -> tuple[float, float]:
        """(seconds independent of the batch, seconds to divide by the batch) of one request
        of `prompt` tokens, `uncached` of them to prefill, and `output` to decode."""
        c = self.coefficients
        cached = prompt - uncached
        own = (
            c.a * uncached + c.b * (uncached * uncached + 2 * cached * uncached) + c.e
            + output * (c.a + c.d * (prompt + output / 2))
        )  # fmt: skip
        return own, c.f * (output + 1)  # one iteration per output token plus the prefill's


@dataclass
class Part:
    """Consecutive requests of one prefix group that one replica serves in order."""

    indices: list[int]
    group: int
    own_s: float = 0.0
    """Predicted seconds that do not shrink with the batch (prefill, per-token work)."""
    shared_s: float = 0.0
    """Predicted seconds of iterations shared by the requests in flight (divided by batch)."""
    key: str = ""
    """The group's routing key (`group_key`); equal for every part of a group."""
    batch: int = 16
    """The batch `mass` is predicted at (the replica's requests in flight)."""

    def seconds(self, batch: int | None = None) -> float:
        """Predicted seconds of this part on a replica running `batch` requests at once,
        counted from a cache holding the fleet-wide prefix only."""
        return self.own_s + self.shared_s / max(1, batch or self.batch)

    @property
    def mass(self) -> float:
        """Predicted seconds at the planned batch."""
        return self.seconds()


@dataclass
class FleetPlan:
    """`queues[r]`: the parts replica `r` serves, in plan order; see the module invariants."""

    queues: list[list[Part]]
    repaid_tokens: int = 0
    """Shared-prefix tokens prefilled again because a group was cut into parts."""
    loads: list[float] = field(default_factory=list)
    """Planned predicted seconds per replica."""
    measured_speeds: list[float | None] = field(default_factory=list)
    """Filled after the run (`resources.openai.fleet.measured_speeds`): each replica's
    measured speed relative to the prediction, for the next chunk's plan."""


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_blocks(tokens: Sequence[Sequence[int]], block_size: int) -> int:
    if not tokens:
        return 0
    common = min(len(t) for t in tokens)
    first = tokens[0]
    for t in tokens[1:]:
        common = min(common, _lcp(first, t))
    return common // block_size


def _groups(tokens: Sequence[Sequence[int]], block_size: int, common: int) -> list[int]:
    groups = [0] if tokens else []
    for prev, cur in zip(tokens, tokens[1:], strict=False):
        joined = _lcp(prev, cur) // block_size > common
        groups.append(groups[-1] if joined else groups[-1] + 1)
    return groups


def prefix_groups(
    prompts: Sequence[str], tokenize: Tokenize | None = None, block_size: int = BLOCK_SIZE
) -> list[int]:
    """The prefix group number of each prompt (see the module docstring), from 0 upwards."""
    tokens = [tokenize(p) if tokenize else _approx()(p) for p in prompts]
    return _groups(tokens, block_size, _common_blocks(tokens, block_size))


def group_key(tokens: Sequence[int], common_blocks: int, block_size: int = BLOCK_SIZE) -> str:
    """A stable key of the prefix group whose first prompt has `tokens`: its first
    `common_blocks + 1` blocks, which every prompt of the group shares."""
    head = ",".join(str(t) for t in tokens[: (common_blocks + 1) * block_size])
    return hashlib.sha1(head.encode()).hexdigest()[:16]


def _cut(members: list[int], secs: dict[int, float], pieces: int) -> list[list[int]]:
    """`members` cut into at most `pieces` contiguous runs of near-equal seconds."""
    total = sum(secs[i] for i in members)
    runs: list[list[int]] = [[]]
    acc = 0.0
    for i in members:
        if runs[-1] and acc >= total * len(runs) / pieces and len(runs) < pieces:
            runs.append([])
        runs[-1].append(i)
        acc += secs[i]
    return runs


def plan_fleet(
    prompts: Sequence[str],
    n_replicas: int,
    *,
    routing: Routing = "affinity",
    outputs: Sequence[int] | None = None,
    tails: Sequence[str | None] = (),
    tokenize: Tokenize | None = None,
    rates: CostRates | None = None,
    speeds: Sequence[float] | None = None,
) -> FleetPlan:
    """The fleet plan of `prompts` over `n_replicas` (see the module invariants).

    `outputs[i]` is request i's output budget in tokens (default 0); `tails[r]` the last
    prompt replica r served in this run, None when it served none; `tokenize` the engine's
    tokenizer (default: the sim's); `rates` the cost model (default: an L4 with Llama-2-7B
    at a batch of 16); `speeds[r]` replica r's relative speed (default 1 each)."""
    if n_replicas < 1:
        raise ValueError(f"n_replicas must be >= 1, got {n_replicas}")
    n = len(prompts)
    outputs = outputs if outputs is not None else [0] * n
    rates = rates or CostRates.for_deployment()
    encode = tokenize or _approx()
    bs = rates.block_size
    speed = [s if s and s > 0 else 1.0 for s in (speeds or [])][:n_replicas]
    speed += [1.0] * (n_replicas - len(speed))
    queues: list[list[Part]] = [[] for _ in range(n_replicas)]
    if not n:
        return FleetPlan(queues, 0, [0.0] * n_replicas)
    tokens = [encode(p) for p in prompts]
    common = _common_blocks(tokens, bs)
    groups = list(range(n)) if routing == "round_robin" else _groups(tokens, bs, common)
    shared = [  # full blocks request i finds cached when served after the one before it
        max(common, _lcp(tokens[i - 1], tokens[i]) // bs if i and groups[i - 1] == groups[i]
            else common) * bs
        for i in range(n)
    ]  # fmt: skip

    def part(run: list[int], g: int, head: int, key: str) -> Part:
        """Part of `run`, its first request finding `head` tokens cached, not `shared`."""
        own = shr = 0.0
        for k, i in enumerate(run):
            cached = min(head if k == 0 else shared[i], max(0, len(tokens[i]) - 1))
            o, s = rates.request(len(tokens[i]), len(tokens[i]) - cached, outputs[i])
            own, shr = own + o, shr + s
        return Part(run, g, own, shr, key, rates.batch)

    if routing == "round_robin":
        loads = [0.0] * n_replicas
        for i in range(n):
            p = part([i], i, common * bs, group_key(tokens[i], common, bs))
            queues[i % n_replicas].append(p)
            loads[i % n_replicas] += p.mass
        return FleetPlan(queues, 0, loads)

    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    whole = {g: part(idx, g, common * bs, group_key(tokens[idx[0]], common, bs))
             for g, idx in members.items()}  # fmt: skip
    fair = sum(p.mass for p in whole.values()) / n_replicas
    parts: list[Part] = []
    repaid = 0
    for g, idx in members.items():
        kept = whole[g]
        pieces = min(len(idx), math.ceil(kept.mass / fair)) if fair > 0 else 1
        if pieces > 1:
            runs = _cut(idx, {i: part([i], g, shared[i], "").mass for i in idx}, pieces)
            cut = [part(run, g, common * bs, kept.key) for run in runs]
            extra = sum(p.mass for p in cut) - kept.mass
            # worth cutting only if what the cut saves in balance exceeds what it repays
            if extra < kept.mass - fair:
                parts += cut
                repaid += sum(shared[run[0]] - common * bs for run in runs[1:])
                continue
        parts.append(kept)
    return _place(parts, prompts, tokens, tails, encode, common, bs, speed, queues, repaid)


def _place(parts, prompts, tokens, tails, encode, common, bs, speed, queues, repaid) -> FleetPlan:
    """Continuations to their home replica, then longest first to the earliest finish."""
    n_replicas = len(queues)
    loads = [0.0] * n_replicas
    placed: dict[int, int] = {}  # part position -> replica
    tail_tokens = {r: encode(t) for r, t in enumerate(tails[:n_replicas]) if t is not None}
    free = set(tail_tokens)
    for pos, p in enumerate(parts if free else ()):  # continuations stay home
        first = tokens[p.indices[0]]
        home = next((r for r in sorted(free) if _lcp(tail_tokens[r], first) // bs > common),
                    None)  # fmt: skip
        if home is not None:
            placed[pos] = home
            loads[home] += p.mass
            free.discard(home)
        if not free:
            break
    order = sorted((pos for pos in range(len(parts)) if pos not in placed),
                   key=lambda pos: -parts[pos].mass)  # fmt: skip
    for pos in order:  # longest processing time first, to the replica that ends it first
        r = min(range(n_replicas), key=lambda r: ((loads[r] + parts[pos].mass) / speed[r], r))
        placed[pos] = r
        loads[r] += parts[pos].mass
    for pos in range(len(parts)):
        queues[placed[pos]].append(parts[pos])
    return FleetPlan(queues, repaid, loads)
