import pytest

from llm_assets.data import generate
from llm_assets.pipeline.retrieval import TfidfRetriever, build_retriever


def test_tfidf_finds_each_questions_own_context():
    squad = generate("squad", 200, seed=1)["squad"]
    answerable = squad[~squad["is_impossible"]]
    corpus = sorted(set(squad["context"]))
    index = TfidfRetriever(corpus)
    hits = index.search(answerable["question"].tolist(), k=3)
    assert hits.shape == (len(answerable), 3)
    top1 = [corpus[i] for i in hits[:, 0]]
    assert (answerable["context"].to_numpy() == top1).mean() > 0.8
    assert all(len(set(row)) == 3 for row in hits.tolist())


def test_k_is_capped_by_the_corpus_and_errors_name_the_problem():
    assert TfidfRetriever(["a cat", "a dog"]).search(["cat"], k=5).shape == (1, 2)
    with pytest.raises(ValueError, match="corpus is empty"):
        TfidfRetriever([])
    with pytest.raises(ValueError, match=r"unknown retriever 'bm25'; expected one of"):
        build_retriever("bm25", ["x"])
