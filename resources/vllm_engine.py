"""In-process vLLM (`vllm.LLM`) as an `LLMEngine`, plus the pure vLLM vocabulary helpers.

vLLM itself is optional (`pip install -e '.[vllm]'`) and is imported only inside
`VLLMEngine._load`, on the first `run`, so this module imports (and its pure parts are tested)
without it. The pure parts (an `OutputSpec` as vLLM's structured-outputs fields lives in
`resources.structured_outputs`, shared with the HTTP client and the sim's server):

- `sampling_kwargs(request)`: the keyword arguments of one request's `SamplingParams`.
- `response_from_output(request, output, ...)`: a `RequestOutput`-like object as a `Response`
  (reads `prompt_token_ids`, `num_cached_tokens`, `outputs[0].text`, `outputs[0].token_ids`).

Invariant: `run` returns one `Response` per `Request`, in request order; a request vLLM could not
serve (no completion, aborted) comes back with `error` set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, get_args

from resources.configs import SchedulingPolicy, VLLMEngineConfig
from resources.engine import LLMEngine, Request, Response, RunResult, RunStats
from resources.structured_outputs import structured_outputs_for

__all__ = [
    "SCHEDULING_POLICIES",
    "VLLMEngine",
    "response_from_output",
    "sampling_kwargs",
]

log = logging.getLogger(__name__)

SCHEDULING_POLICIES: tuple[str, ...] = get_args(SchedulingPolicy)
INSTALL_HINT = "vLLM is not installed; install the optional extra with: pip install -e '.[vllm]'"


def sampling_kwargs(request: Request, *, temperature: float = 0.0) -> dict[str, Any]:
    """Keyword arguments of `SamplingParams` for `request` (greedy by default).

    `structured_outputs` is a plain dict here; `VLLMEngine` wraps it in `StructuredOutputsParams`.
    """
    if request.max_tokens < 1:
        raise ValueError(
            f"request {request.id!r}: max_tokens must be >= 1, got {request.max_tokens}"
        )
    kwargs: dict[str, Any] = {"max_tokens": request.max_tokens, "temperature": temperature}
    structured = structured_outputs_for(request.output)
    if structured is not None:
        kwargs["structured_outputs"] = structured
    return kwargs


def _timings(output: Any, run_start_epoch: float, fallback_s: float) -> tuple[float, float]:
    """(ttft_s, finish_s) from `output.metrics` when it carries wall-clock times, else fallback.

    vLLM's v0 `RequestMetrics` has epoch `first_token_time` / `finished_time`; the v1 engine's
    stats use monotonic stamps that cannot be related to our clock, so they are not used.
    """
    metrics = getattr(output, "metrics", None)
    first = getattr(metrics, "first_token_time", None)
    finished = getattr(metrics, "finished_time", None) or getattr(metrics, "last_token_time", None)
    if isinstance(first, int | float) and isinstance(finished, int | float):
        ttft = max(0.0, first - run_start_epoch)
        finish = max(ttft, finished - run_start_epoch)
        return ttft, finish
    return fallback_s, fallback_s


def response_from_output(
    request: Request, output: Any, *, run_start_epoch: float = 0.0, fallback_s: float = 0.0
) -> Response:
    """`Response` for `request` from a vLLM `RequestOutput` (or any object with its attributes).

    Invariants: `cached_tokens` is clipped to `[0, prompt_tokens]` (vLLM reports None when
    prefix caching is off); an output with no completion or an aborted one carries `error`.
    """
    prompt_tokens = len(getattr(output, "prompt_token_ids", None) or ())
    cached = getattr(output, "num_cached_tokens", None) or 0
    cached = max(0, min(int(cached), prompt_tokens))
    ttft_s, finish_s = _timings(output, run_start_epoch, fallback_s)
    completions = getattr(output, "outputs", None) or []
    if not completions:
        return Response(
            request.id,
            "",
            prompt_tokens,
            cached,
            0,
            ttft_s,
            finish_s,
            error="vLLM returned no completion for this request",
        )
    first = completions[0]
    error = None
    if getattr(first, "finish_reason", None) == "abort":
        error = "vLLM aborted this request (finish_reason='abort')"
    return Response(
        id=request.id,
        text=first.text or "",
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        output_tokens=len(first.token_ids or ()),
        ttft_s=ttft_s,
        finish_s=finish_s,
        error=error,
    )


class VLLMEngine(LLMEngine):
    """`vllm.LLM` in this process: prefix caching on, FCFS or priority scheduling.

    The model loads on the first `run` (or `load()`), not in the constructor, so building the
    engine is cheap and works without vLLM installed. `run` submits requests in the given order
    (vLLM admits them in that order under FCFS), passes `priority=[...]` only under
    `scheduling_policy="priority"`, and measures `engine_time_s` as the wall time of
    `LLM.generate`.
    """

    name = "vllm"

    def __init__(
        self,
        *args: Any,
        config: VLLMEngineConfig | None = None,
        extra_llm_kwargs: dict[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        """`VLLMEngine(model, **fields)` or `VLLMEngine(config=...)`: the fields are
        `VLLMEngineConfig`'s; `extra_llm_kwargs` go to `vllm.LLM(...)` as they are."""
        self.config: VLLMEngineConfig = VLLMEngineConfig.resolve(config, args, fields)
        self.extra_llm_kwargs = dict(extra_llm_kwargs or {})
        self._hardware = self.config.hardware
        self._llm: Any = None
        self._sampling_params_cls: Any = None
        self._structured_cls: Any = None
        self._structured_field = "structured_outputs"

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def enable_prefix_caching(self) -> bool:
        return self.config.enable_prefix_caching

    @property
    def scheduling_policy(self) -> str:
        return self.config.scheduling_policy

    @property
    def honours_priority(self) -> bool:
        return self.config.scheduling_policy == "priority"

    @property
    def max_model_len(self) -> int | None:
        """The configured limit; None keeps (and reports as unknown) the model's own."""
        return self.config.max_model_len

    @property
    def temperature(self) -> float:
        return self.config.temperature

    def __repr__(self) -> str:
        return (
            f"VLLMEngine(model={self.model!r}, scheduling_policy={self.scheduling_policy!r}, "
            f"enable_prefix_caching={self.enable_prefix_caching}, loaded={self._llm is not None})"
        )

    def llm_kwargs(self) -> dict[str, Any]:
        """The keyword arguments `vllm.LLM(...)` is built with."""
        kwargs = self.config.model_dump(exclude={"temperature", "hardware"}, exclude_none=True)
        kwargs.update(self.extra_llm_kwargs)
        return kwargs

    @property
    def hardware(self) -> str:
        if self._hardware is None:
            self._hardware = _detect_gpu_name()
        return self._hardware

    @classmethod
    def from_llm(
        cls,
        llm: Any,
        model: str,
        *,
        sampling_params_cls: Any = None,
        structured_outputs_cls: Any = None,
        **fields: Any,
    ) -> VLLMEngine:
        """Wrap an already built `vllm.LLM` (e.g. one a notebook holds); `fields` (those of
        `VLLMEngineConfig`, `scheduling_policy` above all) must be the ones `llm` was built
        with. The parameter classes default to vLLM's."""
        engine = cls(model, **fields)
        if sampling_params_cls is None or structured_outputs_cls is None:
            sampling_params_cls, structured_outputs_cls, field_name = _vllm_param_classes()
            engine._structured_field = field_name
        engine._llm = llm
        engine._sampling_params_cls = sampling_params_cls
        engine._structured_cls = structured_outputs_cls
        return engine

    def load(self) -> None:
        """Import vLLM and load the model (idempotent)."""
        if self._llm is not None:
            return
        params_cls, structured_cls, field_name = _vllm_param_classes()
        import vllm

        log.info("loading vLLM model %s (%s)", self.model, self.scheduling_policy)
        self._llm = vllm.LLM(**self.llm_kwargs())
        self._sampling_params_cls = params_cls
        self._structured_cls = structured_cls
        self._structured_field = field_name

    def _sampling_params(self, request: Request) -> Any:
        kwargs = sampling_kwargs(request, temperature=self.temperature)
        structured = kwargs.pop("structured_outputs", None)
        if structured is not None:
            kwargs[self._structured_field] = self._structured_cls(**structured)
        return self._sampling_params_cls(**kwargs)

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.load()
        requests = list(requests)
        start_wall = time.perf_counter()
        start_epoch = time.time()
        outputs: list[Any] = []
        if requests:
            params = [self._sampling_params(r) for r in requests]
            generate_kwargs: dict[str, Any] = {"sampling_params": params, "use_tqdm": False}
            if self.scheduling_policy == "priority":
                generate_kwargs["priority"] = [r.priority for r in requests]
            outputs = self._llm.generate([r.prompt for r in requests], **generate_kwargs)
        engine_time_s = time.perf_counter() - start_wall
        if len(outputs) != len(requests):
            raise RuntimeError(
                f"vLLM returned {len(outputs)} outputs for {len(requests)} requests "
                f"(relquery {relquery_id!r})"
            )
        responses = [
            response_from_output(req, out, run_start_epoch=start_epoch, fallback_s=engine_time_s)
            for req, out in zip(requests, outputs, strict=True)
        ]
        stats = RunStats.from_responses(
            responses,
            engine=self.name,
            model=self.model,
            hardware=self.hardware,
            engine_time_s=engine_time_s,
            wall_time_s=time.perf_counter() - start_wall,
        )
        return RunResult(responses=responses, stats=stats)

    def close(self) -> None:
        """Drop the model and free GPU memory where torch is loaded. Safe to call twice."""
        if self._llm is None:
            return
        self._llm = None
        try:
            import gc

            import torch

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch comes with vLLM
            pass


def _vllm_param_classes() -> tuple[Any, Any, str]:
    """(SamplingParams, its structured-outputs class, the SamplingParams field that takes it).

    vLLM >= 0.10.2 has `StructuredOutputsParams` in `structured_outputs`; older releases the same
    fields as `GuidedDecodingParams` in `guided_decoding`. Raises a clear ImportError without vLLM.
    """
    try:
        from vllm.sampling_params import SamplingParams
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return SamplingParams, StructuredOutputsParams, "structured_outputs"
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return SamplingParams, GuidedDecodingParams, "guided_decoding"


def _detect_gpu_name() -> str:
    """The CUDA device name via torch (already loaded with vLLM), or "unknown"."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return "unknown"
