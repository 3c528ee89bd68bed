"""The per-stage memory section of `benchmarks.loader` (the baseline of the 10M-row `plan`
target): on a 2,000-row table, every stage of `llm-assets plan` is reported with positive
seconds, peak and RSS after; the real command's peak is there to compare; and a stage the
command no longer goes through, or a figure that is not positive, is caught."""

import copy

import pytest

from benchmarks import loader

ROWS = 2_000


@pytest.fixture(scope="module")
def memory():
    return loader.memory_report([ROWS])  # a fresh process, then the real command


def test_every_stage_of_plan_is_metered_in_a_fresh_process(memory):
    (entry,) = memory["sizes"]
    assert loader.check_memory(entry) == []
    names = [s["stage"] for s in entry["stages"]]
    assert sorted(names) == sorted(entry["expected_stages"])
    assert set(loader.REQUIRED) <= set(names) and names[0] == loader.OTHER
    for stage in entry["stages"]:
        assert stage["seconds"] > 0 and stage["calls"] == 1
        assert stage["peak_mb"] >= stage["rss_after_mb"] > 0 and stage["rss_before_mb"] > 0
    assert entry["peak_mb"] == max(s["peak_mb"] for s in entry["stages"])
    assert entry["peak_mb"] > entry["baseline_rss_mb"] > 0
    assert 0 < entry["n_requests"] <= entry["rows_to_first_llm"] < ROWS  # pushdown, dedup
    # the sim's approximate tokenizer never gives more tokens than characters: the context
    # fit counts no prompt shorter than the limit in characters (every one here), the sim
    # engine's own count is the only one (before: one count per request, twice in all)
    assert entry["token_counts"] == 0 and entry["token_count_s"] == 0
    assert entry["cli"]["wall_s"] > 0 and entry["cli"]["max_rss_mb"] > entry["baseline_rss_mb"]
    if "clear_refs" in memory["peak_method"]:  # Linux: the peak is reset per stage
        assert min(s["peak_mb"] for s in entry["stages"]) < entry["peak_mb"]
        assert all(0 <= s["grew_mb"] <= s["peak_mb"] for s in entry["stages"])


def test_the_extrapolation_is_labelled_and_the_markdown_names_every_stage(memory):
    fit = memory["extrapolation"]
    assert fit["rows"] == 10_000_000 and "not measured" in fit["label"]
    names = memory["sizes"][0]["expected_stages"]
    assert set(fit["stages"]) == set(names)
    assert fit["stage_peak_mb"]["at_rows"] is None  # one size fits no line
    markdown = "\n".join(loader.memory_markdown(memory))
    assert "EXTRAPOLATED" in markdown and "real command" in markdown and "n/a" in markdown
    assert all(f"| {name} |" in markdown for name in names)


def test_the_extrapolation_is_the_least_squares_line(memory):
    (entry,) = memory["sizes"]
    sizes = []
    for rows in (1_000, 2_000, 4_000):  # 100 MB + 1 kB per row, 1 s per 1,000 rows
        size = copy.deepcopy(entry)
        size["rows"] = rows
        for stage in size["stages"]:
            stage["seconds"], stage["peak_mb"] = rows / 1_000, 100 + rows / 1_000
        size["peak_mb"], size["seconds_total"] = 100 + rows / 1_000, rows / 1_000
        size["cli"] = {"wall_s": rows / 500, "max_rss_mb": 100 + rows / 1_000}
        sizes.append(size)
    fit = loader.extrapolate(sizes)
    assert fit["fit_rows"] == [1_000, 2_000, 4_000]
    assert fit["stage_peak_mb"] == {
        "per_million_rows": 1000.0,
        "intercept": 100.0,
        "at_rows": 10_100.0,
    }
    assert fit["cli_wall_s"]["at_rows"] == 20_000.0
    assert fit["stages"]["load"]["seconds"]["at_rows"] == 10_000.0


def test_a_stage_the_command_does_not_go_through_is_caught(tmp_path, monkeypatch):
    """Planted break: the benchmark meters a function `plan` does not call in place of the
    dedup (as when the product's dedup moves): the run reports no dedup stage."""
    csv, sql = tmp_path / "t.csv", tmp_path / "q.sql"
    loader.write_plan_table(csv, ROWS)
    sql.write_text(loader.PLAN_SQL, encoding="utf-8")
    specs = loader.stage_specs()
    planted = [
        (name, "answers_by_row", loader.PIPELINE) if name == "plan: dedup" else spec
        for spec in specs
        for name in [spec[0]]
    ]
    assert planted != specs
    monkeypatch.setattr(loader, "stage_specs", lambda: planted)
    entry = loader.measure_stages(csv, sql)
    entry["cli"] = {"wall_s": 1.0, "max_rss_mb": 1.0}
    assert loader.check_memory(entry) == ["stage 'plan: dedup' missing"]


def test_a_function_that_moved_is_an_error_not_a_silent_gap(monkeypatch):
    specs = [("plan: dedup", "no_such_function", loader.PIPELINE)]
    monkeypatch.setattr(loader, "stage_specs", lambda: specs)
    with pytest.raises(AttributeError, match="no_such_function"):
        with loader.metered_stages(loader.StageMeter()):
            pass


def test_figures_that_are_not_positive_are_caught(memory):
    (entry,) = memory["sizes"]
    for key, value, problem in [
        ("seconds", 0.0, "seconds is 0.0, not positive"),
        ("peak_mb", 0.0, "peak_mb is 0.0, not positive"),
        ("rss_after_mb", None, "rss_after_mb is None, not positive"),
        ("peak_mb", 1.0, "peak 1.0 < RSS after"),
    ]:
        broken = copy.deepcopy(entry)
        broken["stages"][3][key] = value
        assert any(problem in p for p in loader.check_memory(broken)), (key, value)
    broken = copy.deepcopy(entry)
    broken["cli"]["max_rss_mb"] = 0
    assert loader.check_memory(broken) == ["cli max_rss_mb is 0, not positive"]
    broken = copy.deepcopy(entry)
    broken["stages"].append({**entry["stages"][0], "stage": "retrieve"})
    assert loader.check_memory(broken) == ["unexpected stage(s) ['retrieve']"]


@pytest.mark.parametrize(
    ("wall", "rss", "verdicts"),
    [(250.0, 7_000.0, ("met", "met")), (301.0, 9_000.0, ("MISSED", "MISSED"))],
)
def test_a_measured_10m_row_size_is_judged_against_the_target_not_extrapolated(
    memory, wall, rss, verdicts
):
    big = copy.deepcopy(memory["sizes"][0])
    big["rows"], big["cli"] = 10_000_000, {"wall_s": wall, "max_rss_mb": rss}
    measured = {**memory, "sizes": [memory["sizes"][0], big]}
    measured["extrapolation"] = loader.extrapolate(measured["sizes"])
    markdown = "\n".join(loader.memory_markdown(measured))
    assert "EXTRAPOLATED" not in markdown and "10M column" not in markdown
    assert (
        f"took {wall:,.0f} s (target 300 s: {verdicts[0]}) and peaked at {rss:,.0f} MB "
        f"(target 8,192 MB: {verdicts[1]})" in markdown
    )
    assert "every request simulated" in markdown
