"""Admission and coalescing: many HTTP handler threads, one engine, one batch at a time.

Handler threads never call the engine. Each HTTP request becomes a ticket in one FIFO queue
(queue order = arrival order); a single dispatcher thread takes the oldest ticket, waits until
`window_s` after its arrival for more, and runs every queued ticket of the same relQuery (header
`X-Relquery-Id`, default "http"), in arrival order, as ONE `engine.run` batch. Batches run one at
a time against the engine's persistent prefix cache. Hence:
- the engine sees the requests exactly in arrival order, as if an in-process caller had
  submitted them in that order in consecutive `run` calls;
- a client sending one request at a time reproduces the in-process engine's token accounting
  on the same requests run one per `run` call; a client whose requests all land within one
  window reproduces one in-process `run` of the whole list; in between, the accounting equals
  in-process runs of the same consecutive slices (concurrent clients decide arrival order);
- multi-prompt completions (`prompt: [..]`) stay together in one batch, in order.
The simulated engine caches a prompt block only once an iteration has computed it, so requests
of one batch do not hit each other's new blocks while a later batch hits them all: over HTTP the
hit rate depends on how arrivals were cut into batches, as it does on a real vLLM server.

The dispatcher holds a batch only for the engine's own `run` (for the simulated engine, the wall
time of simulating it, far below its simulated seconds); requests reach it already bounded by
the context window (`app.py`), so no request can make a run unboundedly long.

`load()` is what `/metrics` reads of the batcher (`BatcherLoad`): requests queued and in the
batch being run, the engine seconds summed over every batch that returned (batches run one
after another, so that sum is the replica's busy time on the engine's own clock), and the KV
cache use the engine reported after the latest batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from resources.engine import LLMEngine, Request, Response

__all__ = ["BatcherLoad", "EngineBatcher", "EngineFailure"]

log = logging.getLogger(__name__)


class EngineFailure(RuntimeError):
    """The engine raised while serving a batch; every ticket of that batch gets it."""


@dataclass(frozen=True)
class BatcherLoad:
    """One consistent reading of the batcher (taken under its lock)."""

    running: int
    """Requests in the batch the engine is running now (0 between batches)."""
    waiting: int
    """Requests queued behind it."""
    engine_time_s: float
    """`RunStats.engine_time_s` summed over every batch the engine returned (a batch whose
    `run` raised adds nothing)."""
    batches: int
    """`engine.run` calls made, failed ones included."""
    kv_cache_usage: float
    """Share of the engine's usable KV blocks held by running requests after the latest
    batch, as vLLM's `kv_cache_usage_perc` (cached but unreferenced blocks count as free);
    0.0 for an engine without `cache_stats()`."""


def kv_cache_usage(engine: LLMEngine) -> float:
    """vLLM's `BlockPool.get_usage`: 1 - free / usable blocks (the null block is not usable)."""
    cache_stats = getattr(engine, "cache_stats", None)
    if cache_stats is None:
        return 0.0
    stats = cache_stats()
    usable = stats["num_blocks"] - 1
    return 1.0 - stats["num_free_blocks"] / usable if usable > 0 else 0.0


@dataclass
class _Ticket:
    relquery_id: str
    requests: list[Request]
    arrived: float
    done: threading.Event = field(default_factory=threading.Event)
    responses: list[Response] | None = None
    batch_size: int = 0
    error: str | None = None


class EngineBatcher:
    """Feeds one engine from many threads: FIFO admission, coalesced batches, serial runs.

    Invariants: tickets reach the engine in `submit` order; a batch holds consecutive tickets
    of one relQuery; `engine.run` is never called concurrently; every ticket is answered
    (responses, or the engine's exception as `EngineFailure`), also when the batcher closes.
    """

    def __init__(
        self, engine: LLMEngine, *, window_s: float = 0.005, max_batch_requests: int = 256
    ) -> None:
        self.engine = engine
        self.window_s = window_s
        self.max_batch_requests = max_batch_requests
        self.batches_run = 0
        """How many `engine.run` calls were made (for tests and logs)."""
        self.tickets_admitted = 0
        """How many `submit` calls have joined the queue (their admission order is final)."""
        self._running = 0
        self._engine_time_s = 0.0
        self._kv_cache_usage = 0.0
        self._pending: deque[_Ticket] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="sim-batcher", daemon=True)
        self._thread.start()

    def submit(self, relquery_id: str, requests: Sequence[Request]) -> tuple[list[Response], int]:
        """Serve `requests` (kept together, in order); returns (responses, batch size)."""
        ticket = _Ticket(relquery_id, list(requests), time.monotonic())
        with self._cv:
            if self._closed:
                raise EngineFailure("the server is shutting down")
            self._pending.append(ticket)
            self.tickets_admitted += 1
            self._cv.notify_all()
        ticket.done.wait()
        if ticket.error is not None:
            raise EngineFailure(ticket.error)
        assert ticket.responses is not None
        return ticket.responses, ticket.batch_size

    def load(self) -> BatcherLoad:
        """Queued and running requests, engine seconds so far, KV use (see `BatcherLoad`)."""
        with self._cv:
            return BatcherLoad(
                running=self._running,
                waiting=sum(len(t.requests) for t in self._pending),
                engine_time_s=self._engine_time_s,
                batches=self.batches_run,
                kv_cache_usage=self._kv_cache_usage,
            )

    def _take_batch(self) -> list[_Ticket]:
        with self._cv:
            while not self._pending and not self._closed:
                self._cv.wait()
            if not self._pending:
                return []
            deadline = self._pending[0].arrived + self.window_s
            while not self._closed:
                queued = sum(len(t.requests) for t in self._pending)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or queued >= self.max_batch_requests:
                    break
                self._cv.wait(remaining)
            if not self._pending:  # closed while waiting: close() answered them
                return []
            first = self._pending.popleft()
            batch, size = [first], len(first.requests)
            while self._pending:
                nxt = self._pending[0]
                if nxt.relquery_id != first.relquery_id:
                    break
                if size + len(nxt.requests) > self.max_batch_requests:
                    break
                batch.append(self._pending.popleft())
                size += len(nxt.requests)
            self._running = size
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Ticket]) -> None:
        requests = [r for t in batch for r in t.requests]
        try:
            result = self.engine.run(batch[0].relquery_id, requests)
            by_id = {r.id: r for r in result.responses}
            missing = [r.id for r in requests if r.id not in by_id]
            if missing:
                raise RuntimeError(f"engine returned no response for {missing[:5]}")
        except Exception as exc:  # answer every waiting ticket, keep serving
            log.exception("engine failed on a batch of %d requests", len(requests))
            with self._cv:
                self._running = 0
            for ticket in batch:
                ticket.error = f"{type(exc).__name__}: {exc}"
                ticket.done.set()
            return
        finally:
            self.batches_run += 1
        usage = kv_cache_usage(self.engine)
        with self._cv:  # before any ticket is answered: a client's next scrape sees this batch
            self._running = 0
            self._engine_time_s += result.stats.engine_time_s
            self._kv_cache_usage = usage
        for ticket in batch:
            ticket.responses = [by_id[r.id] for r in ticket.requests]
            ticket.batch_size = len(requests)
            ticket.done.set()

    def close(self) -> None:
        """Stop after the batch in flight; tickets still queued get an error. Idempotent."""
        with self._cv:
            self._closed = True
            leftover = list(self._pending)
            self._pending.clear()
            self._cv.notify_all()
        for ticket in leftover:
            ticket.error = "the server is shutting down"
            ticket.done.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
