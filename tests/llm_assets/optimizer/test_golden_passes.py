"""Golden plans: each optimizer pass's output on a small table, in
`tests/fixtures/optimizer/<case>.json`, so a change of GGR's order, of dedup or of prompt
rendering shows up as a diff a reviewer can read. Each fixture holds the table, the template,
the settings and, per rule of `RULES`, what that rule changed in the plan (rows skipped,
input ids, schedule, prompts, their fit); together, the request plan a run sends.

After a change that is meant to alter a plan, regenerate and review the diff:

    LLM_ASSETS_UPDATE_GOLDEN=1 pytest tests/llm_assets/optimizer/test_golden_passes.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from llm_assets.optimizer.passes import RULES, Settings, StagePlan
from llm_assets.optimizer.prompts import PromptFormat, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "optimizer"
UPDATE = os.environ.get("LLM_ASSETS_UPDATE_GOLDEN") == "1"

MOVIES = {
    "genre": ["drama", "anime", "drama", None, "anime", "drama", "comedy", "drama"],
    "review": [
        "A slow, tender film.",
        "Loud and bright.",
        "A slow, tender film.",
        "Unrated.",
        "Loud and bright.",
        "Too long " + "and long " * 12 + "for most kids.",
        "Silly fun.",
        "Sad but kind.",
    ],
    "age": ["12", "8", "12", "8", "8", "12", "8", "8"],
}


def words(text: str) -> int:
    """A token counter anyone can check by eye: one token per whitespace-separated word."""
    return len(text.split())


CASES = {
    "named_ggr": dict(
        template="Is this movie right for a child of {age}? Genre {genre}, review {review}",
        style="named",
        settings=dict(method="ggr", max_prompt_tokens=30, context_policy="truncate"),
    ),
    "inline_sorted": dict(
        template="Is this movie right for a child of {age}? Genre {genre}, review {review}",
        style="inline",
        settings=dict(method="ggr", max_prompt_tokens=30, context_policy="fail"),
    ),
    "values_file_order_no_dedup": dict(
        template="Is this movie right for a child of {age}? Genre {genre}, review {review}",
        style="values",
        settings=dict(method="original", dedup=False, null_policy="empty"),
    ),
}


def snapshot(plan: StagePlan) -> dict:
    """The plan as plain JSON: what each pass decides, nothing of how."""
    out: dict = {}
    if plan.skip is not None:
        out["skip"] = list(plan.skip)
    if plan.input_ids is not None:
        out["input_ids"] = plan.input_ids.tolist()
    if plan.schedule is not None:
        out["schedule"] = [[int(row), list(order)] for row, order in plan.schedule]
        out["method_used"] = plan.schedule.method_used
    if plan.prompts is not None:
        out["prompts"] = list(plan.prompts)
        out["truncated"] = list(plan.truncated)
        out["errors"] = list(plan.errors)
    return out


def run_case(case: dict) -> dict:
    fields = ("genre", "review", "age")
    fmt = PromptFormat(parse(case["template"], list(fields)), case["style"])
    settings = Settings(**case["settings"], count_tokens=words)
    plan = StagePlan(pd.DataFrame(MOVIES), fields, fmt)
    steps, before = [], {}
    for rule in RULES:
        plan = rule(plan, settings)
        after = snapshot(plan)
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        steps.append({"after": rule.__name__, "changed": changed})
        before = after
    return {
        "table": MOVIES,
        "template": case["template"],
        "style": case["style"],
        "settings": case["settings"],
        "token_counter": "whitespace-separated words",
        "steps": steps,
    }


def dump(golden: dict) -> str:
    """JSON a reviewer can diff: one line per table column, per changed list, per prompt."""

    def one(value) -> str:
        return json.dumps(value, ensure_ascii=False)

    lines = ["{"]
    for key in ("template", "style", "settings", "token_counter"):
        lines.append(f" {one(key)}: {one(golden[key])},")
    columns = [f"  {one(c)}: {one(v)}" for c, v in golden["table"].items()]
    lines += [' "table": {', ",\n".join(columns), " },", ' "steps": [']
    steps = []
    for step in golden["steps"]:
        changed = []
        for key, value in step["changed"].items():
            if key == "prompts":
                items = ",\n".join(f"    {one(v)}" for v in value)
                changed.append(f"   {one(key)}: [\n{items}\n   ]")
            else:
                changed.append(f"   {one(key)}: {one(value)}")
        body = ",\n".join(changed)
        steps.append(f'  {{"after": {one(step["after"])}, "changed": {{\n{body}\n  }}}}')
    lines += [",\n".join(steps), " ]", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_pass_matches_its_golden_plan(name: str) -> None:
    path = FIXTURES / f"{name}.json"
    got = run_case(CASES[name])
    if UPDATE:
        path.write_text(dump(got))
    expected = json.loads(path.read_text())
    assert [s["after"] for s in expected["steps"]] == [r.__name__ for r in RULES], (
        "the rules changed: regenerate the golden plans (see the module docstring)"
    )
    for want, have in zip(expected["steps"], got["steps"], strict=True):
        assert have == want, f"{name}: the plan after {want['after']} differs from {path}"
