"""BlockPool: chained hashes, reference counts, LRU eviction, the last-token rule, and the
rules held to vLLM 0.32 (null block, unhashed blocks reused first, duplicate blocks kept)."""

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
    pool = BlockPool(4)  # block 0 is the null block: 3 usable
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
    pool = BlockPool(3)
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
    pool = BlockPool(3)
    held = pool.allocate(1)
    with pytest.raises(RuntimeError):
        pool.reset()
    pool.free(held)
    pool.reset()
    assert pool.num_free == 2


def test_block_zero_is_the_null_block() -> None:
    """vLLM reserves one null block: `num_blocks - 1` are usable and block 0 is never handed out."""
    pool = BlockPool(5)
    assert pool.num_free == pool.num_usable == 4
    assert sorted(pool.allocate(4)) == [1, 2, 3, 4]
    with pytest.raises(RuntimeError):
        pool.allocate(1)
    with pytest.raises(ValueError, match="null block"):
        BlockPool(1)


def test_freed_blocks_without_a_hash_are_reused_before_cached_ones() -> None:
    pool = BlockPool(4)
    a, b, c = pool.allocate(3)
    h = [block_hashes([i] * BLOCK_SIZE)[0] for i in range(2)]
    pool.register([a, b], h)
    pool.free([a])  # cached: back of the queue
    pool.free([c])  # no hash: front of the queue, taken first
    assert pool.allocate(1) == [c]
    assert pool.is_cached(h[0])
    pool.free([b])
    assert pool.allocate(1) == [a] and not pool.is_cached(h[0]) and pool.is_cached(h[1])


def test_freed_unhashed_blocks_keep_their_tail_first_order_at_the_front() -> None:
    pool = BlockPool(6)
    blocks = pool.allocate(5)
    pool.free(blocks[:3])  # freed tail-first: 3, 2, 1 at the front in that order
    assert pool.allocate(3) == [blocks[2], blocks[1], blocks[0]]


def test_a_duplicate_block_is_kept_and_answers_after_the_first_is_evicted() -> None:
    pool = BlockPool(4)
    hashes = block_hashes(list(range(16)))
    first, second = pool.allocate(2)
    pool.register([first], hashes)
    pool.register([second], hashes)  # the same content computed twice: both carry the hash
    assert pool.num_cached == 2 and pool.lookup(hashes, 17) == [first]
    pool.free([first])
    pool.free([second])
    pool.allocate(2)  # the never-used block, then `first` (least recently freed) is evicted
    assert pool.lookup(hashes, 17) == [second] and pool.num_cached == 1


def test_index_version_changes_with_every_registration_and_eviction() -> None:
    pool = BlockPool(3)
    hashes = block_hashes(list(range(16)))
    a, b = pool.allocate(2)
    versions = [pool.index_version]
    pool.register([a], hashes)
    versions.append(pool.index_version)
    pool.register([b], hashes)  # a duplicate: lookups unchanged, but the index grew
    versions.append(pool.index_version)
    pool.free([a, b])
    pool.allocate(1)  # evicts one carrier; lookups may now answer another block
    versions.append(pool.index_version)
    assert versions == sorted(set(versions))
