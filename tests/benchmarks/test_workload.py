"""The relQuery workload generator (relserve.txt §5.1)."""

from __future__ import annotations

import pytest

from benchmarks.lib.workload import TEMPLATES, WorkloadConfig, generate_workload
from llm_assets.data import movie_reviews


def test_templates_are_the_papers_five() -> None:
    assert [t.kind for t in TEMPLATES] == [
        "filtering",
        "classification",
        "rating",
        "summarization",
        "open",
    ]
    assert [t.max_tokens for t in TEMPLATES] == [5, 10, 5, 50, 100]


def test_shape_sizes_and_arrivals() -> None:
    cfg = WorkloadConfig(rate=2.0, num_relqueries=60, table_rows=2000, seed=1)
    wl = generate_workload(cfg)
    assert len(wl) == 60 and len({rq.relquery_id for rq in wl}) == 60
    sizes = [len(rq.requests) for rq in wl]
    assert min(sizes) >= 1 and max(sizes) <= 100 and 30 < sum(sizes) / len(sizes) < 70
    arrivals = [rq.arrival_s for rq in wl]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    assert 15 < arrivals[-1] < 50  # 60 arrivals at 2/s: about 30 s
    kinds = {rq.relquery_id.split("-", 1)[1] for rq in wl}
    assert kinds == {t.kind for t in TEMPLATES}
    for rq in wl:
        t = next(t for t in TEMPLATES if rq.relquery_id.endswith(t.kind))
        assert all(r.max_tokens == t.max_tokens and r.output == t.output for r in rq.requests)
        assert all(r.prompt.startswith(t.instruction) for r in rq.requests)
        assert len({r.id for r in rq.requests}) == len(rq.requests)


def test_deterministic_and_common_random_numbers_across_rates() -> None:
    a = generate_workload(WorkloadConfig(rate=0.5, num_relqueries=20, table_rows=500))
    b = generate_workload(WorkloadConfig(rate=0.5, num_relqueries=20, table_rows=500))
    c = generate_workload(WorkloadConfig(rate=1.0, num_relqueries=20, table_rows=500))
    assert a == b
    assert [rq.requests for rq in a] == [rq.requests for rq in c]
    assert [rq.arrival_s for rq in a] == pytest.approx([2 * rq.arrival_s for rq in c])


def test_prompts_render_rows_of_the_llm_assets_movie_table() -> None:
    table = movie_reviews(500, seed=3)
    for rq in generate_workload(WorkloadConfig(num_relqueries=10, table_rows=500, seed=3)):
        template = next(t for t in TEMPLATES if rq.relquery_id.endswith(t.kind))
        for request in rq.requests:
            row = table.iloc[int(request.id.rsplit("/", 1)[1])]
            assert request.prompt == template.render(row.astype(str).to_dict())


def test_config_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="rate must be > 0.*got 0"):
        WorkloadConfig(rate=0)
    with pytest.raises(ValueError, match="min_requests=5 max_requests=2"):
        WorkloadConfig(min_requests=5, max_requests=2)
