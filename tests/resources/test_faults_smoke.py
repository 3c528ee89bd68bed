"""The fault matrix, smoke size: real server subprocesses, a real kill -9 of a real client."""

from __future__ import annotations

from pathlib import Path

from benchmarks.lib.faults import SMOKE_FAULTS, markdown_table, run_fault_matrix


def test_smoke_matrix_loses_nothing_and_a_kill_costs_at_most_one_chunk(tmp_path: Path) -> None:
    result = run_fault_matrix(smoke=True, workdir=tmp_path, log=lambda _: None)
    faults = result["faults"]
    assert list(faults) == list(SMOKE_FAULTS)
    chunk = result["settings"]["chunk_size"]
    for name, row in faults.items():
        assert row["lost"] == 0, (name, row)
        assert row["rows_in"] == row["answered"] + row["skipped"] + row["failed"], (name, row)
        assert row["requests_resent_after_rerun"] <= chunk, (name, row)
        if name not in ("none", "kill9"):
            assert sum(row["faults_injected"].values()) > 0, (name, row)
    # with 10% 503 and retries on, every row ends answered; so with the other faults here
    assert all(row["answered"] == row["rows_in"] for row in faults.values()), faults
    kill = faults["kill9"]
    assert 0 < kill["killed_after_rows_committed"] < kill["rows_in"], kill
    assert kill["cache_entries_at_kill"] >= kill["killed_after_rows_committed"]
    assert kill["requests_sent"] <= kill["rows_in"] + chunk
    assert "| kill9 |" in markdown_table(result)


def test_hostile_server_cases_lose_nothing_and_end_within_their_bound(tmp_path: Path) -> None:
    from benchmarks.faults import _acceptance
    from benchmarks.lib.faults import ClientSettings
    from benchmarks.lib.hostile_faults import HOSTILE_CASES

    settings = ClientSettings(chunk_size=20, timeout_s=0.5, max_concurrency=4)
    result = run_fault_matrix(
        80, faults=list(HOSTILE_CASES), settings=settings, workdir=tmp_path, log=lambda _: None
    )
    assert _acceptance(result) == []
    faults = result["faults"]
    for name in ("drip-feed", "endless-body", "dead-server"):
        assert faults[name]["failed"] == 80 and faults[name]["wall_s"] <= faults[name]["bound_s"]
    assert faults["malformed-200"]["answered"] == 80
    assert faults["malformed-200"]["faults_injected"]["malformed"] > 0
    assert faults["wrong-key"]["requests_sent"] <= settings.max_concurrency
