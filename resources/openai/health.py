"""Which replicas of an `OpenAIEngine` are given up, for the whole life of the engine.

`FleetHealth` is owned by the engine and outlives one run (`resources.openai.run.serve_run`,
one chunk): a replica given up in one chunk is not sent anything in the next ones. Invariants:

- `give_up(url, reason, now)` records the reason and when the replica may be probed again:
  `now + backoff`, the back-off starting at `first_backoff_s` and doubling (capped at
  `max_backoff_s`) each time the replica is given up again without having served a whole
  run in between; a replica that ends a run alive and having answered (`served_run`) gets the
  first back-off again;
- `due(now)`: the given-up replicas whose back-off has passed (to be probed before the run;
  `revive` when the probe answers as the fleet's deployment, else `give_up` again, doubling);
- `dead(url)` is the reason while the replica is given up, else None; `live(urls)` keeps the
  others, in order.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["FIRST_BACKOFF_S", "MAX_BACKOFF_S", "FleetHealth"]

FIRST_BACKOFF_S = 5.0
"""Seconds before a replica given up is probed again the first time (then doubling)."""
MAX_BACKOFF_S = 300.0
"""The longest back-off between two probes of a replica given up."""


@dataclass
class _GivenUp:
    reason: str
    until: float
    """`time.monotonic()` after which the replica is probed again."""


class FleetHealth:
    """The given-up replicas of one engine (see the module invariants); thread-safe."""

    def __init__(
        self, first_backoff_s: float = FIRST_BACKOFF_S, max_backoff_s: float = MAX_BACKOFF_S
    ) -> None:
        if not 0 < first_backoff_s <= max_backoff_s:
            raise ValueError(
                "fleet back-off must satisfy 0 < first_backoff_s <= max_backoff_s, got "
                f"first={first_backoff_s} max={max_backoff_s}"
            )
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self._given_up: dict[str, _GivenUp] = {}
        self._last_backoff: dict[str, float] = {}
        self.give_ups: dict[str, int] = {}
        """How many times each replica was given up over the engine's life."""
        self._lock = threading.Lock()

    def give_up(self, url: str, reason: str, now: float) -> None:
        with self._lock:
            last = self._last_backoff.get(url)
            backoff = self.first_backoff_s if last is None else min(self.max_backoff_s, 2 * last)
            self._last_backoff[url] = backoff
            self._given_up[url] = _GivenUp(reason, now + backoff)
            self.give_ups[url] = self.give_ups.get(url, 0) + 1

    def revive(self, url: str) -> None:
        """The replica answered its probe: it is sent work again (its back-off is kept
        until it serves a whole run)."""
        with self._lock:
            self._given_up.pop(url, None)

    def served_run(self, url: str) -> None:
        """The replica ended a run alive and answering: its next give-up starts afresh."""
        with self._lock:
            if url not in self._given_up:
                self._last_backoff.pop(url, None)

    def dead(self, url: str) -> str | None:
        with self._lock:
            entry = self._given_up.get(url)
            return None if entry is None else entry.reason

    def due(self, now: float) -> list[str]:
        with self._lock:
            return [url for url, entry in self._given_up.items() if entry.until <= now]

    def live(self, urls: list[str]) -> list[str]:
        with self._lock:
            return [url for url in urls if url not in self._given_up]
