"""vLLM's priority scheduling (v0, `scheduling_policy="priority"`) as shared parts for the
relQuery priority policies (`static_priority`, `relserve`).

- `RelQueryQueue`: the waiting queue, grouped by relQuery and ordered by (priority, arrival,
  first submission index) of the relQuery, requests of one relQuery in submission order (a
  preempted request goes back to the front of its relQuery). All requests of a relQuery share
  its priority (relserve.txt Eq. 7), so this is vLLM's order of the waiting queue by
  (priority, arrival_time), kept per relQuery so that re-prioritising costs O(relQueries), not
  O(requests). `append`/`extend` are arrivals (the engine), `appendleft` a preemption.
- `sort_running`: the running queue in the same order, (priority, tiebreak), the tiebreak being
  the arrival unless a policy sets it (stable, so that within a relQuery the
  order the engine left, e.g. "keep-long", is kept); `running.pop()` is then the victim of
  lowest priority, as in vLLM.
- `prefill_step` / `decode_step`: vLLM v0's two batch kinds (whole prompts only, no chunking;
  the 1% watermark on admission; a decode that finds no free block preempts from the tail of
  `running` by recompute).
- `priority_preemption`: vLLM's `_schedule_priority_preemption`: while the head of the waiting
  queue cannot be admitted and the lowest-priority running request has a strictly larger
  (priority, tiebreak), that request is preempted.
- `fits`: a dry run of one admission's block check, without changing the pool.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterator
from itertools import groupby
from operator import attrgetter, sub

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.policies.base import Batch, ScheduleContext, SimSeq, WaitingQueue

__all__ = [
    "CachedLookup",
    "RelQueryQueue",
    "decode_step",
    "fits",
    "prefill_step",
    "priority_preemption",
    "sort_running",
]


_relquery_id = attrgetter("relquery_id")
_num_tokens = attrgetter("num_tokens")
_max_tokens = attrgetter("max_tokens")
_generated = attrgetter("generated")


class RelQueryQueue(WaitingQueue):
    """The waiting queue of a priority policy (see the module docstring).

    Invariants: `len` is the number of waiting requests; every group is non-empty; the group
    order is by `(priority[rid], tiebreak[rid], first_index[rid])` after `reorder()`, which the
    policy calls after changing priorities (and which `append` of a new relQuery triggers).
    """

    def __init__(self) -> None:
        self._groups: dict[str, deque[SimSeq]] = {}
        self._order: list[str] = []
        self._dirty = False
        self._len = 0
        self.priority: dict[str, float] = {}
        """Current priority value of every relQuery seen in this run (lower runs first)."""
        self.arrival: dict[str, float] = {}
        self.tiebreak: dict[str, float] = {}
        """Second key of the order among equal priorities (the arrival unless a policy sets
        another, e.g. the starvation deadline)."""
        self.first_index: dict[str, int] = {}
        self.members: dict[str, list[SimSeq]] = {}
        """Every request of every relQuery that arrived, in submission order."""
        self.new_relqueries: list[str] = []
        """RelQueries that arrived since the policy last cleared this list."""
        self.stamp: dict[str, int] = {}
        """Per relQuery, a counter bumped whenever its waiting requests change (arrival,
        admission, preemption): equal stamps mean the same waiting requests, so a policy may
        reuse what it derived from them."""
        self._stats: dict[str, tuple[int, list[int], int, list[int], int, int]] = {}
        """Per relQuery: `waiting_stats` and the stamp it was taken at."""

    # -- deque interface -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[SimSeq]:
        self._ensure_order()
        for rid in self._order:
            yield from self._groups[rid]

    def __getitem__(self, i: int) -> SimSeq:
        if i != 0:
            raise IndexError("RelQueryQueue supports only [0] (the head)")
        self._ensure_order()
        return self._groups[self._order[0]][0]

    def append(self, seq: SimSeq) -> None:
        """An arrival: joins the back of its relQuery."""
        rid = seq.relquery_id
        members = self.members.get(rid)
        if members is None:
            self.members[rid] = members = []
            self.arrival[rid] = seq.arrival_s
            self.tiebreak[rid] = seq.arrival_s
            self.first_index[rid] = seq.index
            self.priority.setdefault(rid, 0.0)
            self.new_relqueries.append(rid)
        members.append(seq)
        self._group(rid).append(seq)
        self._len += 1
        self.stamp[rid] = self.stamp.get(rid, 0) + 1

    def extend(self, seqs) -> None:
        for seq in seqs:
            self.append(seq)

    def appendleft(self, seq: SimSeq) -> None:
        """A preempted request: back to the front of its relQuery."""
        rid = seq.relquery_id
        self._group(rid).appendleft(seq)
        self._len += 1
        self.stamp[rid] = self.stamp.get(rid, 0) + 1

    def popleft(self) -> SimSeq:
        self._ensure_order()
        rid = self._order[0]
        group = self._groups[rid]
        seq = group.popleft()
        self._len -= 1
        self.stamp[rid] = self.stamp.get(rid, 0) + 1
        if not group:
            del self._groups[rid]
            self._order.pop(0)
        return seq

    def pop_first(self, rid: str) -> SimSeq:
        """`popleft` of relQuery `rid`'s requests, wherever it stands in the order."""
        group = self._groups[rid]
        seq = group.popleft()
        self._len -= 1
        self.stamp[rid] = self.stamp.get(rid, 0) + 1
        if not group:
            del self._groups[rid]
            self._order.remove(rid)
        return seq

    # -- priority interface ----------------------------------------------------------------------
    def set_priority(self, rid: str, value: float) -> None:
        if self.priority.get(rid) != value:
            self.priority[rid] = value
            if rid in self._groups:
                self._dirty = True

    def set_tiebreak(self, rid: str, value: float) -> None:
        if self.tiebreak.get(rid) != value:
            self.tiebreak[rid] = value
            if rid in self._groups:
                self._dirty = True

    def key(self, rid: str) -> tuple[float, float, int]:
        return (self.priority[rid], self.tiebreak[rid], self.first_index[rid])

    def reorder(self) -> None:
        self._ensure_order()

    def groups(self) -> list[tuple[str, deque[SimSeq]]]:
        """Waiting relQueries in priority order, each with its waiting requests."""
        self._ensure_order()
        return [(rid, self._groups[rid]) for rid in self._order]

    def waiting_of(self, rid: str) -> deque[SimSeq] | None:
        """The waiting requests of relQuery `rid` (None if it has none)."""
        return self._groups.get(rid)

    def waiting_stats(self, rid: str) -> tuple[int, list[int], int, list[int], int, int]:
        """(stamp, tokens, their sum, remaining output steps, their sum, their largest) of the
        waiting requests of relQuery `rid` (which must have some), in queue order. Kept until
        their stamp changes (a waiting request's tokens and steps change only while it runs,
        and it leaves and re-enters the queue around that), so the updater and the arranger
        share one computation per change."""
        stamp = self.stamp[rid]
        kept = self._stats.get(rid)
        if kept is None or kept[0] != stamp:
            group = self._groups[rid]
            toks = list(map(_num_tokens, group))
            rems = list(map(sub, map(_max_tokens, group), map(_generated, group)))
            kept = (stamp, toks, sum(toks), rems, sum(rems), max(rems))
            self._stats[rid] = kept
        return kept

    def forget_stats(self, rid: str) -> None:
        """Drop what `waiting_stats` kept for `rid` (a finished relQuery)."""
        self._stats.pop(rid, None)

    def head_relquery(self) -> tuple[str, deque[SimSeq]]:
        """The first waiting relQuery and its waiting requests (the queue must be non-empty)."""
        self._ensure_order()
        rid = self._order[0]
        return rid, self._groups[rid]

    def num_groups(self) -> int:
        return len(self._groups)

    def _group(self, rid: str) -> deque[SimSeq]:
        group = self._groups.get(rid)
        if group is None:
            self._groups[rid] = group = deque()
            self._order.append(rid)
            self._dirty = True
        return group

    def _ensure_order(self) -> None:
        if self._dirty:
            self._order.sort(key=self.key)
            self._dirty = False


class CachedLookup:
    """`ctx.lookup(seq)` remembered for as long as it provably gives the same blocks.

    A look-up depends only on the prefix-cache index (hash -> block) and on the sequence's
    hashes and tokens; `BlockPool.index_version` grows with every change of the index, so a
    remembered look-up of the same `num_tokens` at the same version is exact. Otherwise the
    walk of `BlockPool.lookup` is done here over `BlockPool.index_getter()` (the index's C-level
    `get`), without the calls through `ctx.lookup`. The lists returned are shared: callers only
    read them. `reset()` at the start of a run; `sync(ctx)` whenever the pool may have
    changed, then `get(seq)`."""

    __slots__ = ("_block_of", "_memo", "_pool", "_version")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._pool: object = None
        self._version = -1
        self._block_of = None
        self._memo: dict[SimSeq, tuple[int, int, list[int]]] = {}
        """seq -> (its num_tokens, the index version, the blocks found then)."""

    def sync(self, ctx: ScheduleContext) -> None:
        """Take note of the pool's state; `get` answers for that state."""
        pool = ctx.pool
        if pool is not self._pool:
            self._pool = pool
            self._memo = {}
        self._version = pool.index_version
        self._block_of = pool.index_getter() if pool.enable_prefix_caching else None

    def get(self, seq: SimSeq) -> list[int]:
        """`ctx.lookup(seq)` for the pool as of the latest `sync`."""
        num_tokens = seq.num_tokens
        hit = self._memo.get(seq)
        if hit is not None and hit[1] == self._version and hit[0] == num_tokens:
            return hit[2]
        block_of = self._block_of
        blocks: list[int] = []
        if block_of is not None:  # `BlockPool.lookup`'s walk
            hashes = seq.hashes
            limit = (num_tokens - 1) // BLOCK_SIZE
            for h in hashes if limit >= len(hashes) else hashes[:limit]:
                block = block_of(h)
                if block is None:
                    break
                blocks.append(block)
        self._memo[seq] = (num_tokens, self._version, blocks)
        return blocks

    def __call__(self, ctx: ScheduleContext, seq: SimSeq) -> list[int]:
        """`sync(ctx)` then `get(seq)`."""
        self.sync(ctx)
        return self.get(seq)


def sort_running(running: list[SimSeq], queue: RelQueryQueue) -> bool:
    """Order `running` by its relQueries' (priority, tiebreak) (stable sort), the waiting
    queue's order; the tiebreak is the arrival unless a policy set it. The check runs
    over the runs of equal relQuery in `running` (few), so a sorted queue costs one C-level
    pass. True if `running` was re-sorted (its relQueries may have changed order)."""
    if len(running) > 1:
        prio, tiebreak = queue.priority, queue.tiebreak
        runs = [rid for rid, _ in groupby(map(_relquery_id, running))]
        if len(runs) == 1:
            return False
        keys = [(prio[rid], tiebreak[rid]) for rid in runs]
        if not all(map(operator.le, keys, keys[1:])):
            key = dict(zip(runs, keys, strict=True))
            running.sort(key=lambda s: key[s.relquery_id])
            return True
    return False


def fits(
    ctx: ScheduleContext,
    seq: SimSeq,
    free_blocks: int,
    touched: set[int],
    computed: list[int] | None = None,
) -> int:
    """Blocks admitting waiting `seq` (whole prompt) would take out of `free_blocks`, or -1 if
    it does not fit; `touched` are cached blocks already counted by earlier dry runs;
    `computed` is `ctx.lookup(seq)` when the caller has it."""
    if computed is None:
        computed = ctx.lookup(seq)
    required = -(-seq.num_tokens // BLOCK_SIZE)
    num_new = required - len(computed)
    ref = ctx.pool.ref_count
    evictable = 0
    for b in computed:
        if b not in touched and ref(b) == 0:
            evictable += 1
    need = max(num_new, 0) + evictable
    if need > free_blocks:
        return -1
    touched.update(computed)
    return need


def prefill_step(
    waiting: RelQueryQueue,
    running: list[SimSeq],
    ctx: ScheduleContext,
    limit: int | None = None,
    relquery_id: str | None = None,
) -> Batch:
    """vLLM v0's prefill batch: admit waiting requests from the head while the whole uncached
    prompt fits the token budget, a sequence slot is free and the KV pool keeps its watermark.

    `limit` caps the number admitted; `relquery_id` stops at the first request of another
    relQuery (RelServe's one-relQuery candidate).
    """
    budget = ctx.max_num_batched_tokens
    batch: Batch = []
    while waiting and len(running) < ctx.max_num_seqs:
        if limit is not None and len(batch) >= limit:
            break
        seq = waiting[0]
        if relquery_id is not None and seq.relquery_id != relquery_id:
            break
        computed = ctx.lookup(seq)
        num_new = seq.num_tokens - len(computed) * BLOCK_SIZE
        if num_new > budget:
            break
        if not ctx.allocate(seq, num_new, computed, use_watermark=True):
            break
        waiting.popleft()
        running.append(seq)
        seq.record_first_hit()
        batch.append((seq, num_new))
        budget -= num_new
    return batch


def decode_step(waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext) -> Batch:
    """vLLM v0's decode batch: every running request decodes one token; a request that needs
    a block when none is free preempts the tail of `running` (itself, if it is the tail)."""
    batch: Batch = []
    i = 0
    while i < len(running):
        seq = running[i]
        while not ctx.allocate(seq, 1):
            victim = running.pop()
            ctx.preempt(victim)
            waiting.appendleft(victim)
            if victim is seq:
                return batch
        batch.append((seq, 1))
        i += 1
    return batch


def priority_preemption(waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext) -> int:
    """vLLM's priority preemption (see the module docstring); returns the requests preempted.
    `running` must be sorted (`sort_running`)."""
    if not waiting or not running:
        return 0
    head = waiting[0]
    prio, tiebreak = waiting.priority, waiting.tiebreak
    head_key = (prio[head.relquery_id], tiebreak[head.relquery_id])
    count = 0
    while running:
        tail = running[-1]
        if (prio[tail.relquery_id], tiebreak[tail.relquery_id]) <= head_key:
            break
        free = ctx.pool.num_free - ctx.watermark_blocks
        computed_tokens = len(ctx.lookup(head)) * BLOCK_SIZE
        if (
            head.num_tokens - computed_tokens <= ctx.max_num_batched_tokens
            and len(running) < ctx.max_num_seqs
            and fits(ctx, head, free, set()) >= 0
        ):
            break
        running.pop()
        ctx.preempt(tail)
        waiting.appendleft(tail)
        count += 1
    return count
