"""The field-order guard (`llm_assets.pipeline.guard`): it falls back to the written field
order when the answers depend on it, keeps the planned order when they do not, never pays for
the sample twice, and does nothing it cannot judge.

The engines here answer from the prompt by a rule the test knows (the simulated engine's
accounting, `tests.llm_assets.answering`): one whose answer depends on which field comes
first, one whose answer depends only on the question.
"""

from __future__ import annotations

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets import default_resources, llm_query_assets
from llm_assets.pipeline.guard import stratified_sample
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import plan_stage
from llm_assets.pipeline.rows import stage_input
from llm_assets.pipeline.run import prepare, run_query
from llm_assets.sql.compiler import compile_sql
from resources.engine import Request
from resources.llm_resources import LLMEngineResource, ResponseCacheResource
from resources.sim.engine import SimulatedEngine
from tests.llm_assets.answering import AnsweringEngine

SQL = (
    "SELECT t.id, LLM('Can the question be answered from the passage? {question} {passage}', "
    "t.question, t.passage, output => 'choice(yes,no)') AS a FROM t"
)
QUERY = compile_sql(SQL, name="g")
ROWS = 120
PASSAGE = "A long passage about the history of the river city, its bridges and its harbour. "


def table() -> pa.Table:
    return pa.table(
        {
            "id": [str(i) for i in range(ROWS)],
            "question": [f"What happened in year {1900 + i}?" for i in range(ROWS)],
            "passage": [PASSAGE * 3 + f"Chapter {i // 10}." for i in range(ROWS)],
        }
    )


class Scripted(AnsweringEngine):
    """Not the simulated engine as far as the guard is concerned: its answers mean something."""

    name = "scripted"


def first_field(request: Request) -> str:
    """'yes' when the question line comes before the passage line: the answer follows the
    field order."""
    question = request.prompt.find("\nquestion: ")
    return "yes" if question < request.prompt.find("\npassage: ") else "no"


def by_question(request: Request) -> str:
    """'yes' for an even year: the answer follows the question only."""
    year = int(request.prompt.split("year ")[1].split("?")[0])
    return "yes" if year % 2 == 0 else "no"


def _run(engine, threshold=0.8):
    options = QueryOptions(field_order_guard=threshold, guard_sample=24)
    run = run_query(QUERY, {"t": table()}, options, engine)
    return run, run.stages[0]


def _orders(plan: pd.DataFrame) -> set[str]:
    return set(plan["field_order"])


def test_the_plan_moves_the_passage_first_without_the_guard():
    run = run_query(QUERY, {"t": table()}, QueryOptions(), Scripted(first_field))
    assert _orders(run.stages[0].plan) == {"passage,question"}
    assert run.stages[0].guard.verdict == "off"


def test_it_falls_back_to_the_written_order_when_answers_follow_the_field_order():
    engine = Scripted(first_field)
    run, stage = _run(engine)
    assert stage.guard.verdict == "kept written order"
    assert stage.guard.agreement == 0.0 and stage.guard.compared == 24
    assert _orders(stage.plan) == {"question,passage"}
    assert set(run.result["a"]) == {"yes"}  # every answer from the written order
    # the sample: 24 inputs both ways; the written half is reused, never sent again
    assert engine.sent == 2 * 24 + (ROWS - 24)
    assert stage.cache_hits == 24 and stage.sent == ROWS - 24


def test_it_keeps_the_planned_order_when_answers_do_not_depend_on_it():
    engine = Scripted(by_question)
    run, stage = _run(engine)
    assert stage.guard.verdict == "kept planned order"
    assert stage.guard.agreement == 1.0 and stage.guard.agreement_low > 0.8
    assert _orders(stage.plan) == {"passage,question"}
    assert engine.sent == 2 * 24 + (ROWS - 24)
    assert stage.guard.requests == 48 and stage.guard.prompt_tokens > 0
    assert 0 < stage.guard.share_of_stage_chars < 0.5


def test_the_sample_costs_at_most_two_percent_of_a_ten_thousand_row_stage():
    rows = 10_000
    t = pa.table(
        {
            "id": [str(i) for i in range(rows)],
            "question": [f"What happened in year {i:05d}?" for i in range(rows)],
            "passage": [PASSAGE * 3 + f"Chapter {i // 10}." for i in range(rows)],
        }
    )
    run = run_query(QUERY, {"t": t}, QueryOptions(field_order_guard=0.8), Scripted(by_question))
    guard, stage = run.stages[0].guard, run.stages[0]
    assert guard.requests == 2 * QueryOptions().guard_sample
    assert guard.share_of_stage_chars <= 0.02, guard.report()
    # in tokens, against everything the stage and its sample were charged for
    stage_tokens = stage.stats.prompt_tokens + guard.prompt_tokens
    assert guard.prompt_tokens / 2 <= 0.02 * stage_tokens  # the half not reused


def test_the_simulated_engine_cannot_judge_and_changes_nothing():
    options = QueryOptions(field_order_guard=0.8)
    run = run_query(QUERY, {"t": table()}, options, SimulatedEngine())
    guard = run.stages[0].guard
    assert guard.verdict == "cannot judge" and "placeholders" in guard.reason
    assert guard.requests == 2 * options.guard_sample and guard.prompt_tokens == 0
    plain = run_query(QUERY, {"t": table()}, QueryOptions(), SimulatedEngine())
    pd.testing.assert_frame_equal(run.stages[0].plan, plain.stages[0].plan)


def test_inline_prompts_never_move_fields_so_nothing_is_sent():
    engine = Scripted(first_field)
    sql = SQL.replace("{question} {passage}", "{question} in {passage}")
    query = compile_sql(sql, name="g")
    options = QueryOptions(field_order_guard=0.8, prompt_style="inline")
    run = run_query(query, {"t": table()}, options, engine)
    assert run.stages[0].guard.verdict == "fields not moved"
    assert engine.sent == ROWS


def test_rows_only_keeps_every_prompt_as_written():
    call = QUERY.llm_calls[0]
    query, base, _ = prepare(QUERY, {"t": table()}, QueryOptions(), SimulatedEngine())
    rows = stage_input(base, query, [])
    _, written = plan_stage(
        query, call, rows, QueryOptions(reorder_fields=False), SimulatedEngine()
    )
    _, original = plan_stage(query, call, rows, QueryOptions(method="original"), SimulatedEngine())
    assert _orders(written) == {"question,passage"}
    assert sorted(written["prompt"]) == sorted(original["prompt"])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 400), st.integers(1, 60), st.integers(0, 5))
def test_a_stratified_sample_takes_one_from_each_slice(size, n, seed):
    positions = np.arange(size) * 3
    picked = stratified_sample(positions, n, seed)
    if size <= n:
        assert picked.tolist() == positions.tolist()
        return
    assert len(picked) == n and len(set(picked.tolist())) == n
    edges = np.linspace(0, size, n + 1).astype(int)
    for k, value in enumerate(picked.tolist()):
        assert (
            positions[edges[k]]
            <= value
            < (positions[edges[k + 1]] if edges[k + 1] < size else 3 * size)
        )
    assert stratified_sample(positions, n, seed).tolist() == picked.tolist()


# ---- in Dagster: the plan step decides, llm_outputs reuses the sample and logs the figures ----


def test_the_dagster_plan_step_decides_and_llm_outputs_reuses_the_sample(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    path = tmp_path / "t.csv"
    pd.DataFrame(table().to_pydict()).to_csv(path, index=False)
    engine = Scripted(first_field)

    class ScriptedResource(LLMEngineResource):
        def build_engine(self):
            return engine

    defs = llm_query_assets("g", SQL, sources={"t": str(path)}, field_order_guard=0.8)
    resources = {
        **default_resources("sim"),
        "llm_engine": ScriptedResource(),
        "response_cache": ResponseCacheResource(path=str(tmp_path / "responses.duckdb")),
    }
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=resources)
    assert result.success
    plan_meta = result.asset_materializations_for_node("g_plan")[1].metadata
    assert plan_meta["field_order_guard"].value["verdict"] == "kept written order"
    outputs_meta = result.asset_materializations_for_node("g__llm_outputs")[0].metadata
    assert outputs_meta["guard_kept_planned_order"].value == 0
    assert outputs_meta["guard_requests"].value == 2 * 48
    assert set(result.output_for_node("g__result")["a"]) == {"yes"}
    assert engine.sent == 2 * 48 + (ROWS - 48)  # the written half of the sample is reused


def test_the_sample_holds_only_inputs_whose_fields_moved():
    """Half the inputs keep the written order (unique short passages): sampling them would
    compare a prompt with itself and agree by construction."""
    half = ROWS // 2
    questions = [f"What happened in year {1900 + i}?" for i in range(ROWS)]
    t = pa.table(
        {
            "id": [str(i) for i in range(ROWS)],
            "question": [
                q + (" Shared question text." * 6 if i >= half else "")
                for i, q in enumerate(questions)
            ],  # fmt: skip
            "passage": [
                PASSAGE * 3 + f"Chapter {i // 10}." if i < half else f"Unique {i}."
                for i in range(ROWS)
            ],  # fmt: skip
        }
    )
    options = QueryOptions(field_order_guard=0.8, guard_sample=24)
    plain = run_query(QUERY, {"t": t}, QueryOptions(), SimulatedEngine(), send=False)
    assert set(plain.stages[0].plan["field_order"]) == {"passage,question", "question,passage"}
    guard = run_query(QUERY, {"t": t}, options, Scripted(first_field)).stages[0].guard
    assert guard.compared == 24 and guard.agreement == 0.0, guard.report()
