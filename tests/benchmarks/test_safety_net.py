"""`benchmarks.safety_net`: the greedy and the safety net timed apart on one table, the
greedy left unpatched afterwards, and the markdown's verdict against the 20% target."""

import llm_assets.optimizer as optimizer
from benchmarks import safety_net


def test_the_net_is_timed_apart_from_the_greedy_and_judged_against_the_target():
    original = optimizer.ggr_schedule
    row = safety_net.measure("synthetic:600", repeat=2)
    assert optimizer.ggr_schedule is original
    assert row["rows"] == 600 and row["fields"] == 10
    assert row["greedy_cpu_s"] > 0 and row["safety_net_cpu_s"] > 0
    assert abs(row["ratio"] - row["safety_net_cpu_s"] / row["greedy_cpu_s"]) < 0.01
    assert row["kept"] in ("ggr", "column_stats", "original")
    assert row["authors_scored"] is False  # 6,000 cells: beyond the port's budget
    slow, fast = dict(row, ratio=0.25), dict(row, ratio=0.2)
    text = safety_net.markdown({"repeat": 2, "tables": [slow, fast]})
    assert "| 25% | MISSED |" in text and "| 20% | met |" in text
    assert "Met on 1 of 2 tables." in text


def test_the_small_look_alikes_are_within_the_port_budget():
    """`SMALL_SPECS` are measured with the authors' QuickGreedy in the net."""
    for spec in safety_net.SMALL_SPECS:
        row = safety_net.measure(spec, repeat=1)
        assert row["authors_scored"] is True
        assert row["rows"] * row["fields"] <= optimizer.AUTHORS_CELLS
    text = safety_net.markdown({"repeat": 1, "tables": [row]})
    assert f"| {row['table']} |" in text and "| yes |" in text
