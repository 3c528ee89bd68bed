import numpy as np
import pytest

from llm_assets.data import text


def test_vocabulary_is_distinct_deterministic_and_made_up():
    words = text.vocabulary()
    assert len(words) == text.VOCABULARY_SIZE == len(set(words))
    assert words == text.vocabulary()
    assert all(w.isalpha() and w.islower() for w in words)


def test_random_texts_hit_requested_lengths():
    rng = np.random.default_rng(0)
    lengths = np.array([1, 5, 40, 132, 382, 840] * 200)
    texts = text.random_texts(rng, lengths)
    got = np.array([len(t) for t in texts])
    assert abs(got.mean() - lengths.mean()) < 0.02 * lengths.mean()
    assert np.all(np.abs(got - lengths)[lengths >= 40] < 20)
    assert all(t[0].isupper() and t.endswith(".") for t in texts)


def test_random_texts_are_seeded():
    a = text.random_texts(np.random.default_rng(1), [100] * 50)
    b = text.random_texts(np.random.default_rng(1), [100] * 50)
    c = text.random_texts(np.random.default_rng(2), [100] * 50)
    assert a == b
    assert a != c


def test_unique_texts_are_distinct_even_when_short():
    texts = text.unique_texts(np.random.default_rng(0), [3] * 2_000)
    assert len(set(texts)) == 2_000


def test_topic_words_make_texts_share_words():
    rng = np.random.default_rng(0)
    topic = np.arange(3_000, 3_010)
    topical = text.random_texts(rng, [300] * 20, topic_words=topic, topic_rate=0.3)
    words = {text.vocabulary()[i] for i in topic}
    assert all(len(words & set(text.content_words(t))) >= 3 for t in topical)


@pytest.mark.parametrize("target", [0, 1, 700, 1_000])
def test_exact_flags_hit_the_target_with_singletons(target):
    rng = np.random.default_rng(0)
    multiplicities = np.array([1] * 900 + [2] * 40 + [3] * 10)
    flags = text.exact_flags(rng, multiplicities, target)
    assert multiplicities[flags].sum() == target


def test_skewed_counts_sum_and_cover_every_group():
    counts = text.skewed_counts(np.random.default_rng(0), 1_000, 20, 1.0)
    assert counts.sum() == 1_000 and counts.min() >= 1 and counts.max() > 3 * np.median(counts)


def test_match_weighted_mean_matches_both_means():
    rng = np.random.default_rng(0)
    lengths = text.lognormal_lengths(rng, 68, 407, 0.35, minimum=80)
    weights = rng.integers(1, 500, size=68)
    out = text.match_weighted_mean(lengths, weights, 407, minimum=80)
    assert abs(out.mean() - 407) < 2
    assert abs((out * weights).sum() / weights.sum() - 407) < 2


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="-1"):
        text.vocabulary(-1)
    with pytest.raises(ValueError, match="n=0"):
        text.zipf_weights(0)
