"""RelServe's Dynamic Priority Updater (relserve.txt §4.2) for the simulated engine.

At the start of every iteration t, for every unfinished relQuery R_t in the engine (requests
that completed before t excluded):

    Prio(R_t) = Prio(R_{t-1})  if t > 1 and reuse(R_t, R_{t-1})        (Eq. 8)
              = PEM(R_t)       otherwise                               (Eq. 10, Algorithm 1)

- reuse (Eq. 12): every request of R_{t-1} and R_t is in the waiting queue, i.e. R had no
  running request at the previous update nor at this one (a request that finished did so from
  the running queue, so "no running request at t-1" also means none finished since);
- PEM runs Algorithm 1 over R_t's requests (running ones first, utok = 0, with their remaining
  output steps; then waiting ones in submission order) with utok*(r) = tok(r) x the relQuery's
  cache-miss ratio, sampled on `num_samples` of its waiting requests with the engine's real
  prefix-cache look-up (Eq. 11), from a seeded generator (runs are reproducible);
- tail rule (`tail_deadline_s`, not in the paper): a relQuery that has been in the engine
  `tail_deadline_s` seconds is promoted to priority 0 until it finishes, oldest first among
  the promoted (a latency deadline; the default of `relserve-v1` was chosen from the sweep in
  benchmarks/results/scheduler.md). Under shortest-remaining-first the largest relQueries of
  a busy period otherwise finish last, which makes the tail (relserve.txt Fig. 12);
- starvation (Eq. 13): unit_waiting(R) = waiting(R) / req(R_0), waiting(R) being the time from
  arrival to R's first prefill (`relquery.RelQueryTiming`). A relQuery not yet started (no
  request admitted) whose unit waiting would exceed `starvation_threshold_s` within the next
  `starvation_lookahead_iterations` worst-case iterations (`max_iteration_s`) is *due*: priority
  0, ordered among the due by deadline arrival + threshold x req(R_0) (earliest first), and
  RelServe starts every due relQuery in the next batch (`RelServePolicy`, one request each,
  evicting lower-priority running requests if KV blocks or slots are short). Once started its
  waiting time is fixed and it returns to its PEM priority. Bound: with a lookahead >= 1, a
  relQuery seen due at iteration start t_k was not due at t_{k-1} (so t_k <= t_{k-1} + I <=
  deadline - I) or arrived after t_{k-1} (so t_k <= arrival + I), I being `max_iteration_s`;
  hence waiting(R) <= max(threshold x req(R_0), I) whenever the due relQueries' first prompts
  fit one batch (tests/resources/sim/test_starvation.py checks it on random traces). An
  iteration is not interruptible, so no policy can do better than I for a relQuery that
  arrives as a full prefill batch starts.

Overhead (bookkeeping only; every value is the one a plain recomputation gives, bit for bit,
pinned by tests/resources/sim/test_relserve_overhead.py): the per-relQuery decoding stats are
predicted from the batch just formed (`after_batch`) instead of recounted over the running
queue; a relQuery's waiting tok/remaining lists and their sums are kept by the queue until
its waiting requests change (`RelQueryQueue.waiting_stats`, shared with the arranger); PEM
of waiting requests that fit one decode group packs the prefill batches with C-level running
sums (`pem.pem_queued`); the sampled look-ups of Eq. 11 go through `priority.CachedLookup`
(validated by the pool's index version), shared with the arranger.

Invariants: every relQuery present in the waiting queue has a priority in
`queue.priority`; priorities are seconds (>= 0); a relQuery leaves the updater's state once
all its requests have finished.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, sub

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.pem import FittedPredictors, LinearPredictors, pem_queued
from resources.sim.policies.base import Batch, ScheduleContext, SimSeq
from resources.sim.policies.priority import CachedLookup, RelQueryQueue

__all__ = ["DynamicPriorityUpdater", "UpdaterConfig", "max_iteration_s"]

_relquery_id = attrgetter("relquery_id")
_max_tokens = attrgetter("max_tokens")
_generated = attrgetter("generated")


@dataclass(frozen=True)
class UpdaterConfig:
    """Settings of the Dynamic Priority Updater."""

    num_samples: int = 4
    """|R_t^s| of Eq. 11: waiting requests per relQuery looked up in the prefix cache."""
    enable_reuse: bool = True
    """Reuse Prio(R_{t-1}) for relQueries untouched since the last iteration (Eq. 12)."""
    starvation_threshold_s: float | None = None
    """Eq. 13's threshold on unit waiting time, seconds per request; None disables it."""
    starvation_lookahead_iterations: float = 2.0
    """How many worst-case iterations ahead the starvation check looks (see the module)."""
    tail_deadline_s: float | None = None
    """Latency a relQuery should not exceed (see the module); None: no tail rule (the paper)."""
    seed: int = 0
    """Seed of the cache-miss sampler."""

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.starvation_threshold_s is not None and self.starvation_threshold_s < 0:
            raise ValueError(
                f"starvation_threshold_s must be >= 0 or None, got {self.starvation_threshold_s}"
            )
        if self.starvation_lookahead_iterations < 1:
            raise ValueError(
                "starvation_lookahead_iterations must be >= 1 (the bound needs one iteration "
                f"ahead), got {self.starvation_lookahead_iterations}"
            )
        if self.tail_deadline_s is not None and self.tail_deadline_s <= 0:
            raise ValueError(f"tail_deadline_s must be > 0 or None, got {self.tail_deadline_s}")


def max_iteration_s(ctx: ScheduleContext) -> float:
    """An upper bound on one iteration's seconds under `ctx`'s limits and cost model: a full
    prefill batch of one prompt (quadratic attention over a context as long again), or a
    decode batch of `max_num_seqs` requests reading the whole KV cache."""
    coef = ctx.coefficients
    if coef is None:
        return 0.0
    c = ctx.max_num_batched_tokens
    prefill = coef.batch_time(c, 3 * c * c, 0, 1)
    decode = coef.batch_time(ctx.max_num_seqs, 0, ctx.pool.num_blocks * BLOCK_SIZE, 0)
    return max(prefill, decode)


class DynamicPriorityUpdater:
    """Eq. 8-13 (see the module docstring). `start_run()` before each simulated run."""

    def __init__(self, config: UpdaterConfig | None = None) -> None:
        self.config = config or UpdaterConfig()
        self.predictors = FittedPredictors("relserve")
        """Eq. 9 fitted to the engine's cost model: `self.predictors(ctx)`."""
        self.lookup = CachedLookup()
        """Prefix-cache look-ups, remembered while the cache index is unchanged (shared with
        the arranger by `RelServePolicy`)."""
        self.verify = False
        """Check every predicted `decoding` against a full recount (tests)."""
        self.start_run()

    def start_run(self) -> None:
        """Forget every relQuery and reset the sampler and the counters."""
        self._live: dict[str, None] = {}
        """Unfinished relQueries, in arrival order."""
        self._prev_running: set[str] = set()
        self._starving: dict[str, float] = {}
        """Due relQueries not yet started (priority 0) and their deadlines."""
        self._urgent: set[str] = set()
        """RelQueries promoted by the tail rule: priority 0 until they finish."""
        self._rng = random.Random(self.config.seed)
        self.lookup.reset()
        self.num_pem = 0
        """PEM evaluations this run."""
        self.num_reused = 0
        """Priorities reused (Eq. 12) this run."""
        self.num_starving = 0
        """Updates at which some relQuery was set to priority 0 (Eq. 13)."""
        self.seconds = 0.0
        """Wall seconds spent in `update` this run."""
        self.decoding: dict[str, tuple[int, int, int]] = {}
        """Per running relQuery at the latest update: (running requests, total and largest
        remaining output steps)."""
        self._predicted: dict[str, tuple[int, int, int]] | None = None
        self._tops: dict[str, int] = {}
        """Per running relQuery: how many of its running requests have its largest remaining
        steps (kept with `decoding`, so that a finished request's share can be removed)."""
        self._batch: Batch = []
        """`decoding` as the next update will find it (`after_batch`), if no request finishes."""
        self._end_len = 0
        self._mark_len = 0
        self._mark_preemptions = 0

    def update(self, waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext) -> None:
        """Set `waiting.priority` of every live relQuery for this iteration.

        Only relQueries that arrived, run now or ran at the previous update are visited for
        PEM; the others reuse their priority (Eq. 12) without being touched.
        """
        t0 = time.perf_counter()
        cfg = self.config
        live = self._live
        new = waiting.new_relqueries
        for rid in new:
            live[rid] = None
        predicted = self._predicted
        self._predicted = None
        decoding = None
        if predicted is not None:
            if len(running) == self._end_len:
                decoding = predicted  # no request finished since `after_batch` predicted it
            else:
                decoding = self._drop_finished(predicted, running)
            if decoding is not None and self.verify:
                full = _decoding_stats(running)
                assert decoding == full, (decoding, full)
                assert list(decoding) == list(full), (list(decoding), list(full))
                assert self._tops == _decoding_stats_tops(running)[1]
        if decoding is None:
            decoding, self._tops = _decoding_stats_tops(running)
        self._mark_preemptions = ctx.num_preemptions
        self._mark_len = len(running)
        self.lookup.sync(ctx)
        starving = self._starving
        for rid in [r for r in starving if _started(waiting, r)]:
            del starving[rid]  # waiting time fixed: back to PEM (it runs, so it is visited)
            waiting.set_tiebreak(rid, waiting.arrival[rid])
        if cfg.enable_reuse:
            visit = self._prev_running.union(decoding, new)
        else:
            visit = set(live)
        new.clear()
        pred = self.predictors(ctx)
        cap = (ctx.pool.num_blocks - ctx.watermark_blocks) * BLOCK_SIZE
        alpha_d, beta_d = pred.alpha_d, pred.beta_d
        visited = 0
        for rid in sorted(visit):  # sorted: the sampler draws in a reproducible order
            if rid not in live:
                continue
            queued = waiting.waiting_of(rid)
            stats = decoding.get(rid)
            if rid in starving or rid in self._urgent:
                value = 0.0
            elif queued:
                value = self._pem(waiting, rid, queued, stats or (0, 0, 0), pred, cap, ctx)
            elif stats:  # all running (<= max_num_seqs): one decode group (Algorithm 1)
                value = alpha_d * stats[1] + beta_d * stats[2]
            else:  # every request finished
                del live[rid]
                waiting.forget_stats(rid)
                self._urgent.discard(rid)
                continue
            visited += 1
            waiting.set_priority(rid, value)
        self.num_pem += visited
        self.num_reused += len(live) - visited
        self._prev_running = set(decoding)
        self.decoding = decoding
        if cfg.tail_deadline_s is not None:
            self._check_tail(waiting, ctx, cfg.tail_deadline_s)
        threshold = cfg.starvation_threshold_s
        if threshold is not None:
            self._check_starvation(waiting, ctx, threshold)
        self.seconds += time.perf_counter() - t0

    def after_batch(
        self,
        kind: str,
        batch: Batch,
        running: list[SimSeq],
        ctx: ScheduleContext,
        resorted: bool,
    ) -> None:
        """Bookkeeping after the policy formed this iteration's batch: predict the next
        update's per-relQuery decoding stats from this one's, so that `update` need not walk
        the running queue again (it does when no prediction could be made, or when requests
        finished in a way `_drop_finished` cannot account for). `kind` is "prefill" or
        "decode"; `resorted` whether `priority.sort_running` changed the running queue's order
        after `update` (the prediction is then re-keyed in the new order).

        Exact: a decode batch holds every running request (`priority.decode_step` without a
        preemption), each of which generates one token, so each relQuery's remaining steps
        drop by its running count and its largest by one; a (whole-prompt) prefill batch adds
        its requests, each with one token generated. No prediction after a preemption or with
        the "keep-long" order (the engine re-sorts `running`). The order of the stats is the
        order of first appearance in the running queue, as `_decoding_stats` gives it (the
        order of Eq. 15's sum)."""
        t0 = time.perf_counter()
        self._predicted = None
        self._end_len = len(running)
        if ctx.num_preemptions != self._mark_preemptions or ctx.preemption_order != "recent":
            self.seconds += time.perf_counter() - t0
            return
        current = self.decoding
        self._batch = batch
        if kind == "decode":
            if len(running) == self._mark_len and len(batch) == len(running):
                self._predicted = {
                    rid: (n, total - n, top - 1) for rid, (n, total, top) in current.items()
                }
        elif len(running) == self._mark_len + len(batch):
            predicted = dict(current)
            tops = self._tops
            for seq, _ in batch:
                rid = seq.relquery_id
                rem = seq.max_tokens - seq.generated - 1
                prev = predicted.get(rid)
                if prev is None:
                    predicted[rid] = (1, rem, rem)
                    tops[rid] = 1
                else:
                    n, total, top = prev
                    if rem > top:
                        top = rem
                        tops[rid] = 1
                    elif rem == top:
                        tops[rid] += 1
                    predicted[rid] = (n + 1, total + rem, top)
            self._predicted = predicted
        if resorted and self._predicted is not None:  # first appearance in `running`, now
            predicted = self._predicted
            self._predicted = {
                rid: predicted[rid] for rid in dict.fromkeys(map(_relquery_id, running))
            }
        self.seconds += time.perf_counter() - t0

    def _drop_finished(
        self, predicted: dict[str, tuple[int, int, int]], running: list[SimSeq]
    ) -> dict[str, tuple[int, int, int]] | None:
        """`predicted` less the requests of the last batch that finished, or None when that
        cannot be told without recounting (a relQuery lost every request holding its largest
        remaining steps, or the running queue's relQueries are not in the predicted order)."""
        finished = [seq for seq, _ in self._batch if seq.finish_s >= 0.0]
        if len(running) + len(finished) != self._end_len:
            return None
        out = dict(predicted)
        tops = self._tops
        for seq in finished:
            rid = seq.relquery_id
            rem = seq.max_tokens - seq.generated
            n, total, top = out[rid]
            if n == 1:
                del out[rid]
                del tops[rid]
                continue
            if rem == top:
                if tops[rid] == 1:
                    return None
                tops[rid] -= 1
            out[rid] = (n - 1, total - rem, top)
        runs = [rid for rid, _ in groupby(map(_relquery_id, running))]
        if runs != list(out):
            return None
        return out

    def _check_starvation(self, waiting: RelQueryQueue, ctx: ScheduleContext, threshold: float):
        """Eq. 13 (see the module docstring)."""
        cfg = self.config
        horizon = ctx.now + cfg.starvation_lookahead_iterations * max_iteration_s(ctx)
        starving = False
        for rid in self._live:
            if rid in self._starving or not waiting.waiting_of(rid) or _started(waiting, rid):
                continue
            n0 = ctx.relquery_sizes.get(rid) or len(waiting.members[rid])
            arrival = waiting.arrival[rid]
            if (horizon - arrival) / n0 > threshold:  # Eq. 13
                deadline = arrival + threshold * n0
                waiting.set_priority(rid, 0.0)
                waiting.set_tiebreak(rid, deadline)  # earliest deadline first
                self._starving[rid] = deadline
                starving = True
        self.num_starving += starving

    def _check_tail(self, waiting: RelQueryQueue, ctx: ScheduleContext, deadline: float):
        """The tail rule (see the module docstring)."""
        urgent, arrival = self._urgent, waiting.arrival
        for rid in self._live:
            if rid not in urgent and ctx.now - arrival[rid] >= deadline:
                urgent.add(rid)
                waiting.set_priority(rid, 0.0)
                waiting.set_tiebreak(rid, arrival[rid])  # among the promoted: oldest first

    def due(self) -> list[str]:
        """The due relQueries (not started, priority 0), earliest deadline first."""
        return sorted(self._starving, key=self._starving.__getitem__)

    def _pem(
        self,
        waiting: RelQueryQueue,
        rid: str,
        queued,
        decoding: tuple[int, int, int],
        pred: LinearPredictors,
        cap: float,
        ctx: ScheduleContext,
    ) -> float:
        """PEM(R_t) in seconds: `decoding` is (count, total, largest) of the remaining output
        steps of R's running requests, `queued` its waiting requests (in queue order), whose
        tokens and steps the queue keeps (`RelQueryQueue.waiting_stats`)."""
        mns, mnbt = ctx.max_num_seqs, ctx.max_num_batched_tokens
        _, toks, tok_sum, rems, rem_sum, rem_max = waiting.waiting_stats(rid)
        k = self.config.num_samples
        n = len(toks)
        lookup = self.lookup.get  # synced at the start of `update`
        tok = utok = 0
        if n <= k:
            for s, t in zip(queued, toks, strict=True):
                tok += t
                utok += t - len(lookup(s)) * BLOCK_SIZE
        else:  # k requests drawn uniformly (with replacement: cheaper, same expectation)
            draw = self._rng.random
            for _ in range(k):
                i = int(draw() * n)
                t = toks[i]
                tok += t
                utok += t - len(lookup(queued[i])) * BLOCK_SIZE
        ratio = utok / tok if tok else 1.0  # Eq. 11
        return pem_queued(
            *decoding, toks, tok_sum, rems, rem_sum, rem_max, ratio, pred, cap, mns, mnbt
        )


def _started(waiting: RelQueryQueue, rid: str) -> bool:
    """Whether relQuery `rid` has started (a request admitted once). Admitted requests leave
    its waiting group, and a preempted one returns to the group's front with its prefill
    start kept, so looking at the group's size and front is enough."""
    group = waiting.waiting_of(rid)
    return group is None or len(group) < len(waiting.members[rid]) or group[0].prefill_start_s >= 0


def _decoding_stats(running: list[SimSeq]) -> dict[str, tuple[int, int, int]]:
    """Per relQuery: (running requests, their total and largest remaining output steps)."""
    return _decoding_stats_tops(running)[0]


def _decoding_stats_tops(
    running: list[SimSeq],
) -> tuple[dict[str, tuple[int, int, int]], dict[str, int]]:
    """`_decoding_stats`, and per relQuery how many of its running requests have the largest
    remaining steps. Runs of one relQuery are contiguous in a sorted running queue, so this is
    a few C-level passes per relQuery rather than a Python loop per request."""
    out: dict[str, tuple[int, int, int]] = {}
    tops: dict[str, int] = {}
    for rid, group in groupby(running, _relquery_id):
        seqs = list(group)
        rems = list(map(sub, map(_max_tokens, seqs), map(_generated, seqs)))
        n, total, top = len(rems), sum(rems), max(rems)
        count = rems.count(top)
        prev = out.get(rid)
        if prev is not None:
            if prev[2] > top:
                top, count = prev[2], tops[rid]
            elif prev[2] == top:
                count += tops[rid]
            n, total = n + prev[0], total + prev[1]
        out[rid] = (n, total, top)
        tops[rid] = count
    return out, tops
