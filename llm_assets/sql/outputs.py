"""What an LLM call of LLM-SQL answers: the output spec its place implies, its explicit
`output => '...'` and `max_tokens => n` options, and the generation limit (see
`llm_assets.sql.compiler`).

Implied specs: a filter `LLM(...) = 'x'` answers a choice of x and its opposite
(`choice_for`); a call under AVG/SUM/MIN/MAX a number, its range read from the template
(`number_range`); any other call text. An explicit output replaces the implied one when it
agrees with the call's place (`Implied.fits`), else it is an error naming both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlglot import exp

from llm_assets.output_spec import OutputSpec

MAX_TOKENS_CHOICE_SHORT = 2
"""Choice answers of at most 4 characters (Yes/No): one answer token plus end of sequence."""
MAX_TOKENS_CHOICE = 3
"""Longer choice answers (Positive/Negative may take two tokens) plus end of sequence."""
MAX_TOKENS_NUMBER = 3
"""A number such as `4.5`."""
MAX_TOKENS_TEXT = 16
"""Free-text projections: vLLM's `SamplingParams()` default, which the paper's harness used."""
DEFAULT_NUMBER_RANGE = (0.0, 10.0)
"""Range of a numeric answer when the template does not say "between lo ... and hi"."""
OTHER_ANSWER = {
    "yes": "no",
    "no": "yes",
    "true": "false",
    "false": "true",
    "positive": "negative",
    "negative": "positive",
}
"""The second answer of a filtered call's choice, by the compared literal (lower case)."""
FALLBACK_OTHER = "Other"

LLM_OPTIONS: tuple[str, ...] = ("output", "max_tokens")
"""Named LLM arguments: `output => 'form'` (`OutputSpec.parse`), `max_tokens => n`."""

_BETWEEN = re.compile(
    r"\bbetween\s+(-?\d+(?:\.\d+)?)\b[^0-9]{0,40}?\band\s+(-?\d+(?:\.\d+)?)", re.IGNORECASE
)


def number_range(template: str) -> tuple[float, float]:
    """(lo, hi) from "between lo ... and hi" in the template, else `DEFAULT_NUMBER_RANGE`.

    >>> number_range("Rate a satisfaction score between 0 (bad) and 5 (good) based on {x}")
    (0.0, 5.0)
    >>> number_range("Score {x}")
    (0.0, 10.0)
    """
    m = _BETWEEN.search(template)
    if m is None:
        return DEFAULT_NUMBER_RANGE
    lo, hi = float(m.group(1)), float(m.group(2))
    return (lo, hi) if lo <= hi else (hi, lo)


def choice_for(literal: str) -> tuple[str, ...]:
    """The answers of a call filtered on `literal`: the literal first, then its opposite.

    >>> choice_for("Yes"), choice_for("negative"), choice_for("Fresh")
    (('Yes', 'No'), ('negative', 'positive'), ('Fresh', 'Other'))
    """
    other = OTHER_ANSWER.get(literal.lower())
    if other is None:
        return (literal, FALLBACK_OTHER)
    if literal.isupper():
        other = other.upper()
    elif literal[:1].isupper():
        other = other.capitalize()
    return (literal, other)


def default_max_tokens(output: OutputSpec) -> int:
    """The generation limit of a call answering `output` when the SQL gives no `max_tokens`.

    >>> [default_max_tokens(OutputSpec.parse(f)) for f in ("choice(Yes,No)", "number(0,5)")]
    [2, 3]
    """
    if output.kind == "choice":
        short = max(len(v) for v in output.values) <= 4
        return MAX_TOKENS_CHOICE_SHORT if short else MAX_TOKENS_CHOICE
    return MAX_TOKENS_NUMBER if output.kind == "number" else MAX_TOKENS_TEXT


@dataclass(frozen=True)
class Implied:
    """What the place of an LLM call implies about its answer: the spec it gets from the
    template by default, and which explicit `output => '...'` agrees with that place."""

    by: str
    """The clause that implies it, as shown in errors (`LLM(...) = 'Yes'`)."""
    default: Callable[[str], OutputSpec]
    """template -> the implied spec."""
    fits: Callable[[OutputSpec], bool]
    """Whether an explicit spec agrees."""

    @classmethod
    def choice(cls, literal: str, by: str) -> Implied:
        """A filter `LLM(...) = 'literal'`: a choice holding the literal."""
        return cls(
            by,
            lambda _: OutputSpec.choice(choice_for(literal)),
            lambda spec: spec.kind == "choice" and literal in spec.values,
        )

    @classmethod
    def number(cls, by: str) -> Implied:
        """AVG/SUM/MIN/MAX(LLM(...)): a number, its range from the template."""
        return cls(
            by,
            lambda template: OutputSpec.number(*number_range(template)),
            lambda spec: spec.kind == "number",
        )

    @classmethod
    def nothing(cls) -> Implied:
        """A projection or COUNT: text unless the SQL says otherwise."""
        return cls("", lambda _: OutputSpec.text(), lambda _: True)


def split_options(
    args: list[exp.Expression],
) -> tuple[list[exp.Expression], dict[str, exp.Expression]]:
    """LLM arguments after the template -> (positional arguments, options by name);
    ValueError for an unknown or repeated option, or an argument after an option."""
    positional: list[exp.Expression] = []
    options: dict[str, exp.Expression] = {}
    for arg in args:
        if not isinstance(arg, exp.Kwarg):
            if options:
                raise ValueError(f"LLM argument {_sql(arg)} follows an option; options come last")
            positional.append(arg)
            continue
        key = arg.this.name.lower()
        if key not in LLM_OPTIONS:
            raise ValueError(f"unknown LLM option {_sql(arg)}; options: {LLM_OPTIONS}")
        if key in options:
            raise ValueError(f"LLM option {key} is given twice")
        options[key] = arg.expression
    return positional, options


def resolve(
    implied: Implied, template: str, options: Mapping[str, exp.Expression]
) -> tuple[OutputSpec, int]:
    """The call's output spec and max_tokens: the implied ones unless `options` say otherwise;
    ValueError for a malformed option or an explicit output that conflicts with the implied."""
    output = implied.default(template)
    if "output" in options:
        value = options["output"]
        if not (isinstance(value, exp.Literal) and value.is_string):
            raise ValueError(f"output => {_sql(value)} must be a string such as 'choice(a,b)'")
        explicit = OutputSpec.parse(value.this)
        if not implied.fits(explicit):
            raise ValueError(
                f"explicit output => {explicit.form!r} conflicts with the {output.form} "
                f"implied by {implied.by}"
            )
        output = explicit
    if "max_tokens" not in options:
        return output, default_max_tokens(output)
    value = options["max_tokens"]
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        if int(value.this) > 0:
            return output, int(value.this)
    raise ValueError(f"max_tokens => {_sql(value)} must be a positive integer")


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect="duckdb")
