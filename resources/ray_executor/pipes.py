"""A stage run submitted as a Ray job through Dagster Pipes: the submitting side of
`RayFleetEngine` with `ray_submit="job"` (`run_as_ray_job`).

dagster-ray's `PipesRayJobClient` (the maintained integration, `pip install
'llm-assets[ray]'`) submits `python -m resources.ray_executor.job` to Ray's job server
(`JobSubmissionClient`: the head's dashboard, `http://head:8265`), passes the job its orders
as Pipes extras, streams the job's log lines and Pipes messages into the step's log, and
waits for it. What goes in and out:

1. this process writes the run's requests, in plan order (dedup and GGR already applied), as
   Parquet under `ray_job_dir` (`exchange.write_requests`);
2. the job cuts them into Ray Data blocks at prefix groups and runs them on the cluster's
   replica actors (`execute_on_ray`), writes the answers as Parquet, and reports its figures;
3. this process reads the answers back, one per request in request order
   (`exchange.read_answers`), returns them as the run's `RunResult` and adds the job's
   figures to the asset's output metadata (`ray_jobs`).

Invariants:
- the answers go into the same runner as every engine's (`resources.runner.run_requests`):
  the same chunks (one job per chunk), response cache, accounting and MLflow run; a job that
  fails raises here and no answer of it is used;
- it runs inside a Dagster asset only (Pipes needs the step's context); elsewhere, and for a
  missing or unreachable `ray_address`, a replica URL carrying `user:password@` or a
  missing dagster-ray, a ValueError/ImportError of one line naming the value and the fix,
  before anything is written or submitted;
- no secret is part of a submission: the key is the cluster's own `LLM_ASSETS_OPENAI_API_KEY`
  (`resources.ray_executor.job`); the exchange folder of a job is removed after its answers
  are read, kept when it fails (its requests, for a post-mortem).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.configs import OpenAIEngineConfig, RayEngineConfig
from resources.engine import Request, RunResult, RunStats
from resources.home import llm_assets_home

__all__ = ["ENTRYPOINT", "RayJobRun", "job_client", "run_as_ray_job"]

ENTRYPOINT = "python -m resources.ray_executor.job"
"""The job's command on the head: the cluster's `python` must import this package (in the
cluster image, or through the job's `runtime_env`)."""


@dataclass
class RayJobRun:
    """One submitted job: its result, its Ray job id and the figures it reported."""

    result: RunResult
    job_id: str
    figures: dict[str, Any] = field(default_factory=dict)
    step: tuple[str, str] = ("", "")
    """(Dagster run id, step's op name) that submitted it."""


def current_context():
    """The running asset's context; ValueError in one line outside one."""
    import dagster as dg

    try:
        return dg.AssetExecutionContext.get()
    except dg.DagsterInvariantViolationError:
        raise ValueError(
            "ray_submit='job' submits each stage as a Ray job through Dagster Pipes, which "
            "runs inside a Dagster asset only; outside Dagster (llm-assets run, Python) use "
            "ray_submit='driver' (the default: LLM_ASSETS_RAY_SUBMIT unset)"
        ) from None


def job_client(address: str | None, **kwargs: Any):
    """dagster-ray's `PipesRayJobClient` for the job server at `address`, connected now: a
    missing dagster-ray or address, or no job server there, is one-line ImportError /
    ValueError naming the value."""
    try:
        from dagster_ray import PipesRayJobClient
    except ImportError:
        raise ImportError(
            "ray_submit='job' needs dagster-ray and Ray's job server: "
            "pip install 'llm-assets[ray]' (dagster-ray==0.4.8, ray[data,default]==2.60.0)"
        ) from None
    if not address:
        raise ValueError(
            "ray_submit='job' needs ray_address: the Ray job server (the head's dashboard), "
            "e.g. http://head:8265, or 'auto' for the cluster `ray start --head` runs here "
            "(LLM_ASSETS_RAY_ADDRESS)"
        )
    client = PipesRayJobClient(address=address, poll_interval=0.5, forward_termination=True)
    try:
        client.client  # noqa: B018 - connects: JobSubmissionClient asks the server its version
    except Exception as exc:  # noqa: BLE001 - any failure to reach it is one line
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ValueError(
            f"ray_address {address!r}: no Ray job server answers there ({reason}); give the "
            "head's dashboard URL (http://head:8265, started with ray[default]) or 'auto'"
        ) from None
    return client


def _refuse_url_credentials(config: OpenAIEngineConfig) -> None:
    from resources.openai.wire import split_url_credentials

    for url in config.urls():
        clean, user, password = split_url_credentials(url)
        if (user, password) != (None, None):
            raise ValueError(
                f"ray_submit='job': the replica URL {clean} carries user:password@, which "
                "Ray's dashboard would show in the job's submission; give the key as "
                "LLM_ASSETS_OPENAI_API_KEY in the cluster's environment instead"
            )


def _job_folder(cfg: RayEngineConfig, context, relquery_id: str) -> str:
    base = cfg.ray_job_dir or str(llm_assets_home() / "ray_jobs")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", relquery_id)[:60]
    return f"{base.rstrip('/')}/{context.run.run_id[:8]}-{slug}-{uuid.uuid4().hex[:8]}"


def _remove(folder: str) -> None:
    from resources.ray_executor.exchange import _filesystem

    try:
        filesystem, path = _filesystem(folder)
        filesystem.delete_dir(path)
    except OSError:
        pass  # best effort: the answers are read already


def run_as_ray_job(
    requests: Sequence[Request],
    client_config: OpenAIEngineConfig,
    cfg: RayEngineConfig,
    relquery_id: str,
    *,
    context=None,
) -> RayJobRun:
    """`requests` answered by one Ray job (see the module invariants); `context` defaults to
    the running asset's."""
    from resources.ray_executor.exchange import read_answers, write_requests

    context = context if context is not None else current_context()
    _refuse_url_credentials(client_config)
    client = job_client(cfg.ray_address)
    folder = _job_folder(cfg, context, relquery_id)
    started = time.perf_counter()
    write_requests(requests, f"{folder}/requests.parquet")
    extras = {
        "requests": f"{folder}/requests.parquet",
        "answers": f"{folder}/answers.parquet",
        "config": client_config.model_dump(exclude={"routing"}),
        "block_by": cfg.ray_block_by,
        "block_rows": cfg.ray_block_rows,
        "commit_every": cfg.ray_commit_every,
        "relquery_id": relquery_id,
    }
    context.log.info(f"{relquery_id}: {len(requests):,} requests to a Ray job at {cfg.ray_address}")
    invocation = client.run(context=context, submit_job_params={"entrypoint": ENTRYPOINT},
                            extras=extras)  # fmt: skip
    responses = read_answers(extras["answers"], requests)
    _remove(folder)
    job_id = str(invocation.metadata["Ray Job ID"].value)
    messages = [m for m in invocation.get_custom_messages() if isinstance(m, dict)]
    figures = {"job_id": job_id, **(messages[-1] if messages else {})}
    wall = time.perf_counter() - started
    stats = RunStats.from_responses(responses, engine="openai", model=client_config.model or "",
                                    hardware=client_config.hardware, engine_time_s=wall,
                                    wall_time_s=wall)  # fmt: skip
    return RayJobRun(RunResult(responses, stats, figures.get("stopped")), job_id, figures,
                     _step(context))  # fmt: skip


def _step(context) -> tuple[str, str]:
    return context.run.run_id, context.op_execution_context.op.name


def report_jobs(context, jobs: Sequence[RayJobRun]) -> None:
    """The jobs this step submitted so far (of `jobs`: all of the engine's) as the asset's
    `ray_jobs` output metadata (a step that materializes one asset; a multi-asset step's
    jobs are in its log only)."""
    import dagster as dg

    if len(context.selected_asset_keys) != 1:
        return
    value = dg.MetadataValue.json([job.figures for job in jobs if job.step == _step(context)])
    context.add_output_metadata({"ray_jobs": value})
