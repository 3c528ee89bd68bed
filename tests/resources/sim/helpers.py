"""Shared helpers: a tokenizer with exact control over token ids, and request builders."""

from __future__ import annotations

from llm_assets.output_spec import OutputSpec
from resources.engine import Request


class IntTokenizer:
    """Prompts are space-separated integers; each integer is one token id."""

    def encode(self, text: str) -> list[int]:
        return [int(w) for w in text.split()]


def prompt(*ranges: range | list[int]) -> str:
    return " ".join(str(t) for r in ranges for t in r)


def req(rid: str, text: str, max_tokens: int = 1, spec: OutputSpec | None = None) -> Request:
    return Request(id=rid, prompt=text, max_tokens=max_tokens, output=spec or OutputSpec.text())
