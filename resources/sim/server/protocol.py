"""The request and error shapes of vLLM's OpenAI-compatible server, as pydantic models.

The one place a request field's type and bounds are declared. Checked against vLLM's own models
(`vllm/entrypoints/openai/completion/protocol.py` `CompletionRequest`, the chat protocol's
`ChatCompletionRequest`, `SamplingParams._verify_args`):

- unknown fields are ignored (vLLM logs and ignores them); numbers are read in pydantic's lax
  mode as vLLM reads them (`"5"` is 5 for an integer field, `"hot"` is no number);
- sampling bounds carry vLLM's wording, `"<field> must be ..., got <value>."` with vLLM's
  `(parameter=..., value=...)` suffix: temperature in [0, 2] and finite, top_p in (0, 1], top_k
  0 (disable), -1 or >= 1, min_p in [0, 1], presence/frequency penalties in [-2, 2],
  repetition_penalty > 0, max_tokens >= 1, min_tokens >= 0 and <= max_tokens;
- an empty prompt (missing, "" or a list holding "") is vLLM's 400 "Either prompt or
  prompt_embeds must be provided and non-empty."; token-id prompts are refused;
- fields the simulator cannot honour are refused with a 400 naming them instead of being
  ignored: `stream`, `n` != 1, `logprobs`/`top_logprobs`, `echo`, `suffix`, `use_beam_search`,
  `ignore_eos`, `stop_token_ids`. Sampling parameters are validated and have no effect: the
  simulated engine's answers are deterministic (`resources.sim.answers`).

Every failure becomes `ApiError` (`errors.py`) whose `param` is the field's dotted path, e.g.
`messages[0].role`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic import model_validator as _model_validator

from llm_assets.output_spec import OutputSpec
from resources.sim.server.errors import ApiError, bad_request
from resources.sim.server.structured import ResponseFormat, StructuredOutputs, output_spec

__all__ = [
    "ApiError",
    "ChatCompletionRequest",
    "CompletionRequest",
    "ParsedCall",
    "parse_call",
    "render_chat",
]

EMPTY_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty."
"""vLLM's wording for a missing or empty completions prompt."""

# ---------------------------------------------------------------------------------------------
# Field constraints with vLLM's wording


def _rule(rule: str, ok: Callable[[Any], bool]) -> AfterValidator:
    """A bound on a field: a value failing `ok` is a 400 "<field> must be <rule>, got <v>."."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if not ok(value):
            name = info.field_name or "value"
            raise bad_request(f"{name} must be {rule}, got {value}.", name, value)
        return value

    return AfterValidator(check)


_FINITE = _rule("a finite number", math.isfinite)
Temperature = Annotated[
    float, _FINITE, _rule("non-negative", lambda v: v >= 0), _rule("in [0, 2]", lambda v: v <= 2)
]
TopP = Annotated[float, _rule("in (0, 1]", lambda v: 0 < v <= 1)]
TopK = Annotated[int, _rule("0 (disable), or at least 1", lambda v: v >= -1)]
MinP = Annotated[float, _rule("in [0, 1]", lambda v: 0 <= v <= 1)]
Penalty = Annotated[float, _rule("in [-2, 2]", lambda v: -2 <= v <= 2)]
RepetitionPenalty = Annotated[float, _FINITE, _rule("greater than zero", lambda v: v > 0)]
MaxTokens = Annotated[int, _rule("at least 1", lambda v: v >= 1)]
MinTokens = Annotated[int, _rule("greater than or equal to 0", lambda v: v >= 0)]
N = Annotated[int, _rule("at least 1", lambda v: v >= 1)]


def _stops(value: str | list[str] | None) -> str | list[str] | None:
    if value == "" or (isinstance(value, list) and any(not s for s in value)):
        raise bad_request("stop cannot contain an empty string.", "stop")
    return value


def _given(value: Any) -> bool:
    """Whether a request set a field (False, None and [] are its defaults; 0 is a value)."""
    return value is not None and value is not False and value != []


class _Request(BaseModel):
    """Fields shared by completions and chat completions (vLLM's sampling parameters)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    seed: int | None = None
    min_tokens: MinTokens = 0
    n: N = 1
    stop: Annotated[str | list[str] | None, AfterValidator(_stops)] = None
    include_stop_str_in_output: bool = False
    stream: bool | None = False
    priority: int = 0
    """Lower runs earlier under a priority policy (vLLM's convention)."""
    user: str | None = None
    use_beam_search: bool = False
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_choice: list[str] | None = None
    guided_regex: str | None = None
    guided_json: dict[str, Any] | str | None = None
    response_format: ResponseFormat | None = None

    UNSUPPORTED: ClassVar[dict[str, str]] = {
        "stream": "it answers whole responses",
        "use_beam_search": "it has no beams",
        "ignore_eos": "its answers end where their spec ends",
        "stop_token_ids": "its token ids are stand-ins; use stop strings",
    }

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @_model_validator(mode="after")
    def _refuse_unsupported(self) -> _Request:
        for name, why in self.UNSUPPORTED.items():
            if _given(getattr(self, name)):
                raise bad_request(
                    f"{name} is not supported by the simulated server ({why}); leave it unset",
                    name,
                )
        if self.n != 1:
            raise bad_request(
                f"n must be 1 (the simulated server returns one choice per prompt), got {self.n}.",
                "n",
                self.n,
            )
        limit = self.requested_max_tokens
        if limit is not None and self.min_tokens > limit:
            raise bad_request(
                f"min_tokens must be less than or equal to max_tokens={limit}, "
                f"got {self.min_tokens}.",
                "min_tokens",
                self.min_tokens,
            )
        return self

    def output(self) -> OutputSpec:
        """The answer's `OutputSpec` (text when the request sets no constraint)."""
        return output_spec(
            structured_outputs=self.structured_outputs,
            guided={
                "guided_choice": self.guided_choice,
                "guided_regex": self.guided_regex,
                "guided_json": self.guided_json,
            },
            response_format=self.response_format,
        )


class CompletionRequest(_Request):
    """`POST /v1/completions`."""

    UNSUPPORTED: ClassVar[dict[str, str]] = {
        **_Request.UNSUPPORTED,
        "logprobs": "it has no token probabilities",
        "echo": "it does not return prompts",
        "suffix": "it does not insert text",
    }

    prompt: list[str] | str
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None

    @_model_validator(mode="before")
    @classmethod
    def _prompt_present(cls, data: Any) -> Any:
        if isinstance(data, dict):
            prompt = data.get("prompt")
            if prompt in (None, "", []) or (
                isinstance(prompt, list) and any(p == "" for p in prompt)
            ):
                raise bad_request(EMPTY_PROMPT, "prompt")
            if isinstance(prompt, list) and any(isinstance(p, int | list) for p in prompt):
                raise bad_request(
                    "token-id prompts are not supported by the simulated server; send text",
                    "prompt",
                )
        return data

    @property
    def prompts(self) -> tuple[str, ...]:
        return (self.prompt,) if isinstance(self.prompt, str) else tuple(self.prompt)


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: list[TextPart] | str

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


Messages = Annotated[list[ChatMessage], Field(min_length=1)]


class ChatCompletionRequest(_Request):
    """`POST /v1/chat/completions`."""

    UNSUPPORTED: ClassVar[dict[str, str]] = {
        **_Request.UNSUPPORTED,
        "logprobs": "it has no token probabilities",
        "top_logprobs": "it has no token probabilities",
    }

    messages: Messages
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class _MessageList(BaseModel):
    messages: Messages


# ---------------------------------------------------------------------------------------------
# Validation errors -> ApiError naming the field

_FIELD_NAMES = (
    frozenset(
        name
        for model in (CompletionRequest, ChatCompletionRequest, ChatMessage, TextPart)
        for name in model.model_fields
    )
    | StructuredOutputs.field_names()
)


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted path (`messages[0].content`); union member tags
    (`str`, `list[TextPart]`) are not fields and are left out."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _FIELD_NAMES:
            path += f".{part}" if path else part
    return path or "body"


def validated(model: type[BaseModel], body: Any) -> Any:
    """`model` validated from a parsed JSON body; the deepest error becomes a 400."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        worst = max(errors, key=lambda e: len(e["loc"]))  # a union's most specific member
        param = _param(worst["loc"])
        given = worst.get("input")
        shown = str(given)[:100] if isinstance(given, str | int | float) else None
        raise bad_request(f"{param}: {worst['msg']}", param, shown) from None


def render_chat(messages: Any) -> str:
    """One prompt from chat messages, deterministically: `<|role|>\\ncontent\\n` per message,
    then `<|assistant|>\\n` (the generation prompt). Equal message lists give equal prompts, so
    a shared system message is a shared prefix.

    >>> render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    '<|system|>\\nBe brief.\\n<|user|>\\nHi\\n<|assistant|>\\n'
    """
    if not (messages and isinstance(messages[0], ChatMessage)):
        messages = validated(_MessageList, {"messages": messages}).messages
    return "".join(f"<|{m.role}|>\n{m.text}\n" for m in messages) + "<|assistant|>\n"


@dataclass(frozen=True)
class ParsedCall:
    """A validated completions / chat call: its prompts and how to answer them."""

    prompts: tuple[str, ...]
    max_tokens: int
    output: OutputSpec
    priority: int
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False


def lone_surrogate(value: Any, where: str = "") -> str | None:
    """The dotted path (`messages[0].content`) of the first string in a parsed JSON body that
    holds a lone surrogate (`"\\ud800"` decodes to one; it has no UTF-8 form, so no tokenizer
    can take it), else None. Keys are checked too."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(key, where or "body") or lone_surrogate(
                item, f"{where}.{key}" if where else str(key)
            )
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if found := lone_surrogate(item, f"{where}[{i}]"):
                return found
    return None


def parse_call(body: Any, *, chat: bool, default_max_tokens: int) -> ParsedCall:
    """Validate a completions (`chat=False`) or chat completions body; a 400 names the field.
    A string with a lone surrogate is a 400 naming its field (`lone_surrogate`)."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object", "body")
    if (where := lone_surrogate(body)) is not None:
        raise bad_request(
            "text holds a lone UTF-16 surrogate (e.g. \\ud800), which is not valid Unicode; "
            "send well-formed text",
            where,
        )
    request = validated(ChatCompletionRequest if chat else CompletionRequest, body)
    prompts = (render_chat(request.messages),) if chat else request.prompts
    return ParsedCall(
        prompts=prompts,
        max_tokens=request.requested_max_tokens or default_max_tokens,
        output=request.output(),
        priority=request.priority,
        stop=request.stops,
        include_stop_str_in_output=request.include_stop_str_in_output,
    )
