"""Any OpenAI-compatible server (vLLM, llama.cpp's llama-server, SGLang, a hosted API, the
sim's server) as an `LLMEngine`.

`OpenAIEngine.run` is a plain synchronous call that drives an asyncio loop of
`max_concurrency` workers over one `httpx.AsyncClient` (`resources.openai.run.serve_run`);
this module holds the engine's settings, secrets and HTTP plumbing. Invariants:

- one `Response` per `Request`, in request order; every request ends answered or with an
  `error` naming why (attempts and the last status or exception; never the key);
- hard deadlines: one attempt (connect, send, headers AND body) ends within `timeout_s` of
  wall-clock time, one request within `request_deadline_s` across attempts and backoffs,
  however slowly the server drips its reply or however long its chunked body runs (the
  attempt is cancelled, not waited for read by read); a reply body over `max_reply_bytes` is
  cut off. So one request costs at most `min(request_deadline_s, (max_retries + 1) x
  (timeout_s + max_backoff_s))`;
- every HTTP 200 is validated (`resources.openai.wire.completion_from_reply`); a malformed one
  is retried like a 5xx and, if it stays malformed, becomes an error row for that request only,
  naming the request id; the run's other answers are returned as usual;
- retried: connection errors, timeouts, 408/409/429, 5xx, malformed 200s, with exponential
  backoff and jitter (`initial_backoff_s * 2**attempt` capped at `max_backoff_s`, times a
  uniform factor in [0.5, 1)), or the server's `Retry-After` capped at `max_backoff_s`; a
  `Retry-After` above the cap is logged and named in the request's error if it fails;
  other 4xx are final at once;
- fail fast: the first 401/403 (on `GET /models` before anything is sent, or on a completion),
  or a 404 saying the model does not exist (`openai.attempt.model_missing`), stops the run:
  no further request is sent, requests in flight are cancelled, and every unanswered request
  gets an error naming the one-line reason; `RunResult.stopped` carries it. Likewise after
  `breaker_failures` attempts in a row without an answer at a server (no reply, a timeout, a
  5xx, a malformed 200: a circuit breaker per replica, ONE count, reset only by an answer
  from that replica; 0 disables it) or at once on a 5xx saying no worker stands behind it
  (a router with every backend down) when it is the last replica alive. On a server that
  accepts connections and never answers, a run therefore stops after about
  `ceil(breaker_failures / max_concurrency)` rounds of `timeout_s` (plus backoffs);
- every replica is probed at start, at once (`resources.openai.roster`): replicas that
  report different deployments (model ids, owner, style, context window) refuse the fleet
  before anything is sent, a URL listed twice is a ValueError; a replica that gives no reply
  is given up. A replica given up stays so for the engine's life (`self.health`,
  `resources.openai.health`: later chunks plan nothing on it) and is probed again only after
  its back-off (5 s, doubling); with none alive a run stops before sending, in one line. A
  hung or very slow replica of a fleet is given up by a watchdog (`resources.openai.stall`)
  and its unstarted work moves; an answer it still gives is kept (never sent twice);
- each answer names the replica that gave it (`Response.replica`: the URL without
  credentials);
- replicas: `base_url` may list several servers (comma-separated, or `base_urls`); the
  run is planned over them by `resources.openai.placement` (routing `affinity`: each prefix group
  on one replica, replicas balanced by token mass; `round_robin`: request i to replica
  i mod N) and served by `resources.openai.fleet`: each replica has `max_concurrency` lanes,
  an idle replica steals whole unstarted groups from the back of the busiest queue, and a
  replica given up (its circuit breaker, a router with no workers, the stall watchdog) has
  its unfinished requests moved to the others; the run stops
  only when no replica is left. Groups continuing the previous chunk of the same relQuery
  go back to the replica that served their start. `routing=router`: one URL (a router in
  front of the replicas) and each request carries its group's key in `routing_key_header`
  (what vllm-router's `consistent_hash` policy hashes);
- prefix affinity (`prefix_affinity=True`): inside a replica, a group is served in order by
  one worker, so on a server with per-slot caches (llama.cpp) it stays on one slot, and on
  vLLM its leader fills the cache before the rest arrive. A group longer than
  `ceil(n / max_concurrency)` (n: the replica's planned requests) is cut into pieces that
  start only after the group's first request was answered;
- `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens`; a server that does
  not report it counts 0 on the response, `RunStats.cached_tokens_unknown` counts those
  responses, and ONE warning per engine gives advice that fits the server style;
- secrets: the API key goes out only as an `Authorization: Bearer` header, URL credentials
  only as HTTP basic auth; `base_url`, `repr`/`str` and every error or log line show neither
  (`Redactor`: any 8+ character fragment of either, in any case, is masked);
- `max_tokens` (when set) replaces every request's output budget (the runner keys the cache
  on it); `max_model_len` is the server's context window, read once from `GET /models` (vLLM)
  or `GET /props` (llama.cpp), None when the server does not say;
- `RunStats.engine == "openai"`; `engine_time_s` is the measured wall makespan of the run;
  `ttft_s == finish_s` == seconds from the run's start until that response arrived.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from resources.configs import OpenAIEngineConfig
from resources.engine import LLMEngine, Request, RunResult, RunStats
from resources.openai.health import FleetHealth
from resources.openai.placement import CostRates, FleetPlan, Part, plan_fleet
from resources.openai.probe import ServerInfo, probe_server
from resources.openai.roster import answers, check_roster, deployment, probe_all
from resources.openai.run import serve_run
from resources.openai.settings import ClientSettings, ProgressCallback
from resources.openai.tokens import plan_tokenizer
from resources.openai.wire import SERVER_STYLES

__all__ = ["SERVER_STYLES", "OpenAIEngine"]

log = logging.getLogger(__name__)

REPROBE_TIMEOUT_S = 2.0
"""The longest a probe of a given-up replica may delay a chunk (a healthy server answers
`GET /models` in milliseconds; a hung one would otherwise cost `min(timeout_s, 10)` per probe)."""


class OpenAIEngine(LLMEngine):
    """Sends each request to `{base_url}/completions` (or `/chat/completions` with
    `use_chat=True`); see the module invariants."""

    name = "openai"

    def __init__(
        self,
        *args: Any,
        config: OpenAIEngineConfig | None = None,
        api_key: str | None = None,
        progress: ProgressCallback | None = None,
        **fields: Any,
    ) -> None:
        """`OpenAIEngine(base_url, model, **fields)` or `OpenAIEngine(config=...)`: the
        fields are `OpenAIEngineConfig`'s. Not config: `api_key` (a secret, kept apart and
        never shown) and `progress` (called with requests done, total)."""
        self.settings = ClientSettings(
            OpenAIEngineConfig.resolve(config, args, fields), api_key, progress
        )
        """What a run's requests need: settings, secrets, HTTP plumbing (never the engine)."""
        self.config: OpenAIEngineConfig = self.settings.config
        self.base_urls = self.settings.base_urls
        self.base_url = self.base_urls[0]
        self._tails: tuple[str, list[str | None]] = ("", [])
        self._speeds: tuple[str, list[float | None]] = ("", [])
        self._info: ServerInfo | None = None
        self._info_lock = threading.Lock()
        self._refusal: str | None = None
        self.health = FleetHealth()
        """Which replicas are given up; outlives runs (`resources.openai.health`)."""

    @property
    def model(self) -> str:
        return self.config.model or ""

    @property
    def hardware(self) -> str:
        return self.config.hardware

    @property
    def temperature(self) -> float:
        return self.config.temperature

    @property
    def max_tokens(self) -> int | None:
        return self.config.max_tokens

    @property
    def use_chat(self) -> bool:
        return self.config.use_chat

    @property
    def server_style(self) -> str:
        return self.config.server_style

    @property
    def max_concurrency(self) -> int:
        return self.config.max_concurrency

    @property
    def honours_priority(self) -> bool:
        """Whether priorities are sent (the server must schedule by them: vLLM's
        `--scheduling-policy priority`)."""
        return self.config.send_priority

    def __repr__(self) -> str:
        key = "'***'" if self.settings.has_api_key else "None"
        urls = ",".join(self.base_urls)
        return (
            f"OpenAIEngine(base_url={urls!r}, model={self.model!r}, api_key={key}, "
            f"max_concurrency={self.max_concurrency}, use_chat={self.use_chat}, "
            f"server_style={self.server_style!r})"
        )

    __str__ = __repr__

    # -- what the server is ----------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """What the fleet's replicas say about themselves (`GET /models`, `GET /props`; asked
        once per engine, of every replica at once; never raises): the first replica that
        answered (the fleet is refused when they do not agree, `resources.openai.roster`)."""
        with self._info_lock:
            if self._info is None:
                infos = [ServerInfo()] * len(self.base_urls)
                if self.config.probe:
                    infos = _run_coroutine(lambda: probe_all(self.base_urls, self._probe))
                    self._refusal = check_roster(self.base_urls, infos)
                    for url, info in zip(self.base_urls, infos, strict=True):
                        if info.no_reply is not None:
                            self.health.give_up(url, _no_reply(info), time.monotonic())
                self._info = next(
                    (i for i in infos if i.auth_error is not None or i.identity is not None),
                    ServerInfo(),
                )
            return self._info

    def _probe(self, url: str, timeout_s: float = 10.0) -> Any:
        return probe_server(
            url,
            self.settings.headers(""),
            self.settings.auth(),
            timeout_s=min(self.config.timeout_s, timeout_s),
            redact=self.settings.redact,
        )

    def _probe_due(self) -> None:
        """Probe again, at once, the given-up replicas whose back-off has passed: one that
        answers as the fleet's deployment is sent work again, any other stays given up
        (its back-off doubles). At most `REPROBE_TIMEOUT_S` before the run starts."""
        due = self.health.due(time.monotonic()) if self.config.probe else []
        if not due:
            return
        infos = _run_coroutine(
            lambda: probe_all(due, lambda url: self._probe(url, REPROBE_TIMEOUT_S))
        )
        fleet = self.server_info()
        for url, info in zip(due, infos, strict=True):
            if not answers(info):
                self.health.give_up(url, info.auth_error or _no_reply(info), time.monotonic())
            elif fleet.identity is not None and deployment(info) != deployment(fleet):
                reason = f"serves {deployment(info)}, not the fleet's {deployment(fleet)}"
                self.health.give_up(url, reason, time.monotonic())
            else:
                log.info("replica %s answers its probe again; it is sent work", url)
                self.health.revive(url)

    @property
    def resolved_style(self) -> str:
        """The server style in use (`auto` resolved by asking the server)."""
        if self.server_style != "auto":
            return self.server_style
        return self.server_info().style or "vllm"

    @property
    def max_model_len(self) -> int | None:
        """The server's context window in tokens, None when it does not say."""
        return self.server_info().max_model_len

    @property
    def endpoint(self) -> str:
        return self.settings.endpoint_of(self.base_url)

    def body(self, request: Request, style: str | None = None) -> dict[str, Any]:
        """The JSON body sent for `request` (never holds the key)."""
        return self.settings.body(request, style)

    @property
    def identity(self) -> str:
        """The server as it reports itself (`ServerInfo.identity`, asked once; "unknown"
        without an answer or with `probe=False`) and the endpoint: `vllm;completions`."""
        reported = self.server_info().identity or "unknown"
        if self._refusal is not None:  # never the answers of any one deployment
            reported = f"refused fleet ({self._refusal})"
        return f"{reported};{'chat' if self.use_chat else 'completions'}"

    @property
    def num_replicas(self) -> int:
        """Replicas the client addresses itself (1 for a single server or a router)."""
        return len(self.base_urls)

    # -- a run ------------------------------------------------------------------------------

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        requests = list(requests)
        start = time.perf_counter()
        info = self.server_info() if requests else ServerInfo()
        if requests:
            self._probe_due()
        style = self.server_style if self.server_style != "auto" else (info.style or "vllm")
        # a refused fleet is sent nothing, not even the planner's /tokenize
        plan = self.plan(relquery_id, requests) if requests and self._refusal is None else None
        tails = self._tails[1] if self._tails[0] == relquery_id else []
        responses, stopped, tails = _run_coroutine(
            lambda: serve_run(
                self.settings,
                plan,
                tails,
                relquery_id,
                requests,
                style,
                info,
                start,
                self.health,
                self._refusal,
            )
        )
        if plan is not None:
            self._tails = (relquery_id, tails)
            self._speeds = (relquery_id, plan.measured_speeds)
        makespan = time.perf_counter() - start
        errors = sum(1 for r in responses if r.error is not None)
        if errors:
            log.warning("relquery %s: %d of %d requests failed", relquery_id, errors, len(requests))
        stats = RunStats.from_responses(
            responses,
            engine=self.name,
            model=self.model,
            hardware=self.hardware,
            engine_time_s=makespan,
            wall_time_s=makespan,
        )
        return RunResult(responses=responses, stats=stats, stopped=stopped)

    def plan(self, relquery_id: str, requests: list[Request]) -> FleetPlan:
        """Which replica serves which requests (`resources.openai.placement`); a router or a
        single server is a fleet of one. Groups continuing an earlier chunk of the same
        relQuery go back to the replica that served their start. Replicas given up
        (`health`) get nothing; with none left alive, the plan is over all of them (the run
        stops before sending)."""
        tails = self._tails[1] if self._tails[0] == relquery_id else []
        tails = [*tails, *[None] * (self.num_replicas - len(tails))]
        measured = self._speeds[1] if self._speeds[0] == relquery_id else []
        measured = [*measured, *[None] * (self.num_replicas - len(measured))]
        live = [k for k, url in enumerate(self.base_urls) if self.health.dead(url) is None]
        live = live or list(range(self.num_replicas))
        prompts = [r.prompt for r in requests]
        info = self.server_info()
        # the server's tokenizer when it has /tokenize and the plan spreads work (several
        # URLs, or group keys for a router); the sim server has none (its default is the
        # approximate one, which the planner uses otherwise)
        ask = (self.num_replicas > 1 or self.settings.routing == "router") and "llm-assets-sim" \
            not in (info.identity or "")  # fmt: skip
        tokenize, block_size = plan_tokenizer(
            self.base_urls[live[0]], self.resolved_style, prompts + [t for t in tails if t],
            model=self.model, headers=self.settings.headers(relquery_id),
            auth=self.settings.auth(), timeout_s=min(self.config.timeout_s, 10.0),
            concurrency=self.max_concurrency, ask_server=ask and self.config.probe,
        )  # fmt: skip
        rates = CostRates.for_deployment(self.hardware, self.model, self.max_concurrency)
        plan = plan_fleet(
            prompts,
            len(live),
            routing="round_robin" if self.settings.routing == "round_robin" else "affinity",
            outputs=[self.max_tokens or r.max_tokens for r in requests],
            tails=[tails[k] for k in live],
            tokenize=tokenize,
            rates=CostRates(rates.coefficients, rates.batch, block_size),
            speeds=[measured[k] or 1.0 for k in live],
        )
        queues: list[list[Part]] = [[] for _ in self.base_urls]
        loads = [0.0] * self.num_replicas
        for k, queue, load in zip(live, plan.queues, plan.loads, strict=True):
            queues[k], loads[k] = queue, load
        return replace(plan, queues=queues, loads=loads)

    def close(self) -> None:
        """Nothing to release between runs (each run opens and closes its own client)."""


def _no_reply(info: ServerInfo) -> str:
    return f"no reply to GET /models: {info.no_reply or 'none'}"


def _run_coroutine(make: Callable[[], Any]) -> Any:
    """Run the coroutine `make()` to completion from synchronous code, also when the calling
    thread already runs an event loop (then in a fresh thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="openai") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
