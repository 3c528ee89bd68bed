"""Fault injection for completion calls: what `--fault-*` asks for and the seeded draws.

Faults apply to completion calls only (`/v1/completions`, `/v1/chat/completions`; never
`/health`, `/v1/models` or `/sim/faults`), after the call has been authorized and validated and
BEFORE it reaches the engine. Each call draws one seeded uniform number that picks at most one
fault: an error status (`rate`, `status`), a hang (`hang_rate`: no answer until the client gives
up and closes, or `max_hang_s`), a dropped connection (`drop_rate`: headers and half a body, then
close) or a malformed body (`malformed_rate`: HTTP 200 with truncated JSON). `latency_ms` (plus up
to `latency_jitter_ms`) delays every completion call before the draw. Invariant: a faulted call
never reaches the engine, so it advances neither the prefix cache nor the token accounting; the
client's retry is the engine's first sight of that request. `SimApp.handle` decides the fault;
the transport carries it out on the wire; `GET /sim/faults` returns `FaultInjector.snapshot()`.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

__all__ = ["FAULT_KINDS", "FaultConfig", "FaultInjector"]

FAULT_KINDS: tuple[str, ...] = ("status", "hang", "drop", "malformed")
"""The faults a completion call can draw (latency is not drawn: it applies to every call)."""


# ---------------------------------------------------------------------------------------------
# Configuration and wire records


@dataclass(frozen=True)
class FaultConfig:
    """Faults injected into completion calls (see the module docstring). All off by default.

    The four rates are probabilities of disjoint outcomes of one draw per call, so their sum
    must be at most 1; a call that draws none of them is served normally.
    """

    rate: float = 0.0
    """Share of completion calls answered with `status` instead of a completion."""
    status: int = 503
    """The error status of `rate` (an HTTP error status, 400-599; e.g. 429, 500, 503)."""
    latency_ms: float = 0.0
    """Fixed delay added before every completion call is served (or faulted)."""
    latency_jitter_ms: float = 0.0
    """Extra delay drawn uniformly from [0, latency_jitter_ms] per call, on top of latency_ms."""
    hang_rate: float = 0.0
    """Share of calls never answered: the connection stays open, silent, until the client
    closes it (its timeout) or `max_hang_s` passes, then it is closed without a reply."""
    max_hang_s: float = 300.0
    """Longest a hung call holds its connection and thread."""
    drop_rate: float = 0.0
    """Share of calls whose reply is cut: status, headers and half the body, then close."""
    malformed_rate: float = 0.0
    """Share of calls answered HTTP 200 with a body that is not valid JSON."""
    seed: int | None = 0
    """Seed of the fault draws (None: a fresh random seed). Under concurrent clients the draws
    are taken in arrival order, so which call gets which fault depends on the arrival order."""

    def __post_init__(self) -> None:
        for name in ("rate", "hang_rate", "drop_rate", "malformed_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"fault {name} must be in [0, 1], got {value}")
        total = self.rate + self.hang_rate + self.drop_rate + self.malformed_rate
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fault rates must sum to at most 1, got {total:g} (rate={self.rate}, "
                f"hang_rate={self.hang_rate}, drop_rate={self.drop_rate}, "
                f"malformed_rate={self.malformed_rate})"
            )
        if not 400 <= self.status <= 599:
            raise ValueError(
                f"fault status must be an HTTP error status 400-599, got {self.status}"
            )
        if self.latency_ms < 0 or self.latency_jitter_ms < 0:
            raise ValueError(
                f"fault latency must be >= 0, got latency_ms={self.latency_ms} "
                f"latency_jitter_ms={self.latency_jitter_ms}"
            )
        if self.max_hang_s <= 0:
            raise ValueError(f"fault max_hang_s must be > 0, got {self.max_hang_s}")

    @property
    def enabled(self) -> bool:
        """Whether any fault or latency is configured."""
        return bool(
            self.rate
            or self.hang_rate
            or self.drop_rate
            or self.malformed_rate
            or self.latency_ms
            or self.latency_jitter_ms
        )


class FaultInjector:
    """Draws the fault of each completion call from `FaultConfig` (thread-safe, seeded).

    `counts` holds `calls` (draws taken) and one counter per `FAULT_KINDS` entry.
    """

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"calls": 0, **{kind: 0 for kind in FAULT_KINDS}}

    def draw(self) -> tuple[str | None, float]:
        """(the fault of the next call or None, its added latency in seconds)."""
        c = self.config
        if not c.enabled:
            with self._lock:
                self.counts["calls"] += 1
            return None, 0.0
        with self._lock:
            u = self._rng.random()
            jitter = self._rng.random() * c.latency_jitter_ms if c.latency_jitter_ms else 0.0
            fault: str | None = None
            edge = 0.0
            for kind, share in zip(
                FAULT_KINDS, (c.rate, c.hang_rate, c.drop_rate, c.malformed_rate), strict=True
            ):
                edge += share
                if u < edge:
                    fault = kind
                    break
            self.counts["calls"] += 1
            if fault is not None:
                self.counts[fault] += 1
        return fault, (c.latency_ms + jitter) / 1000.0

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
