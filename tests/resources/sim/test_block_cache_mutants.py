"""BlockPool against a plain model of its prefix index, over random operation sequences; and the
counters and message the first mutation run found unguarded (benchmarks/results/mutation.md).

The model keeps, per block, the hash it carries and, per hash, its blocks in registration
order; `allocate` drops the hash of each block it hands out (eviction), `reset` drops all.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.sim.block_cache import BLOCK_SIZE, BlockPool

NUM_BLOCKS = 6
HASHES = [101, 202, 303]  # few values, so duplicates are common

operation = st.one_of(
    st.tuples(st.just("allocate"), st.integers(1, 3)),
    st.tuples(st.just("register"), st.lists(st.sampled_from(HASHES), min_size=1, max_size=3)),
    st.tuples(st.just("free"), st.integers(0, 3)),
    st.tuples(st.just("reset"), st.just(0)),
)


class Model:
    """What the index must answer: hash per block, blocks per hash in registration order."""

    def __init__(self) -> None:
        self.hash_of: dict[int, int] = {}  # insertion order = registration order

    def register(self, blocks: list[int], hashes: list[int]) -> None:
        for b, h in zip(blocks, hashes, strict=False):
            self.hash_of.setdefault(b, h)

    def drop(self, blocks: list[int]) -> None:
        for b in blocks:
            self.hash_of.pop(b, None)

    def first_carrier(self, h: int) -> list[int]:
        return [b for b, carried in self.hash_of.items() if carried == h][:1]


@settings(max_examples=200, deadline=None)
@given(st.lists(operation, max_size=25))
def test_the_index_matches_a_model_and_its_version_only_grows(ops) -> None:
    pool, model = BlockPool(NUM_BLOCKS), Model()
    held: list[list[int]] = []
    version = pool.index_version
    for op, arg in ops:
        before = dict(model.hash_of)
        if op == "allocate" and arg <= pool.num_free:
            blocks = pool.allocate(arg)
            model.drop(blocks)
            held.append(blocks)
        elif op == "register" and held:
            pool.register(held[-1], arg)
            model.register(held[-1], arg)
        elif op == "free" and held:
            pool.free(held.pop(arg % len(held)))
        elif op == "reset" and not held:
            pool.reset()
            model.hash_of.clear()
        assert pool.num_cached == len(model.hash_of)
        for h in HASHES:
            assert pool.is_cached(h) == (h in model.hash_of.values())
            assert pool.lookup([h], BLOCK_SIZE + 1) == model.first_carrier(h)
        new_version = pool.index_version
        assert new_version >= version
        assert (new_version != version) == (model.hash_of != before)
        version = new_version


def test_eviction_and_reset_keep_the_cached_count() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    pool.register(blocks, [1, 2, 3])
    pool.free(blocks)
    pool.free(pool.allocate(1))  # evicts one cached block
    assert pool.num_cached == 2
    pool.reset()
    assert pool.num_cached == 0
    assert not any(pool.is_cached(h) for h in (1, 2, 3))


def test_duplicates_work_after_a_reset() -> None:
    pool = BlockPool(3)  # two usable blocks
    pool.reset()
    a, b = pool.allocate(2)
    pool.register([a, b], [7, 7])
    assert pool.lookup([7], BLOCK_SIZE + 1) == [a]
    pool.free([b, a])  # a is freed last, so evicted second
    pool.allocate(2)
    assert pool.num_cached == 0


def test_the_index_version_grows_across_resets() -> None:
    pool = BlockPool(4)
    versions = [pool.index_version]
    for h in (1, 2):
        (block,) = pool.allocate(1)
        pool.register([block], [h])
        versions.append(pool.index_version)
        pool.free([block])
        pool.reset()
        versions.append(pool.index_version)
    assert versions == sorted(set(versions))


def test_reset_while_held_names_the_reason() -> None:
    pool = BlockPool(4)
    pool.allocate(1)
    with pytest.raises(RuntimeError, match="^cannot reset the prefix cache while sequences hold"):
        pool.reset()


def test_allocating_more_than_is_free_names_both_counts() -> None:
    pool = BlockPool(4)
    pool.allocate(1)
    with pytest.raises(RuntimeError, match=r"^asked for 3 blocks with only 2 free$"):
        pool.allocate(3)
    assert pool.num_free == 2


def test_evictions_are_counted_from_zero() -> None:
    pool = BlockPool(2)  # one usable block
    assert pool.num_evictions == 0
    (block,) = pool.allocate(1)
    pool.register([block], [5])
    pool.free([block])
    pool.allocate(1)
    assert pool.num_evictions == 1
