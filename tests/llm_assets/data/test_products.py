import pandas as pd
import pytest

from llm_assets.data import products
from llm_assets.data.products import FORMATS


def near(value, target, tolerance=0.10):
    return abs(value - target) <= tolerance * target


@pytest.fixture(scope="module")
def full():
    return products()


def test_full_size_statistics(full):
    reviews, metadata = full["reviews"], full["metadata"]
    assert list(reviews.columns) == ["asin", "reviewText", "verified", "overall", "review_id"]
    assert list(metadata.columns) == ["asin", "description", "Format"]
    assert len(reviews) == 15_014
    assert len(metadata) == 144
    assert reviews["reviewText"].nunique() == 12_932
    assert near(reviews["reviewText"].str.len().mean(), 382)
    joined = reviews.merge(metadata, on="asin")
    assert near(joined["description"].str.len().mean(), 283)
    assert near(metadata["description"].str.len().mean(), 283)
    assert joined["description"].nunique() == 144
    assert joined["Format"].nunique() == 16
    assert near(joined["Format"].str.len().mean(), 8.9)
    assert reviews["verified"].dtype == bool
    assert reviews["verified"].sum() == round(15_014 * 8_874 / 15_000)
    assert reviews["overall"].dtype == "int64"
    assert set(reviews["overall"]) == {1, 2, 3, 4, 5}
    assert reviews["overall"].mean() > 4.0


def test_duplicates_copy_the_whole_review(full):
    reviews = full["reviews"]
    texts = reviews.drop_duplicates("reviewText")
    whole = reviews.drop_duplicates(["asin", "reviewText", "verified", "overall"])
    assert len(texts) == len(whole) == 12_932
    assert reviews["review_id"].is_unique


def test_join_integrity(full):
    reviews, metadata = full["reviews"], full["metadata"]
    assert metadata["asin"].is_unique
    assert set(reviews["asin"]) == set(metadata["asin"])
    assert set(metadata["Format"]) == set(FORMATS)
    assert all(len(a) == 10 for a in metadata["asin"])


def test_deterministic_in_seed(full):
    again = products(seed=0)
    for name in full:
        pd.testing.assert_frame_equal(full[name], again[name])
    other = products(seed=1)
    assert not other["reviews"].equals(full["reviews"])
    assert not other["metadata"].equals(full["metadata"])


@pytest.mark.parametrize("num_rows", [1, 2, 10, 100, 1_000])
def test_small_sizes(num_rows):
    data = products(num_rows, seed=3)
    reviews, metadata = data["reviews"], data["metadata"]
    assert len(reviews) == num_rows
    assert len(metadata) == max(2, round(144 * num_rows / 15_014))
    assert set(reviews["asin"]) <= set(metadata["asin"])
    assert reviews["reviewText"].nunique() == max(1, round(12_932 * num_rows / 15_014))
    assert metadata["Format"].nunique() == min(16, len(metadata))


def test_rejects_non_positive_size():
    with pytest.raises(ValueError, match="num_rows must be >= 1, got -5"):
        products(-5)
