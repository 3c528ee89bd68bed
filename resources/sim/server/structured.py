"""Structured outputs as vLLM's server takes them, mapped to one `OutputSpec`.

Three ways to ask, as vLLM accepts them: `structured_outputs: {"choice" | "regex" | "json" |
"json_object": ...}` (vLLM's `StructuredOutputsParams`), the older top-level `guided_choice` /
`guided_regex` / `guided_json`, and `response_format` (`text`, `json_object`, `json_schema`).
Invariant: a request gets at most one constraint; setting two (two kinds inside
`structured_outputs`, or two of the three ways) is a 400 naming the field. `grammar` and
`structural_tag` are refused: the simulated engine cannot generate from them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llm_assets.output_spec import OutputSpec
from resources.sim.server.errors import bad_request

__all__ = ["ResponseFormat", "StructuredOutputs", "output_spec"]

KINDS: tuple[str, ...] = ("choice", "regex", "json", "json_object")
UNSUPPORTED_KINDS: tuple[str, ...] = ("grammar", "structural_tag")

Choices = Annotated[list[str], Field(min_length=1)]


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs` object (the fields the simulated engine can honour)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    choice: Choices | None = None
    regex: str | None = None
    json_schema: dict[str, Any] | str | None = Field(default=None, alias="json")
    json_object: bool | None = None
    grammar: str | None = None
    structural_tag: Any = None

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """Every name a validation error may put in its location (aliases included)."""
        models = (cls, ResponseFormat, JsonSchemaFormat)
        return frozenset(
            f.alias or name for model in models for name, f in model.model_fields.items()
        ) | frozenset(n for model in models for n in model.model_fields)

    def spec(self, where: str) -> OutputSpec | None:
        """The constraint it sets (None: none); two kinds at once are a 400."""
        for key in UNSUPPORTED_KINDS:
            if getattr(self, key) is not None:
                raise bad_request(
                    f"{where}.{key} is not supported by the simulated engine; "
                    f"use one of {list(KINDS)}",
                    f"{where}.{key}",
                )
        values = {"choice": self.choice, "regex": self.regex, "json": self.json_schema}
        values["json_object"] = self.json_object or None
        given = [k for k in KINDS if values[k] is not None]
        if len(given) > 1:
            raise bad_request(
                "You can only use one kind of constraints for structured outputs "
                f"({', '.join(repr(k) for k in KINDS)}); got {given}.",
                where,
            )
        return _spec(given[0], values[given[0]], f"{where}.{given[0]}") if given else None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format` (the kinds vLLM maps to structured outputs)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def spec(self) -> OutputSpec | None:
        if self.type == "text":
            return None
        if self.type == "json_object":
            return OutputSpec.json()
        if self.json_schema is None:
            raise bad_request(
                "When response_format type is 'json_schema', the 'json_schema' field must be "
                "provided.",
                "response_format.json_schema",
            )
        return OutputSpec.json(self.json_schema.schema_ or {})


def _spec(kind: str, value: Any, param: str) -> OutputSpec:
    """The `OutputSpec` of one constraint (`value` already has the field's type)."""
    if kind == "choice":
        try:
            return OutputSpec.choice(value)
        except ValueError as exc:  # e.g. no choice at all
            raise bad_request(f"{param}: {exc}", param, value) from None
    if kind == "regex":
        if not value:
            raise bad_request(f"{param} must be a non-empty regex", param)
        try:
            return OutputSpec.regex(value)
        except Exception as exc:  # re.error and friends
            raise bad_request(f"{param} is not a valid regex ({exc})", param, value) from None
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise bad_request(
                    f"{param} is a string but not valid JSON ({exc})", param
                ) from None
        if not isinstance(value, dict):
            raise bad_request(f"{param} must be a JSON schema object", param, value)
        return OutputSpec.json(value)
    return OutputSpec.json()  # json_object: true


def output_spec(
    *,
    structured_outputs: StructuredOutputs | None,
    guided: dict[str, Any],
    response_format: ResponseFormat | None,
) -> OutputSpec:
    """The one `OutputSpec` a request asks for (text when it asks for none); a 400 names the
    second field when several ask."""
    found: list[tuple[str, OutputSpec]] = []
    if structured_outputs is not None:
        spec = structured_outputs.spec("structured_outputs")
        if spec is not None:
            found.append(("structured_outputs", spec))
    for name, value in guided.items():
        if value is not None:
            found.append((name, _spec(name.removeprefix("guided_"), value, name)))
    if response_format is not None and (spec := response_format.spec()) is not None:
        found.append(("response_format", spec))
    if len(found) > 1:
        names = [name for name, _ in found]
        raise bad_request(f"request sets several output constraints {names}; give one", names[1])
    return found[0][1] if found else OutputSpec.text()
