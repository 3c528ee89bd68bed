"""The benchmark's own machinery: the authors' QuickGreedy port and the token hit rate."""

import pandas as pd
import pytest
from hypothesis import given, settings

from benchmarks.lib.shapes import SHAPES
from benchmarks.lib.tokens import RowTokens, token_hit_rate
from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.metrics import char_hit_rate, row_strings
from llm_assets.optimizer.metrics import token_hit_rate as trie_token_hit_rate
from llm_assets.optimizer.quickgreedy import quick_greedy
from llm_assets.optimizer.schedule import validate_schedule
from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.tokenizer import ApproxTokenizer
from tests.conftest import shared_file
from tests.llm_assets.optimizer.strategies import tables


@given(tables(max_rows=7, max_cols=4))
@settings(max_examples=60, deadline=None)
def test_quick_greedy_gives_a_valid_schedule(frame):
    schedule = quick_greedy(encode(frame), distinct_value_threshold=0.7, base=3)
    validate_schedule(schedule, len(frame), list(frame.columns))


def test_quick_greedy_counts_a_value_across_fields_and_sets_distinct_fields_aside():
    """ "blue" is in a once and in b twice: counted together (3 cells, 16 x 2 = 32 beats
    "red" 9 x 3) it leads every row holding it, in whichever field; the all-distinct id
    (more than 0.7 x rows distinct) goes last in every row."""
    frame = pd.DataFrame(
        {
            "id": [str(k) for k in range(10)],
            "a": ["red", "red", "blue"] + ["k"] * 7,
            "b": ["blue", "blue", "red"] + ["m"] * 7,
        }
    )
    orders = dict(quick_greedy(encode(frame)))
    assert all(fields[-1] == "id" for fields in orders.values())
    assert [orders[r][0] for r in (0, 1, 2)] == ["b", "b", "a"]


def test_quick_greedy_reproduces_the_authors_published_figure():
    """../shared/data/README.md: their code reaches 75.9% on movies_small.csv."""
    frame = pd.read_csv(shared_file("data", "movies_small.csv"), dtype=str, keep_default_na=False)
    enc = encode(frame)
    assert char_hit_rate(enc, quick_greedy(enc)) == pytest.approx(0.759, abs=0.005)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_sim_block_cache_agrees_with_the_optimizers_token_metric(shape):
    """Two implementations of the same count: the simulator's BlockPool walk and the
    optimizer's block trie, on per-value tokens of the rendered rows."""
    enc = encode(SHAPES[shape](300, seed=1))
    schedule = reorder(enc)
    tokenizer = ApproxTokenizer()
    tokens = RowTokens(enc, tokenizer.encode)
    texts = [t + "\n" for t in row_strings(enc, schedule, sep="\n")]
    assert tokens.agreement(schedule) == 1.0
    assert token_hit_rate(tokens.rows(schedule)) == pytest.approx(
        trie_token_hit_rate(texts, tokenizer.encode, BLOCK_SIZE)
    )


def test_quick_greedy_depth_limits_fall_back_to_statistics_order():
    """With col_stop=0 nothing recurses: one field order for every row, as their harness."""
    frame = SHAPES["critics16"](200, seed=2)
    enc = encode(frame)
    assert len(quick_greedy(enc, col_stop=0).orders) == 1
    assert len(quick_greedy(enc, row_stop=1).orders) < len(quick_greedy(enc).orders)
