"""Per-relQuery accounting: arrival, waiting, core running, tail running and latency.

Definitions (relserve.txt §2.1, Definition 2.2, Eq. 2). A relQuery R arrives at `arrival(R)`;
its requests are computed by prefill batches p_1..p_m (a chunk of a prompt, or a recompute after
preemption, is a prefill too) and decode batches d_1..d_n:

    waiting(R) = start_ts(p_1) - arrival(R)
    core(R)    = end_ts(p_m) - start_ts(p_1)
    tail(R)    = end_ts(d_n) - end_ts(p_m)
    latency(R) = end_ts(d_n) - arrival(R) = waiting + core + tail

and the fairness metric of Eq. 13: unit_waiting(R) = waiting(R) / req(R_0).

Invariants: every period is >= 0 and the three sum to the latency (up to float rounding);
requests the engine rejected (`Response.error`) take no part in the timing but are counted in
`num_errors`; a relQuery whose every request was rejected has all periods 0.

`summarize(timings)` gives means, p50, p99 and max across relQueries (numpy's linear
percentile), the figures `benchmarks.scheduler` reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from resources.engine import Request, Response

__all__ = [
    "LatencySummary",
    "RelQuery",
    "RelQueryResult",
    "RelQueryTiming",
    "WorkloadResult",
    "relquery_timing",
    "summarize",
]


@dataclass(frozen=True)
class RelQuery:
    """One relQuery submitted to an engine: its requests arrive together at `arrival_s`."""

    relquery_id: str
    """Unique within a workload."""
    requests: Sequence[Request]
    """The relQuery's requests (one per table row), in submission order."""
    arrival_s: float = 0.0
    """Simulated second at which the relQuery reaches the engine (>= 0)."""


@dataclass(frozen=True)
class RelQueryTiming:
    """The latency periods of one relQuery (see the module docstring), in simulated seconds."""

    relquery_id: str
    arrival_s: float
    num_requests: int
    """req(R_0): requests submitted, rejected ones included."""
    first_prefill_start_s: float
    """start_ts(p_1); equals `arrival_s` when no request was served."""
    last_prefill_end_s: float
    """end_ts(p_m)."""
    finish_s: float
    """end_ts(d_n): the relQuery's last output token."""
    num_errors: int = 0

    @property
    def waiting_s(self) -> float:
        return self.first_prefill_start_s - self.arrival_s

    @property
    def core_s(self) -> float:
        return self.last_prefill_end_s - self.first_prefill_start_s

    @property
    def tail_s(self) -> float:
        return self.finish_s - self.last_prefill_end_s

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def unit_waiting_s(self) -> float:
        """Eq. 13: waiting time per submitted request."""
        return self.waiting_s / self.num_requests if self.num_requests else 0.0


def relquery_timing(
    relquery_id: str,
    arrival_s: float,
    num_requests: int,
    spans: Iterable[tuple[float, float, float]],
    num_errors: int = 0,
) -> RelQueryTiming:
    """Timing of a relQuery from its served requests' (prefill start, prefill end, finish).

    >>> t = relquery_timing("q", 1.0, 2, [(2.0, 3.0, 5.0), (2.5, 4.0, 4.5)])
    >>> (t.waiting_s, t.core_s, t.tail_s, t.latency_s, t.unit_waiting_s)
    (1.0, 2.0, 1.0, 4.0, 0.5)
    """
    spans = list(spans)
    if not spans:
        return RelQueryTiming(
            relquery_id, arrival_s, num_requests, arrival_s, arrival_s, arrival_s, num_errors
        )
    start = min(s for s, _, _ in spans)
    end_prefill = max(e for _, e, _ in spans)
    finish = max(f for _, _, f in spans)
    if not arrival_s <= start <= end_prefill <= finish:
        raise ValueError(
            f"relQuery {relquery_id!r}: inconsistent timestamps arrival={arrival_s} "
            f"first prefill start={start} last prefill end={end_prefill} finish={finish}"
        )
    return RelQueryTiming(
        relquery_id, arrival_s, num_requests, start, end_prefill, finish, num_errors
    )


@dataclass(frozen=True)
class LatencySummary:
    """Statistics across relQueries (seconds; unit waiting in seconds per request)."""

    num_relqueries: int
    mean_latency_s: float
    p50_latency_s: float
    p99_latency_s: float
    max_latency_s: float
    mean_waiting_s: float
    mean_core_s: float
    mean_tail_s: float
    max_unit_waiting_s: float

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def summarize(timings: Sequence[RelQueryTiming]) -> LatencySummary:
    """Means, p50, p99 and max of latency; means of the three periods (ValueError if empty)."""
    if not timings:
        raise ValueError("summarize needs at least one relQuery timing, got none")
    lat = np.array([t.latency_s for t in timings])
    return LatencySummary(
        num_relqueries=len(timings),
        mean_latency_s=float(lat.mean()),
        p50_latency_s=float(np.percentile(lat, 50)),
        p99_latency_s=float(np.percentile(lat, 99)),
        max_latency_s=float(lat.max()),
        mean_waiting_s=float(np.mean([t.waiting_s for t in timings])),
        mean_core_s=float(np.mean([t.core_s for t in timings])),
        mean_tail_s=float(np.mean([t.tail_s for t in timings])),
        max_unit_waiting_s=float(max(t.unit_waiting_s for t in timings)),
    )


@dataclass(frozen=True)
class RelQueryResult:
    """One relQuery's responses (in request order) and timing."""

    relquery_id: str
    responses: list[Response]
    timing: RelQueryTiming


@dataclass(frozen=True)
class WorkloadResult:
    """What `SimulatedEngine.run_workload` returns."""

    relqueries: list[RelQueryResult]
    """In the order the relQueries were given."""
    makespan_s: float
    """Simulated seconds from t=0 to the last output token."""
    wall_time_s: float
    """Wall seconds the simulation took (tokenization included)."""
    scheduler_s: float
    """Wall seconds spent inside `policy.schedule` (the scheduling overhead)."""
    num_iterations: int
    num_preemptions: int
    policy_overhead: dict[str, float] = field(default_factory=dict)
    """The policy's own split of its overhead (e.g. RelServe: updater_s, arranger_s)."""

    @property
    def timings(self) -> list[RelQueryTiming]:
        return [r.timing for r in self.relqueries]

    def summary(self) -> LatencySummary:
        return summarize(self.timings)
