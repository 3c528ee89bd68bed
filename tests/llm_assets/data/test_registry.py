import pandas as pd
import pytest

from llm_assets.data import DATASETS, generate


def test_registry_names():
    assert set(DATASETS) == {"movies", "products", "squad"}


@pytest.mark.parametrize(
    ("name", "tables", "key"),
    [
        ("movies", {"reviews", "movies"}, "reviews"),
        ("products", {"reviews", "metadata"}, "reviews"),
        ("squad", {"squad"}, None),
    ],
)
def test_generate_with_size(name, tables, key):
    data = generate(name, 40, seed=5)
    assert set(data) == tables
    if key:
        assert len(data[key]) == 40
    else:
        assert (~data["squad"]["is_impossible"]).sum() == 40
    again = generate(name, 40, seed=5)
    for table in data:
        pd.testing.assert_frame_equal(data[table], again[table])


def test_generate_default_size_is_the_papers():
    assert len(generate("movies")["reviews"]) == 15_018


def test_unknown_name_lists_valid_names():
    with pytest.raises(
        ValueError, match=r"unknown dataset 'film'.*\['movies', 'products', 'squad'\]"
    ):
        generate("film")
