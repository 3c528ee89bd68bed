import pandas as pd
import pytest

from llm_assets.data import movies


def near(value, target, tolerance=0.10):
    return abs(value - target) <= tolerance * target


@pytest.fixture(scope="module")
def full():
    return movies()


def test_full_size_statistics(full):
    reviews, table = full["reviews"], full["movies"]
    assert list(reviews.columns) == [
        "rotten_tomatoes_link",
        "review_content",
        "review_type",
        "review_id",
    ]
    assert list(table.columns) == ["rotten_tomatoes_link", "movie_title", "movie_info"]
    assert len(reviews) == 15_018
    assert len(table) == 68
    assert reviews["review_content"].nunique() == 14_977
    assert near(reviews["review_content"].str.len().mean(), 132)
    joined = reviews.merge(table, on="rotten_tomatoes_link")
    assert near(joined["movie_info"].str.len().mean(), 407)
    assert near(table["movie_info"].str.len().mean(), 407)
    assert joined["movie_info"].nunique() == 68
    assert set(reviews["review_type"]) == {"Fresh", "Rotten"}
    assert (reviews["review_type"] == "Fresh").sum() == round(15_018 * 10_461 / 15_008)
    assert near(reviews["review_type"].str.len().mean(), 5.3, 0.02)


def test_exact_duplicates_are_whole_reviews_of_one_movie(full):
    reviews = full["reviews"]
    prompt = reviews[["rotten_tomatoes_link", "review_content", "review_type"]]
    assert prompt.duplicated().sum() == 15_018 - 14_977
    assert reviews["review_id"].is_unique


def test_join_integrity_and_keys(full):
    reviews, table = full["reviews"], full["movies"]
    assert table["rotten_tomatoes_link"].is_unique and table["movie_title"].is_unique
    assert set(reviews["rotten_tomatoes_link"]) == set(table["rotten_tomatoes_link"])
    assert all(link.startswith("m/") for link in table["rotten_tomatoes_link"])


def test_popularity_is_skewed_and_rows_are_not_grouped(full):
    counts = full["reviews"]["rotten_tomatoes_link"].value_counts()
    assert counts.max() > 4 * counts.median()
    # Shuffled: far more link changes between consecutive rows than there are movies.
    links = full["reviews"]["rotten_tomatoes_link"]
    assert (links != links.shift()).sum() > 10_000


def test_deterministic_in_seed(full):
    again = movies(seed=0)
    for name in full:
        pd.testing.assert_frame_equal(full[name], again[name])
    other = movies(seed=1)
    assert not other["reviews"].equals(full["reviews"])
    assert not other["movies"].equals(full["movies"])


@pytest.mark.parametrize("num_rows", [1, 2, 10, 100, 1_000])
def test_small_sizes(num_rows):
    data = movies(num_rows, seed=3)
    reviews, table = data["reviews"], data["movies"]
    assert len(reviews) == num_rows
    assert len(table) == max(2, round(68 * num_rows / 15_018))
    assert set(reviews["rotten_tomatoes_link"]) <= set(table["rotten_tomatoes_link"])
    assert reviews["review_content"].nunique() == max(1, round(14_977 * num_rows / 15_018))
    if num_rows >= len(table):
        assert reviews["rotten_tomatoes_link"].nunique() == len(table)


def test_rejects_non_positive_size():
    with pytest.raises(ValueError, match="num_rows must be >= 1, got 0"):
        movies(0)
