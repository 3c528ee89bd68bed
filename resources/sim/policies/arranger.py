"""RelServe's Adaptive Batch Arranger (relserve.txt §4.3, Eq. 14-17) for the simulated engine.

Each iteration there are two candidates: the decode candidate d (every running request) and
the prefill candidate p (requests taken from the head of the priority-ordered waiting queue, of
ONE relQuery only, within `max_num_batched_tokens`, `max_num_seqs` and the free KV blocks; a
dry run, nothing is allocated). If one is empty the other runs. Otherwise, with
m+ = min Prio over d and m- = min Prio over p (Eq. 14):

- m+ > m-  (preemption: a shorter relQuery arrived): run p;
- m+ == m- (internal: the same relQuery is half prefilled): run p, to widen its decode batch;
- m+ < m-  (transitional: the running relQueries are in their tail): run p iff
      Delta = Delta+ + Delta- < 0, where
      Delta+ = L_prefill(p) * |R+| + sum over R in R+ of alpha_d * req(p) * min(OL(R), OL(p))
                                                                               (Eq. 15)
      Delta- = - |R-| * beta_d * min(OL(p), max over R in R+ of OL(R))          (Eq. 16)
  Eq. 16 is printed without the minus sign, but the text calls Delta- the latency *reduction*
  of the waiting relQueries and runs p when Delta < 0 (Eq. 17), which a non-negative Delta-
  could never make happen; the sign is restored here. R+ are the relQueries with running
  requests, R- those with waiting requests; OL(R) of a running relQuery is the largest number of
  output steps its running requests have left (the overlap the decode batches can share),
  OL(p) the output limit of p's relQuery.

`ArrangerConfig.arrangement` selects the ablations of §5.3 (Fig. 10): "adaptive" (the above),
"prefill" (RelServe (PP): always p in the transitional case) or "decode" (RelServe (DP)).
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.pem import LinearPredictors
from resources.sim.policies.base import ScheduleContext, SimSeq
from resources.sim.policies.priority import RelQueryQueue, fits

__all__ = [
    "ARRANGEMENTS",
    "AdaptiveBatchArranger",
    "ArrangerConfig",
    "Decision",
    "PrefillCandidate",
]

ARRANGEMENTS: tuple[str, ...] = ("adaptive", "prefill", "decode")


@dataclass(frozen=True)
class ArrangerConfig:
    """Settings of the Adaptive Batch Arranger."""

    arrangement: str = "adaptive"
    """What the transitional case does: one of `ARRANGEMENTS`."""

    def __post_init__(self) -> None:
        if self.arrangement not in ARRANGEMENTS:
            raise ValueError(
                f"unknown arrangement {self.arrangement!r}; expected one of {list(ARRANGEMENTS)}"
            )


@dataclass(frozen=True)
class PrefillCandidate:
    """The dry-run prefill candidate p_t^cand."""

    relquery_id: str
    num_requests: int
    """req(p)."""
    uncached_tokens: int
    """utok(p), from the real prefix-cache look-up."""
    output_limit: int
    """OL(p)."""


@dataclass(frozen=True)
class Decision:
    """What the arranger chose, and why."""

    kind: str
    """"prefill" or "decode"."""
    case: str
    """"only-prefill", "only-decode", "preemption", "internal" or "transitional"."""
    candidate: PrefillCandidate | None = None
    delta_s: float | None = None
    """Eq. 17's Delta in the transitional case."""


class AdaptiveBatchArranger:
    """Eq. 14-17 (see the module docstring)."""

    def __init__(self, config: ArrangerConfig | None = None) -> None:
        self.config = config or ArrangerConfig()

    @staticmethod
    def prefill_candidate(
        waiting: RelQueryQueue,
        running: list[SimSeq],
        ctx: ScheduleContext,
        max_requests: int | None = None,
    ) -> PrefillCandidate | None:
        """p_t^cand: the head relQuery's waiting requests that would be admitted now (at most
        `max_requests` of them; None if not even the first would be)."""
        if not waiting:
            return None
        rid, group = waiting.head_relquery()
        budget = ctx.max_num_batched_tokens
        slots = ctx.max_num_seqs - len(running)
        free = ctx.pool.num_free - ctx.watermark_blocks
        touched: set[int] = set()
        n = utok = 0
        limit = 0
        if max_requests is not None:
            slots = min(slots, max_requests)
        for seq in group:
            if n >= slots:
                break
            computed = ctx.lookup(seq)
            num_new = seq.num_tokens - len(computed) * BLOCK_SIZE
            if num_new > budget:
                break
            need = fits(ctx, seq, free, touched, computed)
            if need < 0:
                break
            free -= need
            budget -= num_new
            utok += num_new
            n += 1
            limit = max(limit, seq.max_tokens - seq.generated)
        if n == 0:
            return None
        return PrefillCandidate(rid, n, utok, limit)

    def decide(
        self,
        waiting: RelQueryQueue,
        running: list[SimSeq],
        ctx: ScheduleContext,
        predictors: LinearPredictors,
        remaining: dict[str, int] | None = None,
    ) -> Decision:
        """Choose the batch kind; `running` must be sorted by priority (head = m+);
        `remaining` is OL(R) per running relQuery (computed from `running` when None).

        The candidate is formed lazily: its first request decides whether it is empty, and the
        whole candidate is formed only where Eq. 15-16 need it (the adaptive transitional case).
        """
        candidate = self.prefill_candidate(waiting, running, ctx, max_requests=1)
        if candidate is None:
            return Decision("decode", "only-decode")
        if not running:
            return Decision("prefill", "only-prefill", candidate)
        prio = waiting.priority
        m_plus = prio[running[0].relquery_id]  # Eq. 14
        m_minus = prio[candidate.relquery_id]
        if m_plus > m_minus:
            return Decision("prefill", "preemption", candidate)
        if m_plus == m_minus:
            return Decision("prefill", "internal", candidate)
        arrangement = self.config.arrangement
        if arrangement != "adaptive":
            return Decision(arrangement, "transitional", candidate)
        candidate = self.prefill_candidate(waiting, running, ctx) or candidate
        delta = self.delta(waiting, running, candidate, predictors, remaining)
        return Decision("prefill" if delta < 0 else "decode", "transitional", candidate, delta)

    @staticmethod
    def delta(
        waiting: RelQueryQueue,
        running: list[SimSeq],
        candidate: PrefillCandidate,
        predictors: LinearPredictors,
        remaining: dict[str, int] | None = None,
    ) -> float:
        """Eq. 15-17: the change in total latency if p runs before d. `remaining` maps each
        running relQuery to OL(R), the most output steps its running requests have left."""
        if remaining is None:
            remaining = {}
            for s in running:
                rem = s.max_tokens - s.generated
                if rem > remaining.get(s.relquery_id, 0):
                    remaining[s.relquery_id] = rem
        ol_p = candidate.output_limit
        req_p = candidate.num_requests
        plus = predictors.prefill(candidate.uncached_tokens) * len(remaining)
        plus += sum(predictors.alpha_d * req_p * min(ol, ol_p) for ol in remaining.values())
        minus = -waiting.num_groups() * predictors.beta_d * min(ol_p, max(remaining.values()))
        return plus + minus
