"""BlockPool: chained hashes, reference counts, LRU eviction, the last-token rule."""

from __future__ import annotations

import pytest

from resources.sim.block_cache import BLOCK_SIZE, BlockPool, block_hashes


def test_hashes_are_chained_and_only_full_blocks() -> None:
    a = block_hashes(list(range(40)))
    assert len(a) == 2  # 40 tokens -> two full blocks, the partial third has no key
    b = block_hashes(list(range(16)) * 2)
    # the same 16 tokens at position 2 get a different key (chained over the first block)
    assert b[0] != b[1]
    assert block_hashes(list(range(32)))[:2] == a
    assert block_hashes(list(range(100, 116)) + list(range(16, 32)))[1] != a[1]


def test_lookup_never_covers_the_last_token() -> None:
    pool = BlockPool(8)
    hashes = block_hashes(list(range(32)))
    blocks = pool.allocate(2)
    pool.register(blocks, hashes)
    pool.free(blocks)
    assert len(pool.lookup(hashes, num_tokens=32)) == 1  # 31 tokens may hit -> one block
    assert len(pool.lookup(hashes, num_tokens=33)) == 2


def test_lru_evicts_least_recently_freed_unreferenced_block() -> None:
    pool = BlockPool(3)
    h = [block_hashes([i] * BLOCK_SIZE)[0] for i in range(4)]
    b0, b1, b2 = pool.allocate(1), pool.allocate(1), pool.allocate(1)
    for b, hh in zip((b0, b1, b2), h, strict=False):
        pool.register(b, [hh])
    pool.free(b1)  # freed first: least recently used
    pool.free(b0)
    assert pool.num_free == 2
    pool.allocate(1)  # evicts b1's content
    assert not pool.is_cached(h[1])
    assert pool.is_cached(h[0]) and pool.is_cached(h[2])
    # b2 is still referenced: it cannot be evicted even when everything else is taken
    pool.allocate(1)
    assert pool.is_cached(h[2]) and not pool.is_cached(h[0])
    with pytest.raises(RuntimeError):
        pool.allocate(1)


def test_touch_pulls_cached_block_out_of_the_free_queue() -> None:
    pool = BlockPool(2)
    hashes = block_hashes(list(range(17)))
    blocks = pool.allocate(1)
    pool.register(blocks, hashes)
    pool.free(blocks)
    hit = pool.lookup(hashes, 17)
    assert hit == blocks and pool.num_evictable(hit) == 1
    pool.touch(hit)
    assert pool.num_free == 1 and pool.ref_count(hit[0]) == 1


def test_disabled_cache_never_hits() -> None:
    pool = BlockPool(4, enable_prefix_caching=False)
    hashes = block_hashes(list(range(40)))
    blocks = pool.allocate(2)
    pool.register(blocks, hashes)
    pool.free(blocks)
    assert pool.lookup(hashes, 40) == [] and pool.num_cached == 0


def test_reset_refuses_while_blocks_are_held() -> None:
    pool = BlockPool(2)
    held = pool.allocate(1)
    with pytest.raises(RuntimeError):
        pool.reset()
    pool.free(held)
    pool.reset()
    assert pool.num_free == 2
