"""Three guards that had no test: planting a bug in each left every test green (issue 22 item
11). Each test here goes red when its guard is broken:

- the landing sensor's run key holds the file's modification time, so a landed file written
  again is run again (and an unchanged one never twice);
- the self-hosted cost bills every GPU of a tensor-parallel deployment, not one;
- the blocking `every_row_accounted_for` check fails a row marked `answered` that lacks an
  answer from an LLM call it reached.
"""

import os
import time

import dagster as dg
import pandas as pd
import pytest

from llm_assets import llm_query_assets
from llm_assets.assets import checks
from llm_assets.assets.definition import QueryDefinition
from llm_assets.optimizer.cost import GPU_USD_PER_HOUR
from llm_assets.pipeline.pricing import engine_costs
from llm_assets.pipeline.rows import ROW
from resources.engine import EngineWrapper, Request
from resources.llm_resources import SimulatedEngineResource
from resources.warehouse.store import warehouse_io_manager

# ---- landing: a rewritten file is run again ------------------------------------------------

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS summary FROM reviews r"


def land(path, text: str, age_s: float) -> None:
    """Write `path` with a modification time `age_s` seconds in the past (settled)."""
    path.write_text(text)
    stamp = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(stamp, stamp))


def test_a_landed_file_written_again_is_run_again_and_an_unchanged_one_never_twice(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    folder = tmp_path / "landing"
    folder.mkdir()
    defs = llm_query_assets("q", SQL, sources={"reviews": "unused.csv"}, landing=str(folder))
    (sensor,) = defs.sensors
    land(folder / "a.csv", "id,review\n1,good\n", age_s=3600)
    land(folder / "b.csv", "id,review\n2,bad\n", age_s=3600)

    def requests(instance) -> dict[str, str]:
        """run key -> partition of one sensor evaluation."""
        result = sensor(
            dg.build_sensor_context(
                instance=instance, resources={"io_manager": warehouse_io_manager()}
            )
        )
        return {r.run_key: r.partition_key for r in result.run_requests}

    with dg.instance_for_test() as instance:
        first = requests(instance)
        assert sorted(first.values()) == ["a.csv", "b.csv"]
        assert requests(instance) == first  # nothing changed: the same keys, no new run
        land(folder / "a.csv", "id,review\n1,fine\n", age_s=1800)  # same size, new mtime
        again = requests(instance)
    new = {key: partition for key, partition in again.items() if key not in first}
    assert list(new.values()) == ["a.csv"]  # Dagster launches exactly this one again
    assert {p: k for k, p in again.items()}["b.csv"] in first


# ---- self-hosted cost: every GPU of a tensor-parallel deployment -------------------------------


@pytest.mark.parametrize(
    ("gpu", "model", "tensor_parallel_size", "gpus"),
    [
        ("A100-40GB", "llama-3-70b", 4, 4),
        ("H200", "llama-3-70b", None, 2),  # the smallest degree that fits: 2
        ("L4", "llama-2-7b", None, 1),
    ],
)
def test_self_hosted_cost_bills_every_gpu_of_a_tensor_parallel_deployment(
    gpu, model, tensor_parallel_size, gpus
):
    resource = SimulatedEngineResource(
        gpu=gpu, model=model, tensor_parallel_size=tensor_parallel_size
    )
    engine = resource.engine  # what the assets and the CLI price
    result = engine.run("q", [Request(str(i), f"Review {i}: good film.", 4) for i in range(8)])
    seconds = result.stats.engine_time_s
    assert seconds > 0 and engine.hardware == (f"{gpus}x{gpu}" if gpus > 1 else gpu)
    expected = GPU_USD_PER_HOUR[gpu] * gpus * seconds / 3600
    for priced in (engine, EngineWrapper(engine)):
        cost = engine_costs(priced, result.stats)["cost_usd_self_hosted"]
        assert cost == pytest.approx(expected, rel=1e-9)


# ---- every_row_accounted_for: an answered row has its answers -----------------------------------

TWO_FILTERS = (
    "SELECT t.movie FROM t WHERE LLM('Long {review}', t.review) = 'Yes' "
    "AND LLM('Kids? {movie}', t.movie) = 'Yes'"
)


def result_frame(**answers) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(result, base) of 4 answered rows with the given answer columns."""
    n = 4
    base = pd.DataFrame({ROW: range(n)})
    result = base.assign(status=["answered"] * n, reason=[None] * n, passed=[True] * n, **answers)
    return result, base


def test_the_accounting_check_fails_an_answered_row_without_its_answer():
    qdef = QueryDefinition.build("q", SQL, {"reviews": "reviews.csv"})
    good, base = result_frame(summary=["a", "b", "", "d"])  # an empty answer is an answer
    assert checks.accounting_problems(good, base, qdef.query) == []
    lost = good.assign(summary=["a", None, "", None])
    assert checks.accounting_problems(lost, base, qdef.query) == [
        "2 answered rows without an answer from summary (rows [1, 3])"
    ]
    failed = lost.assign(status=["answered", "failed", "answered", "skipped"], reason="x")
    assert checks.accounting_problems(failed, base, qdef.query) == []
    gone = good.drop(columns=["summary"])
    assert checks.accounting_problems(gone, base, qdef.query) == [
        "no column 'summary' for the answers of LLM call summary"
    ]


def test_a_row_an_llm_filter_drops_needs_no_later_answer_in_the_order_the_calls_ran():
    qdef = QueryDefinition.build("two", TWO_FILTERS, {"t": "t.csv"})
    first, second = qdef.query.llm_calls  # llm_1 (long review), llm_2 (kids)
    # row 0 passes both; row 1 is dropped by the first call that ran; row 2 lost an answer
    result, base = result_frame(llm_1=["Yes", "No", "Yes", None], llm_2=["Yes", None, None, None])
    result = result.assign(status=["answered", "answered", "answered", "failed"])
    written = checks.accounting_problems(result.assign(reason="r"), base, qdef.query)
    assert written == ["1 answered rows without an answer from llm_2 (rows [2])"]
    # run the other way round (llm_filter_order chose llm_2 first): row 1 reached llm_2
    order = pd.DataFrame({"call": ["llm_2", "llm_1"]})
    calls = qdef.run_order(order)
    assert calls == (second, first)
    swapped = checks.accounting_problems(result.assign(reason="r"), base, qdef.query, calls)
    assert swapped == ["2 answered rows without an answer from llm_2 (rows [1, 2])"]


def check_of(defs, name="every_row_accounted_for"):
    return next(c for c in defs.asset_checks for key in c.check_keys if key.name == name)


def test_the_blocking_dagster_check_reads_the_answers_and_the_runs_order():
    one = llm_query_assets("q", SQL, sources={"reviews": {"asset": "raw/reviews"}})
    result, base = result_frame(summary=["a", "b", "c", "d"])
    check = check_of(one)
    assert check(result=result, base=base).passed
    bad = check(result=result.assign(summary=["a", None, "c", "d"]), base=base)
    assert not bad.passed and "without an answer from summary" in bad.metadata["problems"].text
    two = llm_query_assets("two", TWO_FILTERS, sources={"t": {"asset": "raw/t"}})
    check = check_of(two)
    kids_first = pd.DataFrame({"call": ["llm_2", "llm_1"]})
    dropped_by_kids, base = result_frame(llm_1=[None] * 4, llm_2=["No"] * 4)
    dropped_by_kids = dropped_by_kids.assign(passed=False, reason="LLM filter llm_2 is false")
    assert check(result=dropped_by_kids, base=base, filter_order=kids_first).passed
    written_order = pd.DataFrame({"call": ["llm_1", "llm_2"]})
    assert not check(result=dropped_by_kids, base=base, filter_order=written_order).passed
