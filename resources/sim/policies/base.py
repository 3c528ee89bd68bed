"""The scheduler seam: per-request state, the context a policy schedules in, the `Policy` and
`WaitingQueue` abstract bases.

Each iteration the engine calls ``policy.schedule(waiting, running, ctx)``. A policy picks
the batch: it may admit requests from the head of `waiting` into `running` (after a successful
`ctx.allocate`), preempt running requests with `ctx.preempt` (they go back to the *front* of
`waiting`), and returns the batch as ``[(seq, num_new_tokens), ...]``. The engine then prices the
batch with the cost model, advances every scheduled sequence, registers computed blocks in the
prefix cache and retires finished requests. Priority policies (static priority, RelServe) plug in
through the same seam by ordering the queues and choosing victims differently.

Invariants a policy keeps: a sequence in `running` holds KV blocks for every computed token; a
sequence in `waiting` holds none (`num_computed == 0`); a batch never exceeds
`ctx.max_num_batched_tokens` tokens or `ctx.max_num_seqs` running sequences, and schedules
each sequence at most once.

What a policy declares besides `schedule` (attributes and hooks of `Policy`, each with the
default that fits vLLM v1, so a policy states only where it differs): `enable_chunked_prefill`,
`register_at_schedule`, `token_budget`, `new_waiting_queue()` (a `deque` by default; priority
policies return a queue ordered by relQuery priority, `resources.sim.policies.priority`) and
`overhead()` (wall seconds spent in named parts of its scheduling in the latest run, e.g.
RelServe's updater and arranger). The engine reads them directly: no `getattr`.

Arrival-aware runs (`SimulatedEngine.run_workload`): the engine appends each request to
`waiting` once the simulated clock reaches its `arrival_s`, sets `ctx.now` before every call,
and, with `ctx.preemption_order == "keep-long"`, sorts `running` by computed tokens (longest
first, stable) before every call so that `running.pop()` evicts the shortest (InferMax §6).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from resources.sim.block_cache import BLOCK_SIZE, BlockPool
from resources.sim.cost_model import CostCoefficients

__all__ = ["PREEMPTION_ORDERS", "Batch", "Policy", "ScheduleContext", "SimSeq", "WaitingQueue"]

PREEMPTION_ORDERS: tuple[str, ...] = ("recent", "keep-long")
"""Which running request a policy evicts when KV blocks run out: "recent" (vLLM: the most
recently admitted, the tail of `running`) or "keep-long" (InferMax §6, "keep long, evict short":
`running` is ordered by computed tokens, longest first, so the shortest is evicted)."""


class SimSeq:
    """One request inside the simulated engine (mutable; the engine and policies update it)."""

    __slots__ = (
        "index",
        "request_id",
        "priority",
        "relquery_id",
        "prompt_len",
        "hashes",
        "num_output",
        "num_tokens",
        "num_computed",
        "generated",
        "blocks",
        "num_registered",
        "cached_tokens",
        "first_token_s",
        "finish_s",
        "num_preemptions",
        "max_tokens",
        "arrival_s",
        "prefill_start_s",
        "prefill_end_s",
    )

    def __init__(
        self,
        index: int,
        request_id: str,
        prompt_len: int,
        hashes: list[int],
        num_output: int,
        priority: int = 0,
        relquery_id: str = "",
        max_tokens: int | None = None,
        arrival_s: float = 0.0,
    ) -> None:
        self.index = index
        """Submission order (FCFS key)."""
        self.request_id = request_id
        self.priority = priority
        self.relquery_id = relquery_id
        self.prompt_len = prompt_len
        self.hashes = hashes
        """Chained hashes of the full blocks of the prompt followed by the whole output (only
        those within the first `num_tokens` tokens are ever looked up or registered)."""
        self.num_output = num_output
        """Output tokens this request will generate (>= 1)."""
        self.num_tokens = prompt_len
        """Prompt plus generated tokens so far."""
        self.num_computed = 0
        """Tokens whose KV is in the cache (cache hits included)."""
        self.generated = 0
        self.blocks: list[int] = []
        self.num_registered = 0
        """Leading blocks already keyed in the prefix cache."""
        self.cached_tokens = -1
        """Prefix-cache hit at first scheduling (-1 until scheduled), as vLLM reports it."""
        self.first_token_s = -1.0
        self.finish_s = -1.0
        self.num_preemptions = 0
        self.max_tokens = num_output if max_tokens is None else max_tokens
        """The request's output limit (what a scheduler may know; `num_output` is the truth)."""
        self.arrival_s = arrival_s
        """Simulated second the request reaches the engine (0 for `run`)."""
        self.prefill_start_s = -1.0
        """Start of the first batch that computed part of its prompt (-1 until then)."""
        self.prefill_end_s = -1.0
        """End of the latest batch that computed part of its prompt (recomputes included)."""

    @property
    def is_prefill(self) -> bool:
        """Still computing its prompt (or recomputing after preemption)."""
        return self.generated == 0 or self.num_computed < self.num_tokens - 1

    @property
    def num_remaining(self) -> int:
        """Tokens to compute before the next output token."""
        return self.num_tokens - self.num_computed

    def record_first_hit(self) -> None:
        """Keep the prefix-cache hit of the request's first scheduling (vLLM sets
        `num_cached_tokens` only then): a re-admission after a preemption changes nothing."""
        if self.cached_tokens < 0:
            self.cached_tokens = self.num_computed

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"SimSeq({self.request_id!r}, tokens={self.num_tokens}, computed={self.num_computed}, "
            f"generated={self.generated}/{self.num_output}, blocks={len(self.blocks)})"
        )


Batch = list[tuple[SimSeq, int]]


@dataclass
class ScheduleContext:
    """What a policy may read and the KV operations it may call."""

    pool: BlockPool
    max_num_seqs: int
    """Most sequences in `running` at once."""
    max_num_batched_tokens: int
    """Most tokens computed in one iteration."""
    watermark_blocks: int = 0
    """Free blocks an admission must leave untouched (vLLM v0 keeps 1%)."""
    enable_register_on_allocate: bool = True
    """Key full prompt blocks in the prefix cache as soon as they are allocated for computing
    (vLLM v1: a later request of the same step can hit them, because each layer writes its KV
    before its attention reads it). False: the engine keys them after the step (vLLM v0)."""
    num_preemptions: int = 0
    now: float = 0.0
    """Simulated seconds at the start of the iteration being scheduled."""
    coefficients: CostCoefficients | None = None
    """The engine's cost model (priority policies fit their batch-time predictors to it)."""
    relquery_sizes: dict[str, int] = field(default_factory=dict)
    """Requests per relQuery as submitted (req(R_0) of relserve.txt Eq. 13)."""
    preemption_order: str = "recent"
    """One of `PREEMPTION_ORDERS`."""

    def lookup(self, seq: SimSeq) -> list[int]:
        """Cached blocks a sequence about to be admitted would reuse ([] if caching is off)."""
        return self.pool.lookup(seq.hashes, seq.num_tokens)

    def allocate(
        self,
        seq: SimSeq,
        num_new_tokens: int,
        computed_blocks: list[int] | None = None,
        use_watermark: bool = False,
        full_sequence_must_fit: bool = False,
    ) -> bool:
        """Reserve blocks so `seq` can compute `num_new_tokens` more tokens (vLLM v1's
        `allocate_slots`). For an admission, `computed_blocks` are its cache hits: they are
        referenced and `seq.num_computed` jumps to cover them. With `full_sequence_must_fit`
        (vLLM v1's admission gate, `scheduler_reserve_full_isl`) the free queue must also hold
        the blocks of all `seq.num_tokens` tokens, though only the chunk's are taken. False
        (nothing changed) when the free queue is too short."""
        pool = self.pool
        computed = computed_blocks or []
        num_computed = seq.num_computed + len(computed) * BLOCK_SIZE
        evictable = pool.num_evictable(computed) if computed else 0
        reserve = self.watermark_blocks if use_watermark else 0
        held = len(seq.blocks) + len(computed)
        if full_sequence_must_fit:
            whole = -(-seq.num_tokens // BLOCK_SIZE) - held
            if max(whole, 0) + evictable + reserve > pool.num_free:
                return False
        num_new_blocks = -(-(num_computed + num_new_tokens) // BLOCK_SIZE) - held
        if max(num_new_blocks, 0) + evictable + reserve > pool.num_free:
            return False
        if computed:
            pool.touch(computed)
            seq.blocks.extend(computed)
            seq.num_computed = num_computed
        if num_new_blocks > 0:
            seq.blocks.extend(pool.allocate(num_new_blocks))
        if self.enable_register_on_allocate:
            self.register(seq, seq.num_computed + num_new_tokens)
        return True

    def register(self, seq: SimSeq, num_tokens: int) -> None:
        """Key `seq`'s full blocks within its first `num_tokens` tokens in the cache (prompt and
        generated tokens alike, as vLLM; never beyond the tokens known so far)."""
        if seq.num_registered >= len(seq.hashes):
            return
        full = min(num_tokens, seq.num_tokens, len(seq.hashes) * BLOCK_SIZE) // BLOCK_SIZE
        if full > seq.num_registered:
            self.pool.register(
                seq.blocks[seq.num_registered : full], seq.hashes[seq.num_registered : full]
            )
            seq.num_registered = full

    def preempt(self, seq: SimSeq) -> None:
        """Preempt by recompute: free the blocks, forget computed tokens (generated ones stay
        and are recomputed as part of the prompt). The caller puts `seq` back in `waiting`."""
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.num_computed = 0
        seq.num_registered = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1


class WaitingQueue(ABC):
    """The waiting queue: the deque operations the engine and the policies use. `deque` is
    registered as one (the default queue); priority policies subclass it (`RelQueryQueue`)."""

    @abstractmethod
    def append(self, seq: SimSeq) -> None:
        """An arrival (or a request put back): joins the back."""

    @abstractmethod
    def extend(self, seqs: Iterable[SimSeq]) -> None:
        """`append` each of `seqs` in order."""

    @abstractmethod
    def appendleft(self, seq: SimSeq) -> None:
        """A preempted request: goes back to the front."""

    @abstractmethod
    def popleft(self) -> SimSeq:
        """Remove and return the head (the next request to admit)."""

    @abstractmethod
    def __getitem__(self, i: int) -> SimSeq:
        """`[0]` is the head (other indexes need not be supported)."""

    @abstractmethod
    def __len__(self) -> int:
        """Requests waiting (`bool(queue)`: any waiting)."""

    @abstractmethod
    def __iter__(self) -> Iterator[SimSeq]:
        """The waiting requests, head first."""


WaitingQueue.register(deque)


class Policy(ABC):
    """Forms one iteration's batch from the queues (see the module docstring). Subclasses set
    `name` and implement `schedule`; the rest are declared capabilities with vLLM v1's
    defaults."""

    name: str = ""
    """Registry name (`resources.sim.policies.POLICIES`), shown in reports and errors."""
    enable_chunked_prefill: bool = True
    """Whether a prompt may be computed over several iterations. False (vLLM v0): a prompt
    longer than the token budget is rejected, the default budget is max(context, 2048) and
    admission keeps vLLM v0's 1% watermark of free blocks."""
    register_at_schedule: bool = True
    """Key full prompt blocks in the prefix cache when allocated (vLLM v1) rather than after
    the step (vLLM v0); see `ScheduleContext.enable_register_on_allocate`."""
    token_budget: int | None = None
    """The policy's own tokens per iteration (Sarathi-Serve's 512), used when the engine is
    not given `max_num_batched_tokens`; None: vLLM's default."""

    @abstractmethod
    def schedule(self, waiting: WaitingQueue, running: list[SimSeq], ctx: ScheduleContext) -> Batch:
        """The batch of this iteration (see the module docstring for what it may change)."""

    def new_waiting_queue(self) -> WaitingQueue:
        """A fresh waiting queue for one run (a FIFO `deque` by default)."""
        return deque()

    def overhead(self) -> dict[str, float]:
        """Wall seconds spent in named parts of scheduling during the latest run (none)."""
        return {}
