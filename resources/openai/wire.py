"""What travels between `OpenAIEngine` and an OpenAI-compatible server, checked both ways.

Pure functions, no I/O:

- `completion_from_reply(data, chat=..., request_id=...)` validates one HTTP 200 body and
  returns a `Completion`, or raises `MalformedReply` naming the request and what was wrong.
  Accepted: a JSON object whose `choices` is a list of exactly one object (the engine asks
  for n=1) whose `text` (or chat `message.content`) is a string, and whose `usage` holds
  integer `prompt_tokens` and `completion_tokens` in [0, 2**63). `cached_tokens`
  (`usage.prompt_tokens_details.cached_tokens`) is optional (None = the server does not
  report it); when present it is an integer in [0, prompt_tokens]. Nothing else is accepted:
  no number or null text, no bool counts, no silent first-of-several choices. With `bounds`
  (`UsageBounds.of(request text, max_tokens)`), counts the request cannot have are refused
  too: more prompt tokens than its text has UTF-8 bytes plus `TEMPLATE_TOKENS`, or more
  output tokens than `max_tokens + 1`.
- `structured_fields(spec, style)`: the body fields that carry an `OutputSpec` in the form
  each server understands (`SERVER_STYLES`); `constrained_max_tokens` the output budget
  sent with them, which never cuts a valid choice short.
- `Redactor`: removes every fragment of 8 or more characters of a secret, in any letter
  case, from a text (shorter secrets: every whole occurrence).
- `split_url_credentials(url)`: the URL without `user:password@`, and the credentials.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from llm_assets.output_spec import OutputSpec
from resources.structured_outputs import structured_outputs_for

__all__ = [
    "MAX_TOKEN_COUNT",
    "NO_CACHED_TOKENS_ADVICE",
    "SERVER_STYLES",
    "Completion",
    "MalformedReply",
    "Redactor",
    "TEMPLATE_TOKENS",
    "UsageBounds",
    "completion_from_reply",
    "error_message",
    "retry_after_s",
    "split_url_credentials",
    "constrained_max_tokens",
    "structured_fields",
]

MAX_TOKEN_COUNT = 2**63
"""Token counts must be below this (they are stored as 64-bit integers)."""

SERVER_STYLES: tuple[str, ...] = ("auto", "vllm", "vllm-guided", "llamacpp", "openai", "none")
"""How an `OutputSpec` travels, per server: vLLM >= 0.10's `structured_outputs` object,
older vLLM's `guided_*` fields, llama.cpp's `grammar` / `json_schema`, a hosted OpenAI-style
API's `response_format` (JSON only), or not at all. `auto` asks the server (llama.cpp answers
`GET /props`) and falls back to `vllm`."""

STYLE_ALIASES = {"structured_outputs": "vllm", "guided": "vllm-guided"}
"""Older names of the styles, still accepted."""

NO_CACHED_TOKENS_ADVICE = {
    "vllm": "start vLLM with --enable-prompt-tokens-details",
    "vllm-guided": "start vLLM with --enable-prompt-tokens-details",
    "llamacpp": "llama.cpp's C++ llama-server reports it; the Python llama_cpp.server does not",
    "openai": "this API does not report it, so cache hits and cached-input discounts are unknown",
    "none": "this server does not report it, so cache hits are unknown",
}


class MalformedReply(ValueError):
    """An HTTP 200 whose body is not a well-formed completion."""


@dataclass(frozen=True)
class Completion:
    """A validated completion: its text and token counts (`cached_tokens` None: unreported)."""

    text: str
    prompt_tokens: int
    cached_tokens: int | None
    output_tokens: int


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedReply(f"{where} is {_show(value)}, not an integer")
    if not 0 <= value < MAX_TOKEN_COUNT:
        raise MalformedReply(f"{where} is {_show(value)}, outside [0, 2**63)")
    return value


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


TEMPLATE_TOKENS = 1024
"""Tokens a server may add around a request's text: chat template, system turn, BOS/EOS."""


@dataclass(frozen=True)
class UsageBounds:
    """The most tokens one request can have. A tokenizer makes at most one token per UTF-8
    byte of text (byte-level BPE and SentencePiece's byte fallback never make more; a
    SentencePiece dummy prefix is one more), so a prompt has at most its bytes plus
    `TEMPLATE_TOKENS`; a completion at most `max_tokens` plus one (an end token some servers
    count), unbounded when no `max_tokens` was sent."""

    prompt_tokens: int
    output_tokens: int | None

    @classmethod
    def of(cls, text: str, max_tokens: int | None) -> UsageBounds:
        """Bounds of a request whose text (prompt, or every message's content) is `text`."""
        size = len(text.encode("utf-8", "surrogatepass"))
        return cls(size + TEMPLATE_TOKENS, None if max_tokens is None else max_tokens + 1)

    def check(self, completion: Completion) -> None:
        """`MalformedReply` when `completion` claims more than the request can have."""
        if completion.prompt_tokens > self.prompt_tokens:
            raise MalformedReply(
                f"usage.prompt_tokens {completion.prompt_tokens} is more than the request can "
                f"have (at most {self.prompt_tokens}: one per byte of its text plus "
                f"{TEMPLATE_TOKENS})"
            )
        if self.output_tokens is not None and completion.output_tokens > self.output_tokens:
            raise MalformedReply(
                f"usage.completion_tokens {completion.output_tokens} is more than max_tokens "
                f"allows (at most {self.output_tokens})"
            )


def completion_from_reply(
    data: Any, *, chat: bool, request_id: str, bounds: UsageBounds | None = None
) -> Completion:
    """The `Completion` in `data` (a parsed JSON body), or `MalformedReply` naming
    `request_id` and the first thing wrong (see the module docstring)."""
    try:
        completion = _completion(data, chat)
        if bounds is not None:
            bounds.check(completion)
        return completion
    except MalformedReply as exc:
        raise MalformedReply(f"request {request_id}: {exc}") from None


def _completion(data: Any, chat: bool) -> Completion:
    if not isinstance(data, dict):
        raise MalformedReply(f"body is {type(data).__name__}, not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        shown = f"{len(choices)} entries" if isinstance(choices, list) else _show(choices)
        raise MalformedReply(f"choices has {shown}; expected one object (n=1)")
    choice = choices[0]
    if chat:
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        where = "choices[0].message.content"
    else:
        text, where = choice.get("text"), "choices[0].text"
    if not isinstance(text, str):
        raise MalformedReply(f"{where} is {_show(text)}, not a string")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        raise MalformedReply(f"usage is {_show(usage)}, not an object")
    prompt = _count(usage.get("prompt_tokens"), "usage.prompt_tokens")
    output = _count(usage.get("completion_tokens"), "usage.completion_tokens")
    details = usage.get("prompt_tokens_details")
    cached = None
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        cached = _count(details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens")
        if cached > prompt:
            raise MalformedReply(f"cached_tokens {cached} exceeds prompt_tokens {prompt}")
    elif details is not None and not isinstance(details, dict):
        raise MalformedReply(f"usage.prompt_tokens_details is {_show(details)}, not an object")
    return Completion(text, prompt, cached, output)


# -- structured outputs per server -----------------------------------------------------------


def _gbnf_literal(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


NUMBER_GRAMMAR = 'root ::= "-"? [0-9]+ ("." [0-9]+)?'
NON_NEGATIVE_GRAMMAR = 'root ::= [0-9]+ ("." [0-9]+)?'


def constrained_max_tokens(spec: OutputSpec, max_tokens: int) -> int:
    """The output budget to send with a server-side constraint for `spec`: a choice can come
    back in any tokenization of its value, since a grammar masks tokens but does not force the
    canonical spelling (Gemma 3 spelled `positive`, one token, in three under llama.cpp's
    grammar, and a 3-token budget cut `negative` to `negat`); at most one token per UTF-8
    byte (as `UsageBounds`), so the budget is raised to the longest value's bytes plus an end
    token. Generation ends where the constraint completes, so the slack is never spent.

    >>> constrained_max_tokens(OutputSpec.choice(["positive", "negative"]), 2)
    9
    >>> constrained_max_tokens(OutputSpec.parse("number(0,5)"), 3)
    3
    """
    if spec.kind != "choice":
        return max_tokens
    longest = max(len(v.encode("utf-8", "surrogatepass")) for v in spec.values)
    return max(max_tokens, longest + 1)


def structured_fields(spec: OutputSpec, style: str) -> dict[str, Any]:
    """Body fields that constrain the answer to `spec` on a server of `style` (a resolved
    style, not `auto`). A number range travels as a regex (vLLM) or grammar (llama.cpp) for a
    number and is checked again downstream by `OutputSpec.violation`; a regex has no llama.cpp
    or OpenAI form and travels unconstrained (checked downstream)."""
    style = STYLE_ALIASES.get(style, style)
    structured = structured_outputs_for(spec)
    if structured is None or style == "none":
        return {}
    if style == "vllm":
        return {"structured_outputs": structured}
    ((kind, value),) = structured.items()
    if style == "vllm-guided":
        if kind == "json_object":
            return {"response_format": {"type": "json_object"}}
        return {f"guided_{kind}": value}
    if style == "llamacpp":
        if spec.kind == "choice":
            return {"grammar": "root ::= " + " | ".join(_gbnf_literal(v) for v in spec.values)}
        if spec.kind == "number":
            negative = spec.lo is not None and spec.lo < 0
            return {"grammar": NUMBER_GRAMMAR if negative else NON_NEGATIVE_GRAMMAR}
        if spec.kind == "json":
            return {"json_schema": spec.schema or {"type": "object"}}
        return {}
    if style == "openai":
        if spec.kind != "json":
            return {}
        if not spec.schema:
            return {"response_format": {"type": "json_object"}}
        schema = {"name": "answer", "schema": spec.schema}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    raise ValueError(f"unknown server style {style!r}; expected one of {SERVER_STYLES}")


# -- secrets ---------------------------------------------------------------------------------


class Redactor:
    """Replaces, in any text, every run of characters covered by an 8-character window that
    also occurs in one of the secrets (letter case ignored) with `***`; so any fragment of
    8+ characters of a secret, in any case, disappears. A secret shorter than 8 characters
    is replaced wherever it occurs whole (any case)."""

    WINDOW = 8

    def __init__(self, secrets: list[str]) -> None:
        w = self.WINDOW
        self._grams: set[str] = set()
        short: list[str] = []
        for secret in secrets:
            if not secret:
                continue
            s = secret.lower()
            if len(s) < w:
                short.append(re.escape(s))
            else:
                self._grams.update(s[i : i + w] for i in range(len(s) - w + 1))
        self._short = re.compile("|".join(short), re.IGNORECASE) if short else None

    def __call__(self, text: str) -> str:
        if self._grams and len(text) >= self.WINDOW:
            text = self._mask_fragments(text)
        if self._short is not None:
            text = self._short.sub("***", text)
        return text

    def _mask_fragments(self, text: str) -> str:
        w, low = self.WINDOW, text.lower()
        covered = bytearray(len(text))
        for i in range(len(text) - w + 1):
            if low[i : i + w] in self._grams:
                covered[i : i + w] = b"\x01" * w
        if not any(covered):
            return text
        out: list[str] = []
        i = 0
        while i < len(text):
            if covered[i]:
                while i < len(text) and covered[i]:
                    i += 1
                out.append("***")
            else:
                out.append(text[i])
                i += 1
        return "".join(out)


def split_url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(`url` without `user:password@`, user, password); user/password None when absent."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, parts.username, parts.password


# -- replies that are not completions --------------------------------------------------------


def error_message(body: bytes, reason: str) -> str:
    """The server's error message (OpenAI or vLLM shape), else the start of the body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace") or reason
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if isinstance(error, str):
            return error[:500]
        if data.get("message"):
            return str(data["message"])[:500]
    return str(data)[:200]


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (delta seconds or an HTTP date), None if absent."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
