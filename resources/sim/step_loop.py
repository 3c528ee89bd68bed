"""The simulated engine's iteration loop (`SimulatedEngine`'s semantics, see its module).

Each iteration: requests that have arrived join the waiting queue (with asynchronous
scheduling, only those that arrived before the previous step was launched), the policy forms a
batch, the cost model prices it (its tokens padded to a CUDA-graph size when the profile has
them), the clock advances, scheduled sequences advance and finished ones free their blocks. With
a `ClosedLoopClient`, arrivals come from the client, which sees every output token.
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from resources.sim.cost_model import CostCoefficients, padded_tokens
from resources.sim.policies import Policy, ScheduleContext, SimSeq
from resources.sim.policies.base import WaitingQueue

__all__ = ["ClosedLoopClient", "LoopSetup", "iterate"]

Progress = Callable[[int, int], None]
_computed = attrgetter("num_computed")


def paused_gc(fn: Callable) -> Callable:
    """`fn` with CPython's cyclic garbage collector paused while it runs (restored after,
    unless it was already off). A simulation allocates millions of small objects that live
    until it returns (sequences, block-hash lists, responses), none in a reference cycle:
    the collector rescans them again and again, freeing nothing (3.0 s of a 17.1 s run of
    173k requests). Reference counting still frees everything else; results are unchanged."""

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


class ClosedLoopClient(Protocol):
    """The client side of `SimulatedEngine.run_closed_loop` (e.g. `benchmarks.lib.sweep`'s
    model of a benchmark client): it sends requests and reads their tokens."""

    def advance(self, until: float, stop_at_send: bool = False) -> list[tuple[int, float]]:
        """Run the client up to simulated second `until` (`math.inf`: until it can do nothing
        more without new tokens), or only until it sends a request with `stop_at_send` (the
        engine is idle then: it asks for the next arrival without running ahead of the tokens it
        will produce); return (request index, arrival second at the engine) for each request
        sent meanwhile. The engine calls it with non-decreasing `until`s."""
        ...

    def token(self, index: int, count: int, t: float) -> None:
        """Request `index` produced its `count`-th output token at second `t`."""
        ...


@dataclass(frozen=True)
class LoopSetup:
    """What the loop takes from the engine."""

    coefficients: CostCoefficients
    policy: Policy
    enable_prefix_caching: bool
    graph_sizes: tuple[int, ...]
    """CUDA-graph capture sizes (empty: no CUDA graphs)."""
    async_scheduling: bool


def iterate(
    pending: deque[SimSeq],
    waiting: WaitingQueue,
    running: list[SimSeq],
    ctx: ScheduleContext,
    setup: LoopSetup,
    total: int,
    progress: Progress | None,
    client: ClosedLoopClient | None = None,
    unsent: dict[int, SimSeq] | None = None,
) -> tuple[float, int, float]:
    """The iteration loop over `pending` (sorted by arrival); returns the simulated makespan in
    seconds, the iterations and the wall seconds spent in the policy. With `client`, the
    requests in `unsent` join `pending` as the client sends them."""
    coef = setup.coefficients
    a, b, d, e, f = coef.a, coef.b, coef.d, coef.e, coef.f
    pool = ctx.pool
    schedule = setup.policy.schedule
    register_late = setup.enable_prefix_caching and not ctx.enable_register_on_allocate
    keep_long = ctx.preemption_order == "keep-long"
    perf = time.perf_counter
    graph_sizes = setup.graph_sizes
    async_scheduling = setup.async_scheduling
    now = 0.0
    step_start: float | None = None
    """Start of the step that just ran, None when the engine was idle before `now`."""
    iterations = 0
    done = 0
    scheduler_s = 0.0
    report_every = max(1, total // 100)
    next_report = report_every
    unsent = unsent if unsent is not None else {}

    def release(sent: list[tuple[int, float]]) -> None:
        for index, arrival in sent:
            seq = unsent.pop(index)
            seq.arrival_s = arrival
            pending.append(seq)
        ordered = sorted(pending, key=attrgetter("arrival_s"))
        pending.clear()
        pending.extend(ordered)

    while waiting or running or pending or unsent:
        if client is not None:
            sent = client.advance(now)
            if sent:
                release(sent)
        # A synchronous engine forms this step's batch now; an asynchronous one formed it
        # when the previous step was launched, so later arrivals wait one more step.
        horizon = step_start if async_scheduling and step_start is not None else now
        if pending and pending[0].arrival_s <= horizon:
            while pending and pending[0].arrival_s <= horizon:
                waiting.append(pending.popleft())
        if not waiting and not running:
            if step_start is None:
                if client is not None:
                    # Idle: the client runs on alone until it sends something.
                    target = pending[0].arrival_s if pending else math.inf
                    release(client.advance(target, stop_at_send=True))
                    if not pending:
                        raise RuntimeError(
                            f"closed loop: the client sent none of {len(unsent)} requests "
                            "while the engine was idle"
                        )
                now = max(now, pending[0].arrival_s)  # idle until the next arrival
            step_start = None
            continue
        ctx.now = now
        if keep_long and len(running) > 1:
            running.sort(key=_computed, reverse=True)
        t0 = perf()
        batch = schedule(waiting, running, ctx)
        scheduler_s += perf() - t0
        iterations += 1
        if not batch:
            raise RuntimeError(
                f"scheduler {setup.policy.name!r} formed an empty batch with "
                f"{len(waiting)} waiting and {len(running)} running requests"
            )
        tokens = 0
        attn = 0
        kv = 0
        prefills: list[SimSeq] = []
        for seq, n in batch:
            m = seq.num_computed
            if seq.generated == 0 or m < seq.num_tokens - 1:
                tokens += n
                attn += n * n + 2 * m * n
                prefills.append(seq)
                if seq.prefill_start_s < 0:
                    seq.prefill_start_s = now
            else:
                tokens += 1
                kv += m
        if graph_sizes:
            tokens = padded_tokens(tokens, graph_sizes)
        step_start = now
        now += a * tokens + b * attn + d * kv + e * len(prefills) + f
        for seq in prefills:
            seq.prefill_end_s = now
        finished = False
        for seq, n in batch:
            seq.num_computed += n
            if register_late:
                ctx.register(seq, seq.num_computed)
            if seq.num_computed == seq.num_tokens:
                seq.generated += 1
                if client is not None:
                    client.token(seq.index, seq.generated, now)
                if seq.generated == 1 and seq.first_token_s < 0:
                    seq.first_token_s = now
                if seq.generated >= seq.num_output:
                    seq.finish_s = now
                    pool.free(seq.blocks)
                    seq.blocks = []
                    finished = True
                    done += 1
                else:
                    seq.num_tokens += 1
        if finished:
            running[:] = [s for s in running if s.finish_s < 0]
            if progress is not None and (done >= next_report or done == total):
                progress(done, total)
                next_report = done + report_every
    return now, iterations, scheduler_s
