"""The fault matrix, smoke size: real server subprocesses, a real kill -9 of a real client."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.lib.faults import SMOKE_FAULTS, markdown_table, run_fault_matrix

pytestmark = pytest.mark.slow  # servers in subprocesses: `make test-slow`


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
    from benchmarks.lib.fault_setup import ClientSettings
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
    usage = faults["implausible-usage"]
    assert usage["implausible_rows"] == 4 and usage["failed"] == 4, usage  # rows 7, 27, 47, 67
    assert usage["implausible_failed_with_reason"] == 4 and usage["implausible_answered"] == 0
    assert "usage.prompt_tokens 4611686018427387904" in usage["implausible_reason_example"]
    assert usage["recorded_cost_usd"] <= usage["cost_bound_usd"], usage


def product_case(name: str, rows: int, tmp_path: Path) -> dict:
    """One product-path case through the matrix, held to the benchmark's acceptance."""
    from benchmarks.faults import _acceptance

    result = run_fault_matrix(rows, faults=[name], workdir=tmp_path, log=lambda _: None)
    assert _acceptance(result) == [], result
    row = result["faults"][name]
    assert row["lost"] == 0 and row["mixed"] == 0, row
    assert row["answered"] == row["rows_in"], row
    return row


def test_a_stray_byte_is_refused_by_default_and_replaced_alone_on_request(tmp_path: Path) -> None:
    row = product_case("stray-byte", 60, tmp_path)
    assert row["default_refused"] and "line 32, column 2 ('review')" in row["default_error"]
    assert row["replaced_rows"] == 1 and row["faults_injected"]["accented_rows"] == 30


def test_a_landed_file_is_run_once_whole_never_half_written(tmp_path: Path) -> None:
    row = product_case("half-written", 40, tmp_path)
    assert row["rows_in"] == 50 and row["faults_injected"]["looks_while_writing"] == 3
    assert row["runs_requested_early"] == 0
    assert row["runs_per_file"] == {"a.csv": 1, "b.csv": 1}, row


@pytest.mark.slow
def test_five_runs_at_once_each_hold_their_own_rows(tmp_path: Path) -> None:
    row = product_case("concurrent-runs-5", 100, tmp_path)
    assert row["sizes"] == [10, 15, 20, 25, 50] and row["runs_failed"] == 0, row
