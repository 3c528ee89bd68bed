"""Placeholder answers obey their OutputSpec and are deterministic."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.output_spec import OutputSpec
from resources.sim.answers import output_token_count, placeholder_answer
from resources.sim.tokenizer import ApproxTokenizer

TOKENIZER = ApproxTokenizer()
PROMPTS = st.text(max_size=200)


VALUES = st.text(min_size=1, max_size=12).filter(lambda v: v.strip() == v and v)


@given(PROMPTS, st.lists(VALUES, min_size=1, max_size=6, unique=True))
@settings(max_examples=60, deadline=None)
def test_choice(prompt: str, values: list[str]) -> None:
    spec = OutputSpec.choice(values)
    answer = placeholder_answer(prompt, spec, 5)
    assert spec.violation(answer) is None
    assert answer == placeholder_answer(prompt, spec, 5)


@given(
    PROMPTS,
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
)
@settings(max_examples=100, deadline=None)
def test_number(prompt: str, lo: float, width: float) -> None:
    spec = OutputSpec.number(lo, lo + width)
    assert spec.violation(placeholder_answer(prompt, spec, 5)) is None


def test_integer_ranges_give_integers() -> None:
    answers = {placeholder_answer(f"row {i}", OutputSpec.number(0, 5), 3) for i in range(200)}
    assert answers == {str(i) for i in range(6)}


@given(
    PROMPTS,
    st.sampled_from(
        [
            r"[A-Z]{3}-\d{2,4}",
            r"(yes|no|maybe)",
            r"\w+@\w+\.com",
            r"[0-9]+(\.[0-9]+)?",
            r"positive|negative",
            r"[a-c]*x?",
            r"\d{4}-\d{2}-\d{2}",
        ]
    ),
)
@settings(max_examples=80, deadline=None)
def test_regex(prompt: str, pattern: str) -> None:
    spec = OutputSpec.regex(pattern)
    assert spec.violation(placeholder_answer(prompt, spec, 10)) is None


def test_unsupported_regex_gets_a_labelled_fallback() -> None:
    answer = placeholder_answer("p", OutputSpec.regex(r"(?<=a)b"), 10)
    assert answer.startswith("[sim]")


def test_json() -> None:
    schema = {
        "properties": {
            "label": {"type": "string"},
            "score": {"type": "number"},
            "kind": {"enum": ["a", "b"]},
        }
    }
    answer = placeholder_answer("p", OutputSpec.json(schema), 20)
    assert json.loads(answer) == {"label": "[sim]", "score": 0, "kind": "a"}
    assert placeholder_answer("p", OutputSpec.json(), 20) == "{}"


@given(PROMPTS, st.integers(1, 300))
@settings(max_examples=40, deadline=None)
def test_text_takes_max_tokens(prompt: str, max_tokens: int) -> None:
    spec = OutputSpec.text()
    answer = placeholder_answer(prompt, spec, max_tokens)
    assert answer.startswith("[sim]")
    assert output_token_count(answer, spec, max_tokens, TOKENIZER) == max_tokens
    if max_tokens >= 2:
        assert TOKENIZER.count(answer) == max_tokens


def test_choice_tokens_are_own_count_plus_eos_capped() -> None:
    spec = OutputSpec.choice(["Positive"])
    assert output_token_count("Positive", spec, 16, TOKENIZER) == TOKENIZER.count("Positive") + 1
    assert output_token_count("Positive", spec, 1, TOKENIZER) == 1
