"""What an LLM call is allowed to answer: a choice, a number in a range, a regex, JSON, or text.

`OutputSpec` is pure data (hashable, no Dagster): the query model, the engines and the checks
all share it. `violation(text)` says why an answer breaks the spec, or returns None.

Written form (LLM-SQL's `output => '...'`; `parse` reads it, `form` writes it):
`text`, `json`, `choice(a,b,...)` (comma-separated, blanks around values dropped),
`number(lo,hi)` (inclusive), `regex(pattern)` (the answer must match the whole pattern;
everything between the first `(` and the last `)` is the pattern).

>>> OutputSpec.parse("choice(pos, neg)").values
('pos', 'neg')
>>> OutputSpec.parse("regex(^[A-Z]{3}$)").violation("ABCD")
"answer 'ABCD' does not match /^[A-Z]{3}$/"
>>> OutputSpec.parse("number(0,5)").form
'number(0,5)'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["choice", "number", "regex", "json", "text"]
KINDS: tuple[str, ...] = ("choice", "number", "regex", "json", "text")
FORMS = "text, json, choice(a,b,...), number(lo,hi), regex(pattern)"


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
        if self.kind == "number" and not (
            self.lo is not None and self.hi is not None and self.lo <= self.hi
        ):
            raise ValueError(f"a number output needs lo <= hi, got lo={self.lo} hi={self.hi}")
        if self.kind == "regex":
            if not self.pattern:
                raise ValueError("a regex output needs a pattern")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"regex {self.pattern!r} does not compile ({exc})") from exc

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

    @classmethod
    def parse(cls, form: str) -> OutputSpec:
        """The spec written as `form` (see the module docstring); ValueError naming the form
        and the accepted ones."""
        kind, paren, rest = form.strip().partition("(")
        kind = kind.strip().lower()
        if paren and not rest.rstrip().endswith(")"):
            raise ValueError(f"output {form!r}: missing ')'; accepted: {FORMS}")
        args = rest.rstrip()[:-1] if paren else None
        try:
            if kind in ("text", "json") and args is None:
                return cls.text() if kind == "text" else cls.json()
            if kind == "choice" and args is not None:
                values = [v.strip() for v in args.split(",")]
                if "" in values or len(set(values)) != len(values):
                    raise ValueError("choice values must be non-empty and distinct")
                return cls.choice(values)
            if kind == "number" and args is not None:
                bounds = [float(v) for v in args.split(",")]
                if len(bounds) != 2:
                    raise ValueError("number takes two bounds, lo and hi")
                return cls.number(*bounds)
            if kind == "regex" and args:
                return cls.regex(args)
        except ValueError as exc:
            raise ValueError(f"output {form!r}: {exc}; accepted: {FORMS}") from exc
        raise ValueError(f"unknown output {form!r}; accepted: {FORMS}")

    @property
    def form(self) -> str:
        """The written form `parse` reads back (a JSON schema is not written)."""
        if self.kind == "choice":
            return f"choice({','.join(self.values)})"
        if self.kind == "number":
            return f"number({_number(self.lo)},{_number(self.hi)})"
        if self.kind == "regex":
            return f"regex({self.pattern})"
        return self.kind

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


def _number(x: float) -> str:
    """`x` written so that `float()` reads it back exactly (`5`, `0.25`)."""
    return str(int(x)) if x.is_integer() else repr(x)
