"""Stop strings, as vLLM applies them: the answer ends before the first stop string.

Invariants (`cut_at_stop`): the returned text is a prefix of the answer; it contains no stop
string, except the one it ends with when `include_stop_str_in_output`; the stop string found is
the one that occurs earliest in the answer (the first listed on a tie), so it is the stop a
token-by-token generator meets first.

On the simulated engine the answer is known before it is generated (a pure function of prompt,
spec and `max_tokens`: `resources.sim.answers`), so `tokens_through_stop` asks the engine for
just the tokens up to the one that completes the stop string, as vLLM stops generating there:
the simulated time, the KV blocks and `usage.completion_tokens` then all count those tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Cut", "cut_at_stop", "tokens_through_stop"]


@dataclass(frozen=True)
class Cut:
    text: str
    """What the client gets."""
    stop: str | None
    """The stop string met (vLLM's `stop_reason`), or None."""
    through: str
    """The answer up to and including that stop string (what was generated)."""


def cut_at_stop(answer: str, stops: Sequence[str], include: bool = False) -> Cut:
    """`answer` cut before its earliest stop string (kept when `include`).

    >>> cut_at_stop("[sim] lorem ipsum dolor", ["dolor", "ipsum"])
    Cut(text='[sim] lorem ', stop='ipsum', through='[sim] lorem ipsum')
    >>> cut_at_stop("abc", ["x"]).stop is None
    True
    """
    best: tuple[int, str] | None = None
    for stop in stops:
        at = answer.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    if best is None:
        return Cut(answer, None, answer)
    at, stop = best
    through = answer[: at + len(stop)]
    return Cut(through if include else answer[:at], stop, through)


def tokens_through_stop(
    preview: Callable[[int], str],
    count_tokens: Callable[[str], int],
    max_tokens: int,
    stops: Sequence[str],
) -> int:
    """The `max_tokens` to ask the engine for: the tokens of the answer through its first stop
    string, when the answer `preview(k)` (the answer under `max_tokens=k`) is the same text up
    to that stop; `max_tokens` unchanged when no stop string occurs or that cannot be shown."""
    cut = cut_at_stop(preview(max_tokens), stops)
    if cut.stop is None:
        return max_tokens
    needed = max(1, min(max_tokens, count_tokens(cut.through)))
    return needed if preview(needed).startswith(cut.through) else max_tokens
