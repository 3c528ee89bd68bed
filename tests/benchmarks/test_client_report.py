"""The client-throughput report's arithmetic (`benchmarks.lib.client_report`): each path's
one-core ceiling, and what N replicas ask of the client."""

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.lib.client_report import TOP_RUNG, ceilings, markdown, replica_demand

_ROW = st.fixed_dictionaries(
    {
        "client_path": st.sampled_from(["lean", "aiohttp", "httpx"]),
        "client_bound_rps": st.floats(1, 1e4),
    }
)


@given(st.lists(_ROW, min_size=1, max_size=20))
def test_a_ceiling_spans_exactly_its_paths_rates(rows):
    bounds = ceilings(rows)
    assert set(bounds) == {r["client_path"] for r in rows}
    for path, (lo, hi) in bounds.items():
        rates = [r["client_bound_rps"] for r in rows if r["client_path"] == path]
        assert (lo, hi) == (min(rates), max(rates))


def test_demand_is_the_top_rungs_rate_times_the_replicas():
    queries = {
        "results": [
            {"query": "q1", "dataset": "m", "rung": "no_cache", "n_requests": 100,
             "engine_time_s": 50.0},
            {"query": "q1", "dataset": "m", "rung": TOP_RUNG, "n_requests": 90,
             "engine_time_s": 3.0},
        ]
    }  # fmt: skip
    assert replica_demand(queries, 8) == [("q1 m", 240.0)]
    rows = [{"backend": "stub", "client_path": "lean", "replicas": 1, "requests_per_s": 1,
             "client_cpu_ms_per_request": 4.0, "client_bound_rps": 250.0,
             "client_cpu_share": 1, "servers_cpu_share": 0, "errors": 0}]  # fmt: skip
    assert "| q1 m | 240 | yes/yes |" in markdown({"rows": rows}, queries)
    rows[0]["client_bound_rps"] = 239.0
    assert "| q1 m | 240 | no/no |" in markdown({"rows": rows}, queries)
