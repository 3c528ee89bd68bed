"""The hostile-server cases of the fault matrix (issue 11): servers that hang the client,
lie in HTTP 200s, reject the key or never answer.

Each case starts a `HostileServer` on 127.0.0.1, sends the seeded synthetic query
(`synthetic_requests`) through `OpenAIEngine` and `run_requests` once, and reports the same
row accounting as the other cases (`rows_in`, `answered`, `failed`, `lost` = rows with no
response at all, must be 0), `requests_sent` (completion calls the server saw),
`wall_s` and `bound_s`, the documented bound on the step's wall time:

- `drip-feed` (every reply dripped 1 byte / 0.5 s, headers first), `endless-body` (every
  reply a chunked body that never ends) and `dead-server` (accepts, never answers): each
  attempt is cut at `timeout_s`, and the circuit breaker stops the step after
  `breaker_failures` consecutive timeouts, so the bound is the server probe (`min(timeout_s,
  10)`) + ceil(breaker_failures / max_concurrency) x (timeout_s + max_backoff_s) + 1 s;
- `malformed-200`: 10% of calls answer HTTP 200 with a malformed completion (text a number
  or null, 3 choices, negative or 2**70 usage, cached > prompt), cycling through the shapes;
  each is retried like a 5xx, so every row ends answered;
- `wrong-key`: every call answers 401; the probe (`GET /models`) finds it and nothing is
  sent; `requests_sent` must stay <= max_concurrency (a handful) even when `/models` is open;
- `implausible-usage`: every call for one row in 20 (row number 7 mod 20, every retry too)
  answers HTTP 200 with a well-formed completion whose usage the request cannot have, cycling
  through prompt_tokens 2**62, cached_tokens > prompt_tokens, and completion_tokens 2**40 for a
  `max_tokens` of 2; the other rows get a plain completion. Those rows must end failed with the
  reason (`implausible_rows`, `implausible_failed_with_reason`; `implausible_answered` must be
  0), never answered or lost, and the cost recorded for the run (`recorded_cost_usd`, the
  highest over `PRICING` of the engine's own totals) must stay within `cost_bound_usd`, the
  cost of every answered row at the most tokens its request can have
  (`resources.openai.wire.UsageBounds`).
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from typing import Any

from benchmarks.lib.hostile import Drip, Endless, HostileServer, Reply, Silent, completion_body
from resources.runner import run_requests

__all__ = ["HOSTILE_CASES", "run_hostile_case"]

BAD_SHAPES: tuple[dict[str, Any], ...] = (
    {"choices": [{"text": 7}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
    {"choices": [{"text": None}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
    {"choices": [{"text": "Yes"}] * 3, "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
    {"choices": [{"text": "Yes"}], "usage": {"prompt_tokens": -5, "completion_tokens": 1}},
    {"choices": [{"text": "Yes"}], "usage": {"prompt_tokens": 2**70, "completion_tokens": 1}},
    {"choices": [{"text": "Yes"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                             "prompt_tokens_details": {"cached_tokens": 9}}},
)  # fmt: skip

IMPLAUSIBLE_USAGE: tuple[dict[str, Any], ...] = (
    {"prompt_tokens": 2**62, "completion_tokens": 1},
    {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 11}},
    {"prompt_tokens": 10, "completion_tokens": 2**40},
)
"""The usages `implausible-usage` replies with, by row (row // 20 cycles through them)."""
_ROW = re.compile(r"Review (\d+): ")

HOSTILE_CASES: dict[str, str] = {
    "drip-feed": "every reply dripped 1 byte / 0.5 s",
    "endless-body": "every reply a chunked body that never ends",
    "malformed-200": "10% HTTP 200 with a malformed completion",
    "wrong-key": "every call 401 (key rejected)",
    "dead-server": "accepts connections, never answers",
    "implausible-usage": "5% of rows: HTTP 200 with usage the request cannot have, every retry",
}


def implausible_row(row: int) -> dict[str, Any] | None:
    """The usage `implausible-usage` answers for synthetic row `row` (None: a plain reply)."""
    if row % 20 != 7:
        return None
    return IMPLAUSIBLE_USAGE[(row // 20) % len(IMPLAUSIBLE_USAGE)]


def _row_of(body: dict) -> int | None:
    """The synthetic row a request body is for (its prompt says `Review N: `)."""
    match = _ROW.search(str(body.get("prompt") or body.get("messages") or ""))
    return int(match.group(1)) if match else None


def _script(case: str, seed: int):
    rng = random.Random(seed)
    lock = threading.Lock()
    state = {"n": 0}

    def script(method: str, path: str, body: dict):
        if case == "wrong-key":
            return Reply(401, {"error": {"message": "Incorrect API key provided"}})
        if case == "dead-server":
            return Silent()
        if method == "GET":
            return Reply(404, {"error": {"message": "no such route"}})
        if case == "drip-feed":
            return Drip(body=completion_body(), interval_s=0.5)
        if case == "endless-body":
            return Endless(interval_s=0.05)
        if case == "implausible-usage":
            row = _row_of(body)
            usage = implausible_row(row) if row is not None else None
            if usage is None:
                return Reply(body=completion_body(cached=0))
            with lock:
                state["n"] += 1
            return Reply(body={"choices": [{"index": 0, "text": "Yes", "finish_reason": "stop"}],
                               "usage": usage})  # fmt: skip
        with lock:
            bad = rng.random() < 0.1
            state["n"] += bad
            shape = BAD_SHAPES[state["n"] % len(BAD_SHAPES)]
        return Reply(body=shape if bad else completion_body(cached=0))

    return script, state


def run_hostile_case(case: str, rows: int, settings: Any) -> dict[str, Any]:
    """Run one case (see the module docstring); `settings` is a `ClientSettings`."""
    from benchmarks.lib.fault_setup import _row_counts, make_engine, synthetic_requests

    if case not in HOSTILE_CASES:
        raise ValueError(f"unknown hostile case {case!r}; expected one of {list(HOSTILE_CASES)}")
    requests = synthetic_requests(rows, settings.seed)
    start = time.perf_counter()
    script, injected = _script(case, settings.seed)
    with HostileServer(script, max_action_s=60.0) as srv:
        key = "sk-benchmark-wrong-key" if case == "wrong-key" else None
        engine = make_engine(srv.url, settings, api_key=key)
        outcome = run_requests(engine, case, requests, chunk_size=settings.chunk_size)
        calls = srv.calls
    wall = time.perf_counter() - start
    result = _row_counts([r.id for r in requests], outcome.responses)
    rounds = math.ceil(settings.breaker_failures / settings.max_concurrency)
    bound = min(settings.timeout_s, 10.0) + rounds * (settings.timeout_s + settings.max_backoff_s)
    result.update(
        requests_sent=calls,
        requests_resent_after_rerun=0,
        http_calls=calls,
        faults_injected={case: calls} if case != "malformed-200" else {},
        stopped=outcome.stopped,
        wall_s=round(wall, 2),
        bound_s=round(bound + 1.0, 2) if case in ("drip-feed", "endless-body", "dead-server")
        else None,
    )  # fmt: skip
    if case == "malformed-200":
        result["faults_injected"] = {"malformed": injected["n"]}
    if case == "implausible-usage":
        result["faults_injected"] = {"implausible_usage": injected["n"]}
        result.update(_implausible_report(requests, outcome, engine))
    return result


def _implausible_report(requests: list, outcome: Any, engine: Any) -> dict[str, Any]:
    """What `implausible-usage` adds: how the rows given implausible usage ended, and the
    recorded cost against its bound (see the module docstring)."""
    from llm_assets.optimizer.cost import PRICING, token_cost_usd
    from llm_assets.pipeline.pricing import engine_costs
    from resources.openai.wire import UsageBounds

    by_id = {r.id: r for r in outcome.responses}
    bad = [r for r in requests if implausible_row(int(r.id.removeprefix("row-"))) is not None]
    ended = [by_id.get(r.id) for r in bad]
    answered = [r for r in requests if r.id in by_id and by_id[r.id].error is None]
    bounds = [UsageBounds.of(r.prompt, r.max_tokens) for r in answered]
    most_prompt = sum(b.prompt_tokens for b in bounds)
    most_output = sum(b.output_tokens or 0 for b in bounds)
    bound = max(token_cost_usd(p, most_prompt, 0, most_output) for p in PRICING.values())
    recorded = max(engine_costs(engine, outcome.stats).values(), default=0.0)
    reasons = [e.error for e in ended if e is not None and e.error]
    return {
        "implausible_rows": len(bad),
        "implausible_answered": sum(1 for e in ended if e is not None and e.error is None),
        "implausible_failed_with_reason": sum(1 for why in reasons if "tokens" in why),
        "implausible_reason_example": reasons[0] if reasons else None,
        "recorded_prompt_tokens": outcome.stats.prompt_tokens,
        "recorded_output_tokens": outcome.stats.output_tokens,
        "recorded_cost_usd": recorded,
        "cost_bound_usd": bound,
    }
