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

Overhead: the candidate is formed only as far as the decision needs it (`head_candidate`: is it
empty, without a look-up when the head's whole prompt fits; `_transitional`: stop once bounds on
Delta settle its sign, with margins far above rounding) and look-ups go through the updater's
`priority.CachedLookup`; the decisions are those of forming the whole candidate every time.

`ArrangerConfig.arrangement` selects the ablations of §5.3 (Fig. 10): "adaptive" (the above),
"prefill" (RelServe (PP): always p in the transitional case) or "decode" (RelServe (DP)).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.pem import LinearPredictors
from resources.sim.policies.base import ScheduleContext, SimSeq
from resources.sim.policies.priority import CachedLookup, RelQueryQueue, fits

__all__ = [
    "ARRANGEMENTS",
    "AdaptiveBatchArranger",
    "ArrangerConfig",
    "Decision",
    "PrefillCandidate",
]

ARRANGEMENTS: tuple[str, ...] = ("adaptive", "prefill", "decode")
_max_tokens = attrgetter("max_tokens")
_generated = attrgetter("generated")
_num_tokens = attrgetter("num_tokens")


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


class PrefillCandidate:
    """The dry-run prefill candidate p_t^cand (a plain slotted class: one is made per
    iteration)."""

    __slots__ = ("num_requests", "output_limit", "relquery_id", "uncached_tokens")

    def __init__(
        self, relquery_id: str, num_requests: int, uncached_tokens: int | None, output_limit: int
    ) -> None:
        self.relquery_id = relquery_id
        self.num_requests = num_requests
        """req(p)."""
        self.uncached_tokens = uncached_tokens
        """utok(p), from the real prefix-cache look-up; None for the head-only candidate of
        the cases that do not price p (`AdaptiveBatchArranger.head_candidate`)."""
        self.output_limit = output_limit
        """OL(p)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrefillCandidate) and (
            self.relquery_id,
            self.num_requests,
            self.uncached_tokens,
            self.output_limit,
        ) == (other.relquery_id, other.num_requests, other.uncached_tokens, other.output_limit)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PrefillCandidate({self.relquery_id!r}, num_requests={self.num_requests}, "
            f"uncached_tokens={self.uncached_tokens}, output_limit={self.output_limit})"
        )


class Decision:
    """What the arranger chose, and why."""

    __slots__ = ("candidate", "case", "delta_s", "key", "kind")

    def __init__(
        self,
        kind: str,
        case: str,
        candidate: PrefillCandidate | None = None,
        delta_s: float | None = None,
    ) -> None:
        self.kind = kind
        """"prefill" or "decode"."""
        self.case = case
        """"only-prefill", "only-decode", "preemption", "internal" or "transitional"."""
        self.candidate = candidate
        self.delta_s = delta_s
        """Eq. 17's Delta in the transitional case."""
        key = _KEYS.get((case, kind))
        if key is None:
            key = _KEYS[(case, kind)] = f"{case}/{kind}"
        self.key = key
        """"case/kind", the key of `RelServePolicy.cases`."""

    def __repr__(self) -> str:
        return f"Decision({self.kind!r}, {self.case!r}, {self.candidate!r}, {self.delta_s!r})"


_KEYS: dict[tuple[str, str], str] = {}


class AdaptiveBatchArranger:
    """Eq. 14-17 (see the module docstring)."""

    def __init__(self, config: ArrangerConfig | None = None) -> None:
        self.config = config or ArrangerConfig()
        self.lookup: CachedLookup | None = None
        """The prefix-cache look-up to use (`priority.CachedLookup`, shared with the updater by
        `RelServePolicy`); None: `ctx.lookup`."""

    @staticmethod
    def prefill_candidate(
        waiting: RelQueryQueue,
        running: list[SimSeq],
        ctx: ScheduleContext,
        max_requests: int | None = None,
        lookup: CachedLookup | None = None,
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
            computed = ctx.lookup(seq) if lookup is None else lookup(ctx, seq)
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

    def head_candidate(
        self, waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext
    ) -> PrefillCandidate | None:
        """Whether p_t^cand is non-empty, i.e. the head of the waiting queue would be admitted
        now: the candidate of that one request, with `uncached_tokens` None (not looked up),
        or None. The same answer as `prefill_candidate(..., max_requests=1)`, which it calls
        only when the whole prompt might not fit: a request's uncached tokens are at most its
        tokens, and the blocks its admission takes (`priority.fits`) at most
        ceil(tokens / block size), so a prompt that fits the token budget and the free blocks
        whole is admitted whatever the prefix cache holds, without a look-up."""
        if not waiting or len(running) >= ctx.max_num_seqs:
            return None
        rid, group = waiting.head_relquery()
        seq = group[0]
        n = seq.num_tokens
        if (
            n <= ctx.max_num_batched_tokens
            and -(-n // BLOCK_SIZE) <= ctx.pool.num_free - ctx.watermark_blocks
        ):
            return PrefillCandidate(rid, 1, None, seq.max_tokens - seq.generated)
        return self.prefill_candidate(waiting, running, ctx, 1, self.lookup)

    def decide(
        self,
        waiting: RelQueryQueue,
        running: list[SimSeq],
        ctx: ScheduleContext,
        predictors: LinearPredictors,
        remaining: dict[str, int] | None = None,
        decoding: dict[str, tuple[int, int, int]] | None = None,
    ) -> Decision:
        """Choose the batch kind; `running` must be sorted by priority (head = m+);
        `remaining` is OL(R) per running relQuery, or `decoding` the updater's per-relQuery
        (count, total, largest) remaining steps whose largest is OL(R) (computed from `running`
        when both are None).

        The candidate is formed lazily: its first request decides whether it is empty
        (`head_candidate`), and the whole candidate is formed only where Eq. 15-16 need it
        (the adaptive transitional case).
        """
        candidate = self.head_candidate(waiting, running, ctx)
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
        if remaining is None and decoding is not None:
            remaining = {rid: stats[2] for rid, stats in decoding.items()}
        return self._transitional(waiting, running, ctx, predictors, remaining, candidate)

    def _transitional(
        self,
        waiting: RelQueryQueue,
        running: list[SimSeq],
        ctx: ScheduleContext,
        predictors: LinearPredictors,
        remaining: dict[str, int] | None,
        head: PrefillCandidate,
    ) -> Decision:
        """The adaptive transitional case: run p iff Eq. 17's Delta < 0, forming p only as far
        as the sign needs.

        Delta grows with utok(p) and req(p) (alpha_p, alpha_d >= 0) while OL(p) is fixed, and
        OL(p) is the head request's remaining steps when no waiting request of its relQuery
        has more. p holds at most min(free sequence slots, waiting requests) requests and
        `max_num_batched_tokens` tokens, so if Delta of that largest p is < 0, p runs without
        being formed; and while p is formed request by request (`prefill_candidate`'s loop),
        once Delta of the part formed is > 0, d runs. Each bound must clear 0 by 1e-9 of the
        size of its terms, far above floating-point rounding, so the choice is always the one
        the whole candidate's Delta (computed as `delta` does, when no bound settles it)
        makes. A Decision settled by a bound carries the bounding candidate and its Delta."""
        if remaining is None:
            remaining = {}
            for s in running:
                rem = s.max_tokens - s.generated
                if rem > remaining.get(s.relquery_id, 0):
                    remaining[s.relquery_id] = rem
        rid = head.relquery_id
        group = waiting.waiting_of(rid)
        assert group is not None
        ol_p = head.output_limit
        _, toks, tok_sum, rems, _, rem_max = waiting.waiting_stats(rid)
        fixed = rem_max == ol_p
        slots = ctx.max_num_seqs - len(running)
        budget = ctx.max_num_batched_tokens
        rate_tok = rate_req = offset = scale = 0.0
        if fixed:
            n_max = min(slots, len(group))
            tok_max = min(budget, tok_sum)
            high = PrefillCandidate(rid, n_max, tok_max, ol_p)
            plus, minus = self._delta_terms(waiting, high, predictors, remaining)
            if plus + minus < -1e-9 * (plus - minus):
                return Decision("prefill", "transitional", high, plus + minus)
            # Delta of a part with u uncached tokens and k requests, to rounding (Eq. 15-16)
            r_plus = len(remaining)
            rate_tok = predictors.alpha_p * r_plus
            rate_req = predictors.alpha_d * sum(min(ol, ol_p) for ol in remaining.values())
            offset = predictors.beta_p * r_plus + minus
            scale = predictors.beta_p * r_plus - minus
        lookup = ctx.lookup if self.lookup is None else self.lookup.get
        pool = ctx.pool
        ref = pool.ref_count
        free = pool.num_free - ctx.watermark_blocks
        touched: set[int] = set()
        n = utok = 0
        limit = 0
        # `prefill_candidate`'s loop, with `fits` inlined; `toks` and `rems` are the requests'
        # tokens and remaining steps, in queue order
        for seq, tok, rem in zip(group, toks, rems, strict=True):
            if n >= slots:
                break
            computed = lookup(seq)
            num_new = tok - len(computed) * BLOCK_SIZE
            if num_new > budget:
                break
            need = -(-tok // BLOCK_SIZE) - len(computed)
            if need < 0:
                need = 0
            for b in computed:
                if b not in touched and ref(b) == 0:
                    need += 1
            if need > free:
                break
            touched.update(computed)
            free -= need
            budget -= num_new
            utok += num_new
            n += 1
            if rem > limit:
                limit = rem
            if fixed:
                grow = rate_tok * utok + rate_req * n
                if grow + offset > 1e-9 * (grow + scale):
                    low = PrefillCandidate(rid, n, utok, limit)
                    return Decision("decode", "transitional", low, grow + offset)
        candidate = PrefillCandidate(rid, n, utok, limit) if n else head
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
        plus, minus = AdaptiveBatchArranger._delta_terms(waiting, candidate, predictors, remaining)
        return plus + minus

    @staticmethod
    def _delta_terms(
        waiting: RelQueryQueue,
        candidate: PrefillCandidate,
        predictors: LinearPredictors,
        remaining: dict[str, int],
    ) -> tuple[float, float]:
        """Eq. 15's Delta+ (>= 0) and Eq. 16's Delta- (<= 0)."""
        ol_p = candidate.output_limit
        req_p = candidate.num_requests
        plus = predictors.prefill(candidate.uncached_tokens) * len(remaining)
        plus += sum(predictors.alpha_d * req_p * min(ol, ol_p) for ol in remaining.values())
        minus = -waiting.num_groups() * predictors.beta_d * min(ol_p, max(remaining.values()))
        return plus, minus
