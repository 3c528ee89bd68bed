"""What an LLM call is allowed to answer: a choice, a number in a range, a regex, JSON, or text.

`OutputSpec` is pure data (hashable, no Dagster): the query model, the engines and the checks
all share it. `violation(text)` says why an answer breaks the spec, or returns None.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["choice", "number", "regex", "json", "text"]
KINDS: tuple[str, ...] = ("choice", "number", "regex", "json", "text")


@dataclass(frozen=True)
class OutputSpec:
    """The shape of a valid answer. Build with the class methods, not the constructor."""

    kind: Kind = "text"
    values: tuple[str, ...] = ()
    """Allowed answers for `choice`."""
    lo: float | None = None
    """Inclusive lower bound for `number`."""
    hi: float | None = None
    """Inclusive upper bound for `number`."""
    pattern: str | None = None
    """Full-match regular expression for `regex`."""
    schema_json: str | None = None
    """JSON schema (serialised, so the spec stays hashable) for `json`."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown output kind {self.kind!r}; expected one of {KINDS}")
        if self.kind == "choice" and not self.values:
            raise ValueError("a choice output needs at least one value")
        if self.kind == "number" and (self.lo is None or self.hi is None or self.lo > self.hi):
            raise ValueError(f"a number output needs lo <= hi, got lo={self.lo} hi={self.hi}")
        if self.kind == "regex":
            if not self.pattern:
                raise ValueError("a regex output needs a pattern")
            re.compile(self.pattern)

    @classmethod
    def choice(cls, values: list[str] | tuple[str, ...]) -> OutputSpec:
        return cls(kind="choice", values=tuple(str(v) for v in values))

    @classmethod
    def number(cls, lo: float, hi: float) -> OutputSpec:
        return cls(kind="number", lo=float(lo), hi=float(hi))

    @classmethod
    def regex(cls, pattern: str) -> OutputSpec:
        return cls(kind="regex", pattern=pattern)

    @classmethod
    def json(cls, schema: dict | None = None) -> OutputSpec:
        return cls(kind="json", schema_json=json.dumps(schema or {}, sort_keys=True))

    @classmethod
    def text(cls) -> OutputSpec:
        return cls(kind="text")

    @property
    def schema(self) -> dict | None:
        return None if self.schema_json is None else json.loads(self.schema_json)

    def violation(self, text: str) -> str | None:
        """Why `text` breaks this spec (one line naming the value), or None if it is valid."""
        answer = text.strip()
        if self.kind == "choice" and answer not in self.values:
            return f"answer {answer!r} is not one of {list(self.values)}"
        if self.kind == "number":
            try:
                value = float(answer)
            except ValueError:
                return f"answer {answer!r} is not a number in [{self.lo:g}, {self.hi:g}]"
            if not (self.lo <= value <= self.hi):
                return f"answer {value:g} is outside [{self.lo:g}, {self.hi:g}]"
        if self.kind == "regex" and re.fullmatch(self.pattern, answer) is None:
            return f"answer {answer!r} does not match /{self.pattern}/"
        if self.kind == "json":
            try:
                json.loads(answer)
            except ValueError as exc:
                return f"answer {answer[:60]!r} is not valid JSON ({exc.msg})"
        return None
