"""An `OutputSpec` as vLLM's structured-outputs fields (`{"choice": [...]}`, `{"regex": ...}`,
`{"json": schema}`, `{"json_object": True}`): the same dict whether it becomes vLLM's
`StructuredOutputsParams(**d)` in process or a server's `structured_outputs` body field. A leaf
(it imports only `OutputSpec`), shared by `resources.vllm_engine`, `resources.openai.wire` and
the sim's server.
"""

from __future__ import annotations

from typing import Any

from llm_assets.output_spec import OutputSpec

__all__ = ["number_regex", "structured_outputs_for"]

_MAX_ENUMERATED_INTEGERS = 100
"""`number_regex` lists every integer of a range up to this many values; wider ranges get a
generic number pattern (the range is then checked after generation, not enforced)."""


def number_regex(lo: float, hi: float) -> str:
    """A regex (fully matched, grammar-engine friendly) for a number in `[lo, hi]`.

    Non-negative integral bounds spanning at most 100 integers are enforced exactly, with up
    to three decimals (`0|1|...|4` with an optional fraction, then `5` with an optional `.0`);
    any other range gets a generic signed decimal pattern.

    >>> import re
    >>> p = number_regex(0, 5)
    >>> [bool(re.fullmatch(p, s)) for s in ("0", "3.25", "5", "5.0", "5.5", "6", "-1")]
    [True, True, True, True, False, False, False]
    """
    if lo > hi:
        raise ValueError(f"number_regex needs lo <= hi, got lo={lo} hi={hi}")
    integral = float(lo).is_integer() and float(hi).is_integer()
    if integral and lo >= 0 and hi - lo < _MAX_ENUMERATED_INTEGERS:
        top = int(hi)
        below = [str(v) for v in range(int(lo), top)]
        last = f"{top}(\\.0{{1,3}})?"
        if not below:
            return f"({last})"
        return f"(({'|'.join(below)})(\\.[0-9]{{1,3}})?|{last})"
    sign = "-?" if lo < 0 else ""
    return f"({sign}[0-9]+(\\.[0-9]{{1,6}})?)"


def structured_outputs_for(spec: OutputSpec) -> dict[str, Any] | None:
    """vLLM's structured-outputs fields for `spec`, or None for free text.

    >>> structured_outputs_for(OutputSpec.choice(["Yes", "No"]))
    {'choice': ['Yes', 'No']}
    >>> structured_outputs_for(OutputSpec.json())
    {'json_object': True}
    >>> structured_outputs_for(OutputSpec.text()) is None
    True
    """
    if spec.kind == "text":
        return None
    if spec.kind == "choice":
        return {"choice": list(spec.values)}
    if spec.kind == "number":
        return {"regex": number_regex(spec.lo, spec.hi)}
    if spec.kind == "regex":
        return {"regex": spec.pattern}
    if spec.kind == "json":
        schema = spec.schema
        return {"json": schema} if schema else {"json_object": True}
    raise ValueError(f"unknown output kind {spec.kind!r}")
