"""One LLM stage sent: the plan's prompts as engine requests, the answers as `llm_outputs`
rows (`outputs_frame`), and the one stage runner every caller uses (`send_stage`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import call_max_tokens, sendable
from llm_assets.pipeline.rows import INPUT
from llm_assets.query.parts import LLMCall
from resources.engine import LLMEngine, Request, Response
from resources.runner import RunOutcome, raise_if_too_many_errors, run_requests

Progress = Callable[[int, int], None]


def requests_from_plan(
    plan: pd.DataFrame, call: LLMCall, max_tokens: int | None = None
) -> list[Request]:
    """The requests to send: every planned prompt that has no planning error, with the call's
    output spec and `max_tokens` (default: the call's)."""
    rows = sendable(plan)
    ids, prompts = plan["request_id"].to_numpy()[rows], plan["prompt"].to_numpy()[rows]
    limit = max_tokens or call.max_tokens
    return [
        Request(id=rid, prompt=prompt, max_tokens=limit, output=call.output)
        for rid, prompt in zip(ids, prompts, strict=True)
    ]


def outputs_frame(plan: pd.DataFrame, responses: Sequence[Response], call: LLMCall) -> pd.DataFrame:
    """One row per request of `plan`: the answer (or error), spec violation, accounting and
    which replica answered it (`replica`: its base URL without credentials; None for an
    in-process engine, an error, or an answer cached before replicas were recorded)."""
    by_id = {r.id: r for r in responses}
    planned = plan["error"] if "error" in plan else [None] * len(plan)
    rows = []
    for input_id, rid, plan_error in zip(plan[INPUT], plan["request_id"], planned, strict=True):
        r = by_id.get(rid)
        if r is None:
            error = plan_error if isinstance(plan_error, str) else "no response from the engine"
            r = Response(rid, "", 0, 0, 0, 0.0, 0.0, error=error)
        violation = None if r.error else call.output.violation(r.text)
        rows.append(
            {
                INPUT: int(input_id),
                "request_id": rid,
                "answer": None if r.error else r.text.strip(),
                "error": r.error,
                "violation": violation,
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "output_tokens": r.output_tokens,
                "ttft_s": r.ttft_s,
                "finish_s": r.finish_s,
                "replica": r.replica,
            }
        )
    columns = [INPUT, "request_id", "answer", "error", "violation", "prompt_tokens"]
    columns += ["cached_tokens", "output_tokens", "ttft_s", "finish_s", "replica"]
    return pd.DataFrame(rows, columns=columns)


def replica_counts(outputs: pd.DataFrame) -> dict[str, int]:
    """Answered requests of an `outputs_frame` per replica that answered them (a fleet's
    share; empty for an in-process engine), in URL order."""
    answered = outputs[outputs["error"].isna() & outputs["replica"].notna()]
    return {str(k): int(v) for k, v in sorted(answered["replica"].value_counts().items())}


def send_stage(
    engine: LLMEngine,
    relquery: str,
    plan: pd.DataFrame,
    call: LLMCall,
    options: QueryOptions,
    *,
    cache=None,
    progress: Progress | None = None,
    report: Callable[[pd.DataFrame, RunOutcome], None] | None = None,
    answered: Mapping[str, Response] | None = None,
) -> tuple[pd.DataFrame, RunOutcome]:
    """Send one planned LLM stage and return (`llm_outputs` rows, the runner's outcome). The
    one path every caller takes (`run_query`, the `llm_outputs` asset), in this order:

    1. the plan's sendable prompts become requests with the call's generation limit;
    2. they run in chunks of `options.chunk_size` when a response cache commits progress
       (a rerun resends at most one chunk), else as one batch (chunk boundaries drain the
       engine's batches), answered requests read from `answered` (by request key: answers
       this run already paid for, the field-order guard's sample) and `cache` first;
    3. the answers become `outputs_frame` rows;
    4. `report(outputs, outcome)` runs (the caller's metrics), also for a stage that fails;
    5. a stopped run or an error rate over `options.max_error_rate` raises `TooManyErrors`."""
    requests = requests_from_plan(plan, call, call_max_tokens(call, options))
    chunk = options.chunk_size if cache is not None and cache.enabled else len(requests)
    outcome = run_requests(
        engine,
        relquery,
        requests,
        cache=cache,
        chunk_size=max(1, chunk),
        progress=progress,
        answered=answered,
    )
    outputs = outputs_frame(plan, outcome.responses, call)
    if report is not None:
        report(outputs, outcome)
    raise_if_too_many_errors(outcome, options.max_error_rate)
    return outputs, outcome


@dataclass(frozen=True)
class StageSend:
    """One planned LLM stage, ready to go: the arguments of `send_stage`. The component's
    `execute` receives it (a subclass may wrap, change or replace the send)."""

    engine: LLMEngine
    relquery: str
    plan: pd.DataFrame
    call: LLMCall
    options: QueryOptions
    cache: object = None
    progress: Progress | None = None
    report: Callable[[pd.DataFrame, RunOutcome], None] | None = None
    answered: Mapping[str, Response] | None = None

    def send(self) -> tuple[pd.DataFrame, RunOutcome]:
        """`send_stage` with these arguments."""
        return send_stage(
            self.engine,
            self.relquery,
            self.plan,
            self.call,
            self.options,
            cache=self.cache,
            progress=self.progress,
            report=self.report,
            answered=self.answered,
        )
