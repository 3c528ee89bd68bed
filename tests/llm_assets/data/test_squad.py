import json

import numpy as np
import pandas as pd
import pytest

from llm_assets.data import squad
from llm_assets.data.text import content_words

COLUMNS = ["id", "title", "context", "question", "answers", "is_impossible"]


def near(value, target, tolerance=0.10):
    return abs(value - target) <= tolerance * target


@pytest.fixture(scope="module")
def full():
    return squad()["squad"]


def test_full_size_statistics(full):
    assert list(full.columns) == COLUMNS
    assert (~full["is_impossible"]).sum() == 5_000
    assert near(full["is_impossible"].mean(), 3_168 / 6_078, 0.02)
    contexts = full.drop_duplicates("context")
    assert near(contexts.groupby("title").size().mean(), 646 / 16)
    per_context = full.groupby("context").size()
    assert near(per_context.mean(), 6_078 / 646) and per_context.min() >= 3
    assert near(contexts["context"].str.len().mean(), 840)
    assert contexts["context"].str.len().min() >= 170
    assert near(full["question"].str.len().mean(), 59)
    assert full["question"].str.endswith("?").all()


def test_ids_unique_and_answers_are_spans_of_the_context(full):
    assert full["id"].is_unique and (full["id"].str.len() == 24).all()
    assert full["is_impossible"].dtype == bool
    for answers, context, impossible in zip(
        full["answers"], full["context"], full["is_impossible"], strict=True
    ):
        parsed = json.loads(answers)
        assert isinstance(parsed, list)
        assert (parsed == []) == bool(impossible)
        assert all(a and a in context for a in parsed)


def test_rows_are_grouped_by_title_then_context(full):
    changes = (full["context"] != full["context"].shift()).sum()
    assert changes == full["context"].nunique()
    assert (full["title"] != full["title"].shift()).sum() == full["title"].nunique()


def test_questions_share_words_with_their_own_context(full):
    sample = full.sample(1_000, random_state=0)
    contexts = full["context"].drop_duplicates().tolist()
    rng = np.random.default_rng(0)
    own, other = [], []
    for question, context in zip(sample["question"], sample["context"], strict=True):
        words = set(content_words(question))
        assert words, question
        own.append(len(words & set(content_words(context))))
        stranger = contexts[int(rng.integers(len(contexts)))]
        if stranger != context:
            other.append(len(words & set(content_words(stranger))))
    assert np.mean(own) > 3 * np.mean(other) + 1
    assert np.mean(np.array(own) > 0) > 0.95


def test_deterministic_in_seed(full):
    pd.testing.assert_frame_equal(full, squad()["squad"])
    assert not squad(seed=1)["squad"].equals(full)


@pytest.mark.parametrize("num_questions", [1, 3, 50, 500])
def test_small_sizes(num_questions):
    frame = squad(num_questions, seed=2)["squad"]
    assert (~frame["is_impossible"]).sum() == num_questions
    assert frame["context"].nunique() >= 1


def test_num_contexts_and_impossible_share():
    frame = squad(200, num_contexts=7, impossible_share=0.0)["squad"]
    assert len(frame) == 200 and not frame["is_impossible"].any()
    assert frame["context"].nunique() == 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_questions": 0}, "num_questions must be >= 1, got 0"),
        ({"num_questions": 5, "num_contexts": 0}, "num_contexts must be between 1 and"),
        ({"num_questions": 5, "num_contexts": 1_000}, "got 1000"),
        ({"num_questions": 5, "impossible_share": 1.0}, r"impossible_share must be in \[0, 1\)"),
    ],
)
def test_errors_name_the_bad_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        squad(**kwargs)
