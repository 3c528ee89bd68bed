"""Deterministic placeholder answers of the right shape for the simulated engine.

The simulated engine never pretends to be a model: answers are a pure function of
(prompt lines, OutputSpec, max_tokens), seeded by a stable hash (blake2b) of the prompt's
lines in sorted order (so the field order of a prompt does not change its answer), and obey
the spec:

- choice: one of the values; number: a value in [lo, hi] (an integer when both bounds are);
- regex: a string generated from the pattern (literals, classes, repeats, groups, alternation);
  when the pattern uses something the generator does not handle, a labelled fallback
  ``[sim] no generated match for /pattern/`` that does NOT match;
- json: an object with one placeholder value per schema property (``{}`` without properties);
- text: ``[sim]`` followed by filler words, as many tokens as requested.

Choice and number answers carry no tag (they must be valid values); the run is tagged by
`RunStats.engine == "sim"`. Output token counts (what the cost model charges): text takes
`max_tokens`; every other kind takes its own token count plus one EOS token, capped at
`max_tokens` (at least 1).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import zlib
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

from llm_assets.output_spec import OutputSpec
from resources.sim.tokenizer import Tokenizer

__all__ = [
    "SIM_TAG",
    "output_token_count",
    "output_token_ids",
    "placeholder_answer",
]

_ID_RANGE = 128_000
_ID_STRIDE = 7919

SIM_TAG = "[sim]"
_FILLER = (
    "lorem ipsum dolor sit amet sed do tempor ut labore et dolore magna aliqua enim ad minim"
).split()  # words of <= 7 letters: one token each for the approximate tokenizer
_MAX_REPEAT_EXTRA = 3


@functools.lru_cache(maxsize=256)
def _spec_key(spec: OutputSpec) -> bytes:
    """`f"{spec!r}\x00"` encoded, once per spec (a dataclass repr per request was 5% of a
    simulated run)."""
    return f"{spec!r}\x00".encode()


def _seed(prompt: str, spec: OutputSpec) -> int:
    """Stable seed of (prompt lines as a multiset, spec): reordering a prompt's fields (one
    per line) never changes its answer, so optimizations change cost, not results. The key
    is `f"{spec!r}\x00{lines}"` in UTF-8."""
    lines = "\n".join(sorted(prompt.splitlines()))
    try:
        head = _spec_key(spec)
    except TypeError:  # an unhashable spec-like object: no memo
        head = f"{spec!r}\x00".encode()
    key = head + lines.encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _number(seed: int, lo: float, hi: float) -> str:
    if float(lo).is_integer() and float(hi).is_integer():
        span = int(hi) - int(lo) + 1
        return str(int(lo) + seed % span)
    ilo, ihi = math.ceil(lo), math.floor(hi)
    if ilo <= ihi:
        return str(ilo + seed % (ihi - ilo + 1))
    value = round(lo + (seed / 2.0**64) * (hi - lo), 6)
    return repr(min(max(value, lo), hi))


class _Unsupported(Exception):
    pass


def _gen(tree, seed: int, depth: int = 0) -> str:
    """Generate one string for a parsed regex (sre parse tree), choices driven by `seed`."""
    if depth > 50:
        raise _Unsupported("too deep")
    out: list[str] = []
    for i, (op, av) in enumerate(tree):
        s = (seed >> (i % 40)) ^ (seed * (i + 1))
        if op is sre_c.LITERAL:
            out.append(chr(av))
        elif op is sre_c.ANY:
            out.append("x")
        elif op is sre_c.IN:
            out.append(_gen_in(av))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            hi = lo + _MAX_REPEAT_EXTRA if hi is sre_c.MAXREPEAT else hi
            n = lo + (s % (hi - lo + 1) if hi > lo else 0)
            out.extend(_gen(sub, seed + k, depth + 1) for k in range(n))
        elif op is sre_c.SUBPATTERN:
            out.append(_gen(av[-1], seed, depth + 1))
        elif op is sre_c.BRANCH:
            branches = av[1]
            out.append(_gen(branches[s % len(branches)], seed, depth + 1))
        elif op is sre_c.AT:
            continue
        elif op is sre_c.CATEGORY:
            out.append(_gen_in([(op, av)]))
        else:
            raise _Unsupported(str(op))
    return "".join(out)


def _gen_in(items) -> str:
    """One character accepted by a character class (negated classes are not handled)."""
    for op, _ in items:
        if op is sre_c.NEGATE:
            raise _Unsupported("negated class")
    op, av = items[0]
    if op is sre_c.LITERAL:
        return chr(av)
    if op is sre_c.RANGE:
        return chr(av[0])
    if op is sre_c.CATEGORY:
        return {
            sre_c.CATEGORY_DIGIT: "7",
            sre_c.CATEGORY_WORD: "a",
            sre_c.CATEGORY_SPACE: " ",
        }.get(av) or _raise(str(av))
    raise _Unsupported(str(op))


def _raise(what: str) -> str:
    raise _Unsupported(what)


def _regex_answer(pattern: str, seed: int) -> str:
    try:
        candidate = _gen(sre_parse.parse(pattern), seed)
    except (_Unsupported, RecursionError, ValueError, TypeError):
        candidate = None
    if candidate is not None and re.fullmatch(pattern, candidate) is not None:
        return candidate
    return f"{SIM_TAG} no generated match for /{pattern}/"


_JSON_PLACEHOLDER = {
    "string": SIM_TAG,
    "number": 0,
    "integer": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def _json_answer(schema: dict | None) -> str:
    props = (schema or {}).get("properties") or {}
    obj = {}
    for name, sub in props.items():
        sub = sub if isinstance(sub, dict) else {}
        if sub.get("enum"):
            obj[name] = sub["enum"][0]
        else:
            kind = sub.get("type", "string")
            kind = kind[0] if isinstance(kind, list) and kind else kind
            obj[name] = _JSON_PLACEHOLDER.get(kind, SIM_TAG)
    return json.dumps(obj, sort_keys=True)


def _text_answer(max_tokens: int) -> str:
    # "[sim]" is 2 tokens for the approximate tokenizer ("[sim", "]"); each filler word one more.
    n_words = max(0, max_tokens - 2)
    return " ".join([SIM_TAG, *(_FILLER[i % len(_FILLER)] for i in range(n_words))])


def placeholder_answer(prompt: str, spec: OutputSpec, max_tokens: int) -> str:
    """The simulated answer to `prompt` under `spec` (see the module docstring)."""
    seed = _seed(prompt, spec)
    if spec.kind == "choice":
        return spec.values[seed % len(spec.values)]
    if spec.kind == "number":
        return _number(seed, spec.lo, spec.hi)
    if spec.kind == "regex":
        return _regex_answer(spec.pattern, seed)
    if spec.kind == "json":
        return _json_answer(spec.schema)
    return _text_answer(max_tokens)


def output_token_count(answer: str, spec: OutputSpec, max_tokens: int, tokenizer: Tokenizer) -> int:
    """Generated tokens charged for `answer`: max_tokens for text, else its own tokens plus EOS,
    capped at max_tokens."""
    limit = max(1, max_tokens)
    if spec.kind == "text":
        return limit
    return max(1, min(len(tokenizer.encode(answer)) + 1, limit))


def output_token_ids(answer: str, num_output: int) -> list[int]:
    """Stand-in ids of the `num_output` tokens the simulated engine generates for `answer`
    (only their blocks' hashes matter: a preempted request finds its own output blocks again).
    A pure function of the answer, so identical prompts generate identical blocks, as greedy
    decoding does; every id is below Llama 3's vocabulary size, so a real engine accepts them."""
    seed = zlib.crc32(answer.encode())
    return [(seed + _ID_STRIDE * i) % _ID_RANGE for i in range(num_output)]
