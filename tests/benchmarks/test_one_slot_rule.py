"""The rule one llama.cpp slot follows, checked against its definition (no server needed)."""

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.lib.llama_server import one_slot_cached

PROMPTS = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), max_size=12)


@given(PROMPTS)
def test_cached_is_the_longest_common_prefix_with_the_previous_prompt(prompts):
    cached = one_slot_cached(prompts)
    assert len(cached) == len(prompts)
    for i, (ids, n) in enumerate(zip(prompts, cached, strict=True)):
        previous = prompts[i - 1] if i else []
        assert 0 <= n <= len(ids) - 1  # at least one token is always computed
        assert ids[:n] == previous[:n]  # a common prefix ...
        if n < len(ids) - 1:  # ... and the longest one
            assert n == len(previous) or ids[n] != previous[n]


def test_first_request_and_repeats():
    assert one_slot_cached([[1, 2, 3], [1, 2, 3], [1, 2, 4], [5]]) == [0, 2, 2, 0]
