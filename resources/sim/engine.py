"""`SimulatedEngine`: a faithful, CPU-only model of a vLLM engine on a chosen GPU and model.

Public API (what the asset layer and the OpenAI-compatible server in `resources/sim/server/`
use):

- ``SimulatedEngine(gpu="L4", model="llama-2-7b", policy="vllm-v1", **fields)`` or
  ``SimulatedEngine(config=SimulatedEngineConfig(...))``: every parameter is a field of
  `resources.sim.config.SimulatedEngineConfig` (declared and documented there once);
  `coefficients` replaces the profile-derived cost model (e.g. a `fit` of measurements).
- ``run(relquery_id, requests, progress=None) -> RunResult``: simulate one batch (all requests
  arrive at t=0, admitted in submission order); one `Response` per request, in order.
- ``generate(requests, progress=None) -> list[Response]``: the same, responses only (for the
  HTTP server: one call per HTTP request or per batch of them).
- ``run_closed_loop(relquery_id, requests, client) -> RunResult``: a benchmark client
  (`ClosedLoopClient`) co-simulated with the engine: the client sends each request (its arrival)
  from the tokens it has read so far, and the engine hands it every output token as produced
  (`benchmarks.lib.sweep` models `vllm bench serve` and threaded Python clients with it).
- ``run_workload(relqueries, progress=None) -> WorkloadResult``: serve several relQueries
  (`resources.sim.relquery.RelQuery`, each with an `arrival_s` in simulated seconds) on one
  engine; each request enters the waiting queue when the clock reaches its relQuery's arrival
  (in arrival order, then submission order). Returns per-relQuery responses and timing (waiting,
  core, tail, latency: relserve.txt Eq. 2), the makespan and the scheduling overhead (wall
  seconds inside the policy). `Response.ttft_s`/`finish_s` are then seconds from t=0.
- ``count_tokens(text) -> int``, ``reset_cache()``, ``cache_stats() -> dict``, and the
  read-only attributes ``config``, ``name`` ("sim"), ``model``, ``hardware``, ``deployment``,
  ``coefficients``, ``num_kv_blocks``, ``policy_name``, ``last_run_info`` (iterations,
  preemptions) and the rest of the `LLMEngine` contract.

Semantics: an iteration-level loop (Algorithm 1 of InferMax; `resources.sim.step_loop`). Each
iteration the policy forms a batch (`resources.sim.policies`), the cost model prices it
(`resources.sim.cost_model`), the clock advances by that time, scheduled sequences advance,
newly computed full prompt blocks enter the prefix cache (`resources.sim.block_cache`), and
finished requests free their blocks. Simulated time depends only on the inputs, never on the
machine. Two behaviours of today's vLLM apply
when the timing profile enables them (`Efficiency`): asynchronous scheduling (a step's batch is
formed when the previous step is launched, so a request arriving at a busy engine joins one step
later) and CUDA graphs (a batch's tokens are padded to the next captured size before pricing).
The block cache persists across `run` calls, like a running vLLM server; `reset_cache()`
empties it.

`run` is thread-safe: one lock serialises runs (the server may call it from several threads).
Defaults follow vLLM: `max_num_batched_tokens` is max(max_model_len, 2048) for vllm-v0 (no
chunked prefill), otherwise vLLM 0.32's per-GPU default for the usage, with `max_num_seqs`
(`profiles.vllm_default_budgets`: offline 256 / 8192 on L4 and A100, 1024 / 16384 on H100 and
H200; `vllm serve` 2048 and 8192 tokens); a policy with its own fixed `token_budget` (sarathi)
uses that. `preemption_order` ("recent", as
vLLM, or "keep-long", InferMax §6) picks the running request evicted when KV blocks run out.
Requests whose prompt plus one output token exceeds the context length, or which could never fit
the KV cache or the token budget, come back with `error` set (never dropped).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from resources.engine import GpuRental, LLMEngine, Request, Response, RunResult, RunStats
from resources.sim.answers import output_token_count, output_token_ids, placeholder_answer
from resources.sim.block_cache import BLOCK_SIZE, BlockPool, block_hashes
from resources.sim.config import SimulatedEngineConfig
from resources.sim.cost_model import (
    CostCoefficients,
    Efficiency,
    coefficients_from_profile,
    cuda_graph_sizes,
    get_timing_profile,
)
from resources.sim.policies import Policy, ScheduleContext, SimSeq, get_policy
from resources.sim.profiles import Deployment, resolve_deployment, vllm_default_budgets
from resources.sim.relquery import (
    RelQuery,
    RelQueryResult,
    WorkloadResult,
    relquery_timing,
)
from resources.sim.step_loop import ClosedLoopClient, LoopSetup, iterate, paused_gc
from resources.sim.tokenizer import ApproxTokenizer, Tokenizer, load_tokenizer

__all__ = ["ClosedLoopClient", "SimulatedEngine"]

Progress = Callable[[int, int], None]


_V0_WATERMARK = 0.01


class SimulatedEngine(LLMEngine):
    """Simulated vLLM engine (see the module docstring for the API and its invariants)."""

    name = "sim"

    def __init__(
        self,
        *args: Any,
        config: SimulatedEngineConfig | None = None,
        coefficients: CostCoefficients | None = None,
        efficiency: Efficiency | None = None,
        **fields: Any,
    ) -> None:
        """`SimulatedEngine(gpu, model, policy, **fields)` or `SimulatedEngine(config=...)`;
        the fields are `SimulatedEngineConfig`'s. Objects that are not config: `coefficients`
        (replace the profile-derived cost model), `efficiency` (replaces the timing profile's),
        and `policy` / `tokenizer` may be a `Policy` / `Tokenizer` object instead of a name."""
        values = SimulatedEngineConfig.named(args, fields)
        policy = values.pop("policy") if not isinstance(values.get("policy", ""), str) else None
        tok = values.get("tokenizer")
        tokenizer = values.pop("tokenizer") if not isinstance(tok, str | None) else None
        cfg = SimulatedEngineConfig.resolve(config, (), values)
        self.config: SimulatedEngineConfig = cfg
        self.deployment: Deployment = resolve_deployment(
            cfg.gpu, cfg.model, cfg.tensor_parallel_size, cfg.gpu_memory_utilization
        )
        self._policy: Policy = get_policy(policy or cfg.policy)
        self.policy_name: str = self._policy.name
        chunked = self._policy.enable_chunked_prefill
        default_seqs, default_tokens = vllm_default_budgets(self.deployment.hardware, cfg.usage)
        max_num_batched_tokens = cfg.max_num_batched_tokens
        if max_num_batched_tokens is None:
            if self._policy.token_budget is not None:
                max_num_batched_tokens = self._policy.token_budget
            elif not chunked:
                max_num_batched_tokens = max(self.deployment.model.max_model_len, 2048)
            else:
                max_num_batched_tokens = default_tokens
        self.max_num_seqs = default_seqs if cfg.max_num_seqs is None else cfg.max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = chunked
        self.efficiency: Efficiency = efficiency or get_timing_profile(cfg.timing)
        """The timing profile's constants; its engine behaviours (`async_scheduling`,
        `cuda_graphs`) apply even when `coefficients` replace the derived cost model."""
        self.coefficients: CostCoefficients = coefficients or coefficients_from_profile(
            self.deployment, self.efficiency
        )
        self._graph_sizes: tuple[int, ...] = (
            cuda_graph_sizes(self.max_num_seqs, self.max_num_batched_tokens)
            if self.efficiency.cuda_graphs
            else ()
        )
        if tokenizer is None:
            tokenizer = load_tokenizer(cfg.tokenizer) if cfg.tokenizer else ApproxTokenizer()
        self.tokenizer: Tokenizer = tokenizer
        self.num_kv_blocks = cfg.num_gpu_blocks_override or self.deployment.num_kv_blocks
        self._pool = BlockPool(self.num_kv_blocks, cfg.enable_prefix_caching)
        self._watermark = int(_V0_WATERMARK * self.num_kv_blocks) if not chunked else 0
        self._lock = threading.Lock()
        self.last_run_info: dict[str, int] = {}
        """Iterations and preemptions of the latest run."""

    # -- descriptive attributes ------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self.deployment.model.name

    @property
    def hardware(self) -> str:
        return self.deployment.describe()

    @property
    def max_model_len(self) -> int:
        return self.deployment.model.max_model_len

    @property
    def enable_prefix_caching(self) -> bool:
        return self.config.enable_prefix_caching

    @property
    def preemption_order(self) -> str:
        return self.config.preemption_order

    @property
    def timing(self) -> str:
        return self.config.timing

    @property
    def gpu_rental(self) -> GpuRental:
        return GpuRental(self.deployment.hardware.name, self.deployment.num_gpus)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    @property
    def token_encoder(self) -> Callable[[str], list[int]]:
        """The ids this engine's block pool hashes: its tokenizer's `encode`."""
        return self.tokenizer.encode

    @property
    def kv_block_size(self) -> int:
        return BLOCK_SIZE

    @property
    def tokens_within_chars(self) -> bool:
        """The built-in approximation gives a piece of n characters at most n tokens and its
        pieces never overlap, so no text has more tokens than characters; a tokenizer file
        makes no such promise."""
        return isinstance(self.tokenizer, ApproxTokenizer)

    def cache_stats(self) -> dict[str, int]:
        """Blocks in the pool, free, carrying a cached prefix, and evictions so far."""
        with self._lock:
            return {
                "num_blocks": self._pool.num_blocks,
                "num_free_blocks": self._pool.num_free,
                "num_cached_blocks": self._pool.num_cached,
                "num_evictions": self._pool.num_evictions,
            }

    def reset_cache(self) -> None:
        """Forget every cached prefix (like restarting the server)."""
        with self._lock:
            self._pool.reset()

    # -- running -----------------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[Request], progress: Progress | None = None
    ) -> list[Response]:
        """Simulate `requests` as one batch and return their responses (see `run`)."""
        return self.run("", requests, progress).responses

    def run(
        self, relquery_id: str, requests: Sequence[Request], progress: Progress | None = None
    ) -> RunResult:
        """Simulate `requests` (all arriving at t=0, in submission order) to completion."""
        wall0 = time.perf_counter()
        tagged = [(relquery_id, req, 0.0) for req in requests]
        with self._lock:
            responses, _, makespan, _ = self._simulate(tagged, {relquery_id: len(tagged)}, progress)
        return self._result(responses, makespan, wall0)

    def run_closed_loop(
        self, relquery_id: str, requests: Sequence[Request], client: ClosedLoopClient
    ) -> RunResult:
        """Simulate `requests` sent by `client` (a benchmark client co-simulated with the
        engine): the client decides when each request arrives, from the tokens it has seen so
        far, and the engine tells it every output token as it is generated. Times are seconds
        from t=0; every request must be admissible (ValueError names the first that is not)."""
        wall0 = time.perf_counter()
        tagged = [(relquery_id, req, math.inf) for req in requests]
        with self._lock:
            responses, _, makespan, _ = self._simulate(
                tagged, {relquery_id: len(tagged)}, None, client
            )
        return self._result(responses, makespan, wall0)

    def _result(self, responses, makespan: float, wall0: float) -> RunResult:
        """The responses with their totals: `makespan` simulated seconds, wall time since
        `wall0` (a `time.perf_counter()` reading)."""
        stats = RunStats.from_responses(
            responses,
            engine=self.name,
            model=self.model,
            hardware=self.hardware,
            engine_time_s=makespan,
            wall_time_s=time.perf_counter() - wall0,
        )
        return RunResult(responses=responses, stats=stats)

    def _reject_reason(self, prompt_len: int) -> str | None:
        mp = self.deployment.model
        if prompt_len + 1 > mp.max_model_len:
            return (
                f"prompt of {prompt_len} tokens plus one output token exceeds the "
                f"{mp.name} context length {mp.max_model_len}"
            )
        if not self.enable_chunked_prefill and prompt_len > self.max_num_batched_tokens:
            return (
                f"prompt of {prompt_len} tokens exceeds max_num_batched_tokens="
                f"{self.max_num_batched_tokens} and {self.policy_name} does not chunk prefills"
            )
        if -(-(prompt_len + 1) // BLOCK_SIZE) > self._pool.num_usable - self._watermark:
            return (
                f"prompt of {prompt_len} tokens cannot fit the KV cache "
                f"({self.num_kv_blocks} blocks of {BLOCK_SIZE} tokens, one of them vLLM's null "
                "block)"
            )
        return None

    def run_workload(
        self, relqueries: Sequence[RelQuery], progress: Progress | None = None
    ) -> WorkloadResult:
        """Serve several relQueries arriving over simulated time (see the module docstring)."""
        wall0 = time.perf_counter()
        ids = [rq.relquery_id for rq in relqueries]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"relquery ids must be unique, got duplicates {dup}")
        for rq in relqueries:
            if not rq.arrival_s >= 0.0:
                raise ValueError(
                    f"relQuery {rq.relquery_id!r}: arrival_s must be >= 0, got {rq.arrival_s}"
                )
        tagged = [(rq.relquery_id, req, rq.arrival_s) for rq in relqueries for req in rq.requests]
        sizes = {rq.relquery_id: len(rq.requests) for rq in relqueries}
        with self._lock:
            responses, seqs, makespan, scheduler_s = self._simulate(tagged, sizes, progress)
            policy_overhead = dict(self._policy.overhead())
        out: list[RelQueryResult] = []
        pos = 0
        for rq in relqueries:
            n = len(rq.requests)
            rq_seqs = seqs[pos : pos + n]
            spans = [
                (s.prefill_start_s, s.prefill_end_s, s.finish_s) for s in rq_seqs if s is not None
            ]
            timing = relquery_timing(
                rq.relquery_id, rq.arrival_s, n, spans, num_errors=n - len(spans)
            )
            out.append(RelQueryResult(rq.relquery_id, responses[pos : pos + n], timing))
            pos += n
        return WorkloadResult(
            relqueries=out,
            makespan_s=makespan,
            wall_time_s=time.perf_counter() - wall0,
            scheduler_s=scheduler_s,
            num_iterations=self.last_run_info.get("num_iterations", 0),
            num_preemptions=self.last_run_info.get("num_preemptions", 0),
            policy_overhead=policy_overhead,
        )

    @paused_gc
    def _simulate(
        self,
        tagged: list[tuple[str, Request, float]],
        relquery_sizes: dict[str, int],
        progress: Progress | None,
        client: ClosedLoopClient | None = None,
    ) -> tuple[list[Response], list[SimSeq | None], float, float]:
        """Simulate (relquery_id, request, arrival_s) triples; returns the responses, the
        sequences (None for rejected requests), the makespan and the scheduling wall time.
        With `client`, arrivals come from it instead (`run_closed_loop`)."""
        tokenizer = self.tokenizer
        caching = self.enable_prefix_caching
        max_len = self.deployment.model.max_model_len
        answers: list[str] = []
        seqs: list[SimSeq | None] = []
        errors: list[str | None] = []
        prompt_lens: list[int] = []
        out_counts: dict[tuple, int] = {}  # pure functions of their keys, asked per request
        out_ids: dict[tuple[str, int], list[int]] = {}
        for i, (relquery_id, req, arrival) in enumerate(tagged):
            ids = tokenizer.encode(req.prompt)
            answer = placeholder_answer(req.prompt, req.output, req.max_tokens)
            key = (answer, req.output, req.max_tokens)
            n_out = out_counts.get(key)
            if n_out is None:
                n_out = output_token_count(answer, req.output, req.max_tokens, tokenizer)
                out_counts[key] = n_out
            n_out = min(n_out, max_len - len(ids))
            answers.append(answer)
            prompt_lens.append(len(ids))
            reason = self._reject_reason(len(ids))
            errors.append(reason)
            if reason is not None:
                seqs.append(None)
                continue
            if caching:
                generated = out_ids.get((answer, n_out))
                if generated is None:
                    generated = out_ids[answer, n_out] = output_token_ids(answer, n_out)
                hashes = block_hashes(ids + generated)
            else:
                hashes = []
            seqs.append(
                SimSeq(
                    i,
                    req.id,
                    len(ids),
                    hashes,
                    n_out,
                    req.priority,
                    relquery_id,
                    max_tokens=max(n_out, min(req.max_tokens, max_len - len(ids))),
                    arrival_s=arrival,
                )
            )

        live = [s for s in seqs if s is not None]
        live.sort(key=attrgetter("arrival_s"))  # stable: submission order within an arrival
        unsent: dict[int, SimSeq] = {}
        if client is not None:
            if len(live) < len(seqs):
                i = next(i for i, s in enumerate(seqs) if s is None)
                raise ValueError(f"closed loop: request {i} cannot be served: {errors[i]}")
            unsent = {s.index: s for s in live}
            live = []
        waiting = self._policy.new_waiting_queue()
        running: list[SimSeq] = []
        ctx = ScheduleContext(
            pool=self._pool,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            watermark_blocks=self._watermark,
            enable_register_on_allocate=self._policy.register_at_schedule,
            coefficients=self.coefficients,
            relquery_sizes=relquery_sizes,
            preemption_order=self.preemption_order,
        )
        try:
            setup = LoopSetup(
                self.coefficients,
                self._policy,
                self.enable_prefix_caching,
                self._graph_sizes,
                self.efficiency.async_scheduling,
            )
            now, iterations, scheduler_s = iterate(
                deque(live),
                waiting,
                running,
                ctx,
                setup,
                len(live) or len(unsent),
                progress,
                client,
                unsent,
            )
            self.last_run_info = {
                "num_iterations": iterations,
                "num_preemptions": ctx.num_preemptions,
            }
        finally:
            # Leave the pool consistent (all blocks free, cached prefixes kept) even on error.
            for seq in running:
                self._pool.free(seq.blocks)
                seq.blocks = []

        responses: list[Response] = []
        for (_, req, _), seq, answer, reason, n_prompt in zip(
            tagged, seqs, answers, errors, prompt_lens, strict=True
        ):
            if seq is None:
                responses.append(Response(req.id, "", n_prompt, 0, 0, 0.0, 0.0, error=reason))
                continue
            responses.append(
                Response(
                    id=req.id,
                    text=answer,
                    prompt_tokens=seq.prompt_len,
                    cached_tokens=max(seq.cached_tokens, 0),
                    output_tokens=seq.num_output,
                    ttft_s=seq.first_token_s,
                    finish_s=seq.finish_s,
                )
            )
        return responses, seqs, now, scheduler_s
