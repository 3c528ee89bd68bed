"""The KV block pool with automatic prefix caching, as in vLLM v1's `KVCacheManager`.

Model (vLLM 0.32, `vllm/v1/core/kv_cache_manager.py`, `block_pool.py`, `kv_cache_utils.py`;
held to vLLM's own code by `benchmarks.vllm_conformance` and its recorded traces):

- The KV cache is `num_blocks` blocks of `BLOCK_SIZE` = 16 tokens, of which block 0 is vLLM's
  null block (never allocated), so `num_blocks - 1` are usable. A sequence holds the blocks
  covering its computed tokens plus the ones it is about to compute.
- A *full* block is keyed by a hash chained over every earlier block of the same sequence
  (`hash((parent_hash, tuple(token_ids_of_block)))`), so a block hits only when the whole
  prefix up to and including it is equal. Blocks of generated tokens are keyed too (the
  sequence's hashes run over prompt and output), so a preempted request reuses its own output
  blocks on readmission. Partial blocks are never cached. Python's hash of a tuple of ints is
  not salted, so keys are stable across processes.
- A block is registered in the cache by the step that computes it: when that step is
  scheduled (vLLM v1: a later request in the same step may hit it, since every layer writes its
  KV before its attention reads) or when it ends (vLLM v0). A request never hits its own blocks
  on first scheduling (they do not exist yet, and chained hashes make a block repeated inside
  one prompt a different key); after a preemption it may hit the blocks it computed before, as
  in vLLM, but the `cached_tokens` it reports is its hit at first scheduling, as vLLM reports.
- A hash may be carried by several blocks (vLLM does not de-duplicate: an identical prompt
  recomputes its last block, which is registered again); a lookup returns the earliest
  registered block still carrying it.
- `ref_count` counts the running sequences that hold a block; a block with `ref_count > 0` is
  never evicted. A request's blocks are freed tail-first; those reaching 0 with no hash go to
  the FRONT of the free queue (reused first) and those with a hash to the back (LRU), as
  vLLM's `free_blocks` does. Allocation takes from the head, evicting the cached content of
  the block it takes.
- A lookup never covers the last token: vLLM v1 caps a hit at `num_tokens - 1` tokens so
  that at least one token is recomputed to produce logits. With 16-token blocks, a prompt of 32
  tokens whose two blocks are both cached therefore hits 16 tokens, not 32.

`enable_prefix_caching=False` turns lookups and registration off (the "No Cache" baseline).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

BLOCK_SIZE = 16
"""Tokens per KV block, an engine property: vLLM's default `CacheConfig.block_size` on CUDA,
which vLLM passes to its KV cache manager and block pool. The simulator's pool and
schedulers count in blocks of this size; `block_hashes` takes it as a parameter, and the
optimizer's token metric (`llm_assets.optimizer.metrics.token_hit_rate`) is given it by its
caller."""

__all__ = ["BLOCK_SIZE", "BlockPool", "block_hashes"]


def block_hashes(token_ids: Sequence[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained hashes of the full blocks of `token_ids` (a trailing partial block has none)."""
    out: list[int] = []
    parent = 0
    n_full = len(token_ids) // block_size
    for i in range(0, n_full * block_size, block_size):
        parent = hash((parent, tuple(token_ids[i : i + block_size])))
        out.append(parent)
    return out


class BlockPool:
    """Fixed pool of KV blocks with reference counts, a hash index and an LRU free queue.

    Invariants: block 0 is the null block (never free, never allocated), so `num_blocks - 1`
    are usable; every other block is either held (`ref_count > 0`) or in the free queue, never
    both; `num_free` is the size of the free queue; a block carries at most one hash, and a
    hash maps to every block carrying it, the earliest registered first (`_block_of` holds
    that first block, `_dups` the full ordered set when there are several).
    """

    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"num_blocks must be >= 2 (block 0 is vLLM's null block), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._block_of: dict[int, int] = {}
        self._dups: dict[int, dict[int, None]] = {}
        self._num_hashed = 0
        # vLLM's free queue is one list; here it is three parts, in queue order: blocks freed
        # without a hash (a stack: vLLM prepends them), never-used blocks, and blocks freed
        # with a hash (an OrderedDict as an O(1) LRU queue: a plain dict would do the same,
        # but finding its first key after many deletions at the front scans their tombstones,
        # which made eviction O(pool size)). Only the last part holds hashed blocks, so
        # lookups never touch the others. Block 0 is the null block vLLM takes out of the
        # queue at start-up.
        self._stack: list[int] = []
        self._fresh: deque[int] = deque(range(1, num_blocks))
        self._free: OrderedDict[int, None] = OrderedDict()
        self.num_evictions = 0
        self._num_dropped = 0
        """Hashes forgotten by `reset` (with `num_evictions`, every removal from the index)."""

    # -- queries -------------------------------------------------------------------------------
    @property
    def num_usable(self) -> int:
        """Blocks a request can ever hold (all but the null block)."""
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        return len(self._stack) + len(self._fresh) + len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks that currently carry a prefix hash (held or free)."""
        return self._num_hashed

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._block_of

    @property
    def index_version(self) -> int:
        """A counter that grows with every change of the prefix-cache index (a block's hash
        registered, evicted or forgotten by `reset`) and with nothing else: while it is
        unchanged, every `lookup` gives the same blocks. O(1); computed from the counts, so no
        mutation pays for it (every removal was an insertion: insertions = `num_cached` +
        removals)."""
        removals = self.num_evictions + self._num_dropped
        return self._num_hashed + 2 * removals

    def index_getter(self) -> Callable[[int], int | None]:
        """Read access to the prefix-cache index for callers that walk many prefixes: a
        function from a hash to the block a lookup returns for it (the first registered of
        those carrying it), or None (the index's own `get`, C-level; it cannot change the
        index). Follows every later registration and eviction, until `reset`. `lookup` is that
        walk over a prompt's hashes."""
        return self._block_of.get

    def lookup(self, hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Blocks of the longest cached prefix of `hashes`, never covering the last of `num_tokens`.

        Returns block ids (not yet referenced: pass them to `touch`). Empty when caching is off.
        """
        if not self.enable_prefix_caching:
            return []
        limit = min(len(hashes), (num_tokens - 1) // BLOCK_SIZE)
        found: list[int] = []
        index = self._block_of
        for h in hashes[:limit]:
            block = index.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` sit in the free queue (touching them uses up free slots)."""
        ref = self._ref
        return sum(1 for b in blocks if ref[b] == 0)

    # -- mutations -----------------------------------------------------------------------------
    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cache-hit blocks (hashed, so free ones are in the LRU part),
        pulling free ones out of the queue."""
        ref = self._ref
        free = self._free
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the head of the free queue (evicting their cached content)."""
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} blocks with only {self.num_free} free")
        stack, fresh, free = self._stack, self._fresh, self._free
        ref = self._ref
        out: list[int] = []
        for _ in range(n):
            if stack:
                b = stack.pop()
            elif fresh:
                b = fresh.popleft()
            else:
                b = free.popitem(last=False)[0]
                self._evict(b)
            ref[b] = 1
            out.append(b)
        return out

    def _evict(self, block: int) -> None:
        """Drop `block`'s hash from the index (a duplicate, if any, then answers lookups)."""
        h = self._hash_of[block]
        self._hash_of[block] = None
        self._num_hashed -= 1
        self.num_evictions += 1
        dups = self._dups.get(h)
        if dups is None:
            del self._block_of[h]
            return
        del dups[block]
        self._block_of[h] = next(iter(dups))
        if len(dups) == 1:
            del self._dups[h]

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block, tail first. Of the blocks reaching 0, those with
        no hash go to the FRONT of the free queue (reused first: they can never hit) and those
        with a hash to the back (LRU), each group in tail-first order, as vLLM's
        `BlockPool.free_blocks`."""
        ref = self._ref
        hash_of = self._hash_of
        unhashed: list[int] = []
        hashed: list[int] = []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                (unhashed if hash_of[b] is None else hashed).append(b)
        if unhashed:
            self._stack.extend(reversed(unhashed))
        if hashed:
            self._free.update(dict.fromkeys(hashed))

    def register(self, blocks: Sequence[int], hashes: Sequence[int]) -> None:
        """Key computed full blocks by their prefix hashes (no-op when caching is off).

        A block that already carries a hash keeps it. A hash already held by another block is
        registered again (a duplicate: lookups keep returning the first), as vLLM 0.32 does.
        """
        if not self.enable_prefix_caching:
            return
        hash_of = self._hash_of
        index = self._block_of
        for b, h in zip(blocks, hashes, strict=False):
            if hash_of[b] is not None:
                continue
            hash_of[b] = h
            self._num_hashed += 1
            first = index.setdefault(h, b)
            if first != b:
                self._dups.setdefault(h, {first: None})[b] = None

    def reset(self) -> None:
        """Forget every cached prefix, keeping the free queue's order (as vLLM's
        `reset_prefix_cache`). Only valid when no block is held."""
        if any(self._ref):
            raise RuntimeError("cannot reset the prefix cache while sequences hold blocks")
        self._num_dropped += self._num_hashed
        self._num_hashed = 0
        self._hash_of = [None] * self.num_blocks
        self._block_of = {}
        self._dups = {}
        self._fresh = deque([*reversed(self._stack), *self._fresh, *self._free])
        self._stack = []
        self._free = OrderedDict()
