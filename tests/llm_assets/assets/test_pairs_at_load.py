"""A semantic join over `max_pairs` is refused when the definitions load (`llm_query_assets`,
the component as `dg check defs` loads it), in the one line the run and `llm-assets plan` give,
when its source files are readable then (issue 35, item 3: it passed `dg check defs` and
failed at launch). Under the bound it loads; an upstream-asset side is counted by the run."""

from pathlib import Path

import pytest
import yaml

from llm_assets import llm_query_assets
from tests.llm_assets.assets.test_sources_at_load import load_error

JOIN = (
    "SELECT r.id, m.title FROM reviews r JOIN movies m ON "
    "LLM('Is {review} about {info}?', r.review, m.info, output => 'choice(yes,no)') = 'yes'"
)
TOP_K = JOIN.replace(" ON ", " ON m.info IN similarity_search(r.review, k => 2) AND ")


def write_tables(folder: Path, reviews: int = 30, movies: int = 20) -> dict[str, Path]:
    (folder / "reviews.csv").write_text(
        "id,review\n" + "".join(f"{i},a film about cats {i}\n" for i in range(reviews))
    )
    (folder / "movies.csv").write_text(
        "title,info\n" + "".join(f"t{i},about cats and dogs {i}\n" for i in range(movies))
    )
    return {"reviews": folder / "reviews.csv", "movies": folder / "movies.csv"}


def one_line(message: str, *facts: str) -> None:
    assert "\n" not in message, message
    for fact in facts:
        assert fact in message, (fact, message)


def test_the_factory_refuses_a_join_over_max_pairs_at_load(tmp_path):
    files = {t: str(p) for t, p in write_tables(tmp_path).items()}
    with pytest.raises(ValueError) as refused:
        llm_query_assets("sj", JOIN, sources=files, max_pairs=500)
    one_line(str(refused.value), "query 'sj'", "600 candidate pairs", "max_pairs=500")
    assert llm_query_assets("sj", JOIN, sources=files, max_pairs=600).assets


def test_top_k_blocking_is_counted_as_the_run_counts_it(tmp_path):
    files = {t: str(p) for t, p in write_tables(tmp_path).items()}
    with pytest.raises(ValueError) as refused:
        llm_query_assets("sj", TOP_K, sources=files, max_pairs=59)
    one_line(str(refused.value), "60 candidate pairs", "max_pairs=59", "a smaller k")
    assert llm_query_assets("sj", TOP_K, sources=files, max_pairs=60).assets


def test_the_component_refuses_it_as_dg_check_defs_loads_it(tmp_path, monkeypatch):
    files = write_tables(tmp_path)
    defs_yaml = yaml.safe_dump(
        {
            "type": "llm_assets.LLMQueryComponent",
            "attributes": {
                "sql": JOIN,
                "sources": {"reviews": "reviews.csv", "movies": "movies.csv"},
                "options": {"max_pairs": 100},
            },
        }
    )
    message = load_error(
        tmp_path, monkeypatch, defs_yaml, {"reviews.csv": files["reviews"],
                                           "movies.csv": files["movies"]}
    )  # fmt: skip
    one_line(message, "query 'my_reviews'", "600 candidate pairs", "max_pairs=100")
