"""Prompts longer than the context window: cut the longest field (marked) or fail the row
before any token is spent."""

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from llm_assets.benchmark_queries import compile_query
from llm_assets.optimizer.prompts import TRUNCATION_MARKER, PromptFormat, fit_row
from llm_assets.pipeline.plan import first_prompt, run_dedup, run_plan
from llm_assets.pipeline.rows import ROW
from llm_assets.pipeline.send import outputs_frame, requests_from_plan

Q1 = compile_query("q1", "movies")
CALL = Q1.llm_calls[0]


def words(text: str) -> int:
    return len(text.split())


def test_fit_row_cuts_the_longest_value_just_enough():
    fmt = PromptFormat.plain("Do it")
    values = ["short", "long " * 50]
    fitted = fit_row(fmt, ["a", "b"], values, words, max_tokens=20)
    assert fitted is not None and words(fitted) <= 20
    assert fitted.startswith("Do it\na: short\nb: long") and fitted.endswith(TRUNCATION_MARKER)
    assert words(fitted.replace("long", "long long", 1)) > 20  # nothing more could be kept
    assert fit_row(fmt, ["a", "b"], values, words, max_tokens=3) is None


def deduped():
    rows = pd.DataFrame(
        {
            ROW: [0, 1],
            "movie_info": ["short info", "epic " * 300],
            "review_content": ["fine", "ok"],
        }
    )
    return run_dedup(rows, ["movie_info", "review_content"], dedup=True)


def planned(context_policy: str, max_prompt_tokens: int = 100) -> pd.DataFrame:
    """Q1's plan of the two deduplicated rows, counting words as tokens."""
    fields = ["movie_info", "review_content"]
    return run_plan(
        deduped(),
        CALL,
        fields,
        "ggr",
        max_prompt_tokens=max_prompt_tokens,
        count_tokens=words,
        context_policy=context_policy,
    )


def test_fail_policy_marks_the_row_and_never_sends_it():
    plan = planned("fail")
    errors = plan["error"].dropna().tolist()
    assert len(errors) == 1
    assert "tokens, over the 100 the context window leaves" in errors[0]
    assert "use 'truncate'" in errors[0]
    sent = requests_from_plan(plan, CALL)
    assert len(sent) == 1
    outputs = outputs_frame(plan, [], CALL)
    assert outputs["error"].notna().all()  # the unsent one keeps its planning error
    assert outputs["error"].str.contains("context window").sum() == 1


def test_the_first_prompt_shown_is_the_first_one_sent():
    """`plan`'s first_prompt skips rows that fail planning, wherever they are."""
    plan = planned("fail")
    assert first_prompt(plan) == requests_from_plan(plan, CALL)[0].prompt
    frame = pd.DataFrame({"prompt": ["too long", "b", "c"], "error": ["over", None, None]})
    assert first_prompt(frame) == "b"
    assert first_prompt(frame.assign(error="over")) is None
    assert first_prompt(frame.drop(columns="error")) == "too long"
    assert first_prompt(frame.iloc[:0]) is None


def test_truncate_policy_sends_a_marked_prompt_that_fits():
    plan = planned("truncate")
    assert plan["error"].isna().all() and plan["truncated"].sum() == 1
    cut = plan.loc[plan["truncated"], "prompt"].iloc[0]
    assert TRUNCATION_MARKER in cut and words(cut) <= 100
    assert len(requests_from_plan(plan, CALL)) == 2


def test_truncate_policy_fails_a_row_that_cannot_fit_at_all():
    plan = planned("truncate", max_prompt_tokens=5)
    assert plan["error"].notna().all()
    assert plan["error"].str.contains("even with the longest field cut to nothing").all()


def test_the_limit_is_the_engines_declared_window_minus_the_output_budget():
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.plan import context_limit
    from resources.engine import EngineWrapper
    from resources.sim.engine import SimulatedEngine

    class Unknown(EngineWrapper):
        max_model_len = None

    sim = SimulatedEngine(model="opt-13b")  # a 2,048-token window
    limit, count = context_limit(sim, QueryOptions(), 48)
    assert limit == 2000 and count("a b c") == sim.count_tokens("a b c")
    assert context_limit(sim, QueryOptions(max_prompt_tokens=77), 48)[0] == 77
    assert context_limit(Unknown(sim), QueryOptions(), 48)[0] is None


def test_a_prompt_no_longer_than_the_limit_in_characters_is_not_counted():
    """With the engine's promise `count <= len` (`tokens_within_chars`), the fit counts only
    the prompts longer than the limit in characters, and plans exactly as counting them all."""
    from dataclasses import replace

    from llm_assets.optimizer.passes.context_fit import fit_context
    from llm_assets.optimizer.passes.plan import Settings, StagePlan
    from llm_assets.optimizer.passes.render import render
    from llm_assets.optimizer.prompts import parse
    from resources.engine import EngineWrapper
    from resources.sim.engine import SimulatedEngine
    from resources.sim.tokenizer import ApproxTokenizer

    texts = ["a b", "a b c d e f g h " * 4, "x" * 30]
    fmt = PromptFormat(parse("Sum up: {text}", ["text"]), "values")
    plan = render(StagePlan(pd.DataFrame({"text": texts}), ("text",), fmt), Settings())
    counted = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text)

    for policy in ("fail", "truncate"):
        settings = Settings(max_prompt_tokens=40, count_tokens=count, context_policy=policy)
        every = fit_context(plan, settings)
        counted.clear()
        short = fit_context(plan, replace(settings, tokens_within_chars=True))
        assert short == every
        assert counted and plan.prompts[0] not in counted  # the short prompt is not counted
    counted.clear()
    fits = Settings(max_prompt_tokens=200, count_tokens=count, tokens_within_chars=True)
    assert fit_context(plan, fits) is plan and counted == []

    sim = SimulatedEngine()
    assert sim.tokens_within_chars and EngineWrapper(sim).tokens_within_chars
    assert not SimulatedEngine(tokenizer=type("T", (), {"encode": list})()).tokens_within_chars
    assert isinstance(sim.tokenizer, ApproxTokenizer)


@given(st.lists(st.integers(0, 2**40), max_size=12), st.integers(1, 5))
def test_request_ids_are_the_query_and_input_id_at_any_chunk_size(ids, chunk):
    from llm_assets.pipeline.plan import _request_ids

    got = _request_ids("q:llm_1", np.asarray(ids, dtype=np.int64), chunk)
    assert got.dtype == object and got.tolist() == [f"q:llm_1:{i}" for i in ids]
