"""A fast smoke version of the Q1-Q5 ladder benchmark: every rung runs through the real job
(small data), the rows have the benchmark's shape, and the ladder is monotone where it must be."""

import pytest

from benchmarks.lib.ladder import RUNGS, check_ladder, groups_for, run_ladder

FIELDS = {
    "query",
    "dataset",
    "rung",
    "rows_in",
    "n_requests",
    "token_hit_rate",
    "engine_time_s",
    "speedup_vs_no_cache",
    "cost_usd_self_hosted",
    "cost_usd_openai_gpt4o_mini",
    "wall_s",
}


@pytest.mark.parametrize("query", ["q2", "q3"])
def test_ladder_smoke(home, query):
    rows = run_ladder(groups_for([query], ["movies"]), size=150)
    assert [r["rung"] for r in rows] == list(RUNGS)
    for row in rows:
        assert FIELDS <= set(row)
        assert 0 <= row["token_hit_rate"] <= 1 and row["engine_time_s"] > 0
    assert check_ladder(rows) == []
    by = {r["rung"]: r for r in rows}
    assert by["no_cache"]["token_hit_rate"] == 0 and by["no_cache"]["speedup_vs_no_cache"] == 1
    assert by["cache_ggr_dedup"]["n_requests"] <= by["cache_ggr"]["n_requests"]
    assert by["cache_ggr_dedup_pushdown"]["rows_to_llm"] < by["cache_ggr_dedup"]["rows_to_llm"]
    assert by["cache_ggr_dedup_pushdown"]["speedup_vs_no_cache"] > 1


def test_check_ladder_reports_a_broken_invariant():
    base = {"group": "q2", "dataset": "movies", "rows_passed": 5, "rows_to_llm": 10}
    rows = [
        {**base, "rung": "no_cache", "n_requests": 10},
        {**base, "rung": "cache_ggr", "n_requests": 10},
        {**base, "rung": "cache_ggr_dedup", "n_requests": 12},
        {**base, "rung": "cache_ggr_dedup_pushdown", "n_requests": 8, "rows_to_llm": 11},
    ]
    problems = check_ladder(rows)
    assert any("dedup added requests" in p for p in problems)
    assert any("pushdown added rows" in p for p in problems)
