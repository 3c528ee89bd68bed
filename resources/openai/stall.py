"""When a hung or very slow replica of a fleet loses its queue (`stalled`).

A replica that accepts requests and answers none (or answers 100x slower than the others)
does not trip the circuit breaker until its attempts time out, and meanwhile holds its
planned work. `stalled(replicas, now)` names the live replicas to give up now. Invariants:

- a replica is stalled when its oldest request in flight has waited longer than
  `max(floor_s, factor x m)`, m the median latency of the requests the OTHER live replicas
  answered (their last 64 each), and at least `min_answers` such answers exist (the fleet
  has shown how fast it is);
- never the last live replica, and never two at once when that would leave none: at least
  one live replica always stays;
- being stalled gives the replica up (`RunState.give_up`): its unstarted lanes and parts
  move to the others, while the requests it holds in flight stay there until they are
  answered (the answer is kept) or `resources.openai.run` abandons them (after twice the
  bound, like a timeout: the connection is closed, no answer can come any more) and they
  move: an answer that came is never thrown away and its request sent again.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from resources.openai.fleet import Replica

__all__ = ["STALL_FACTOR", "STALL_FLOOR_S", "STALL_MIN_ANSWERS", "stalled"]

STALL_FACTOR = 10.0
"""How many times the others' median latency a request may wait before its replica stalls."""
STALL_FLOOR_S = 0.5
"""The shortest wait that counts as a stall, whatever the median (start-up, noise)."""
STALL_MIN_ANSWERS = 8
"""Answers of the other replicas needed before their median is trusted."""


def stalled(
    replicas: Sequence[Replica],
    now: float,
    *,
    factor: float = STALL_FACTOR,
    floor_s: float = STALL_FLOOR_S,
    min_answers: int = STALL_MIN_ANSWERS,
) -> list[tuple[Replica, str, float]]:
    """The live replicas to give up at time `now` (`time.perf_counter()`), each with the
    reason and its bound in seconds (see the module invariants)."""
    live = [r for r in replicas if r.dead is None]
    out: list[tuple[Replica, str, float]] = []
    for replica in live:
        if not replica.in_flight or len(live) - len(out) <= 1:
            continue
        others = [x for r in live if r is not replica for x in r.latencies]
        if len(others) < min_answers:
            continue
        median = statistics.median(others)
        bound = max(floor_s, factor * median)
        waited = now - min(replica.in_flight.values())
        if waited > bound:
            out.append(
                (
                    replica,
                    f"stalled: a request waited {waited:.3g}s at {replica.base_url}, over "
                    f"max({floor_s:g}s, {factor:g} x the other replicas' median latency "
                    f"{median:.3g}s)",
                    bound,
                )
            )
    return out
