"""`RayFleetEngine`: the OpenAI fleet client's engine, with each run executed by Ray Data
(`resources.ray_executor.executor`) instead of the client's own fleet routing.

It is an `EngineWrapper` around the `OpenAIEngine` of the same URLs and fields, so everything
but `run` is that engine's: its `name` ("openai"), model, server identity, context window and
replica count. Invariants:
- the response cache key (`EngineKey.of`) is the OpenAI engine's: an answer paid through the
  fleet client is reused through Ray and the other way round (same servers, same answers);
- `run` has `LLMEngine.run`'s contract (one `Response` per request, in order, `stopped` when
  a replica refuses), so `resources.runner.run_requests` drives it unchanged: its chunks (one
  Ray Data execution each, `chunk_size x replicas` requests), the response cache committed
  after each chunk, resume after a crash, accounting;
- `ray_submit="driver"` (default): the Ray cluster is joined (or a local one started) at the
  first non-empty run and left at `close()`; `last_run` keeps the last `RayRun` (blocks, the
  replica of each block, requests sent per replica);
- `ray_submit="job"` (inside a Dagster asset): each run is one Ray job submitted through
  dagster-ray's Pipes client (`resources.ray_executor.pipes`); this process never joins the
  cluster, `jobs` keeps every job's figures, added to the asset's metadata as `ray_jobs`.
  Planning still asks the replicas from here (identity, context window, server style);
- the API key and URL credentials go to the actors as constructor arguments (Ray's object
  store), never into a log line or `repr`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from resources.configs import OpenAIEngineConfig, RayEngineConfig
from resources.engine import EngineWrapper, Request, RunResult, RunStats
from resources.ray_executor.executor import RayRun, execute_on_ray, ray_cluster

__all__ = ["RayFleetEngine"]


class RayFleetEngine(EngineWrapper):
    """`RayFleetEngine(base_url, model, **fields)` or `RayFleetEngine(config=...)`: the fields
    are `RayEngineConfig`'s; see the module invariants."""

    def __init__(
        self,
        *args: Any,
        config: RayEngineConfig | None = None,
        api_key: str | None = None,
        **fields: Any,
    ) -> None:
        from resources.openai.engine import OpenAIEngine

        self.ray_config = RayEngineConfig.resolve(config, args, fields)
        client = self.ray_config.model_dump(exclude=set(RayEngineConfig.ray_fields()))
        super().__init__(OpenAIEngine(config=OpenAIEngineConfig(**client), api_key=api_key))
        self._api_key = api_key
        self._cluster: ExitStack | None = None
        self.last_run: RayRun | None = None
        self.jobs: list[Any] = []
        """ray_submit="job": the Ray jobs submitted so far (`pipes.RayJobRun`, one per run)."""
        self.on_ledger: Callable[[Any], None] | None = None
        """Called with each run's ledger handle once it exists (a watcher: progress, a test
        that kills an actor)."""

    def __repr__(self) -> str:
        cfg = self.ray_config
        return (f"RayFleetEngine(replicas={self.num_replicas}, model={self.model!r}, "
                f"ray_address={cfg.ray_address!r}, block_by={cfg.ray_block_by!r})")  # fmt: skip

    __str__ = __repr__

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        requests = list(requests)
        if not requests:
            return RunResult([], RunStats.empty(self.name, self.model, self.hardware))
        cfg = self.ray_config
        if cfg.ray_submit == "job":
            from resources.ray_executor.pipes import current_context

            context = current_context()  # before asking any server: outside Dagster, one line
        elif self._cluster is None:
            stack = ExitStack()
            stack.enter_context(ray_cluster(cfg.ray_address))
            self._cluster = stack
        client = OpenAIEngineConfig(**cfg.model_dump(exclude=set(RayEngineConfig.ray_fields())))
        if client.server_style == "auto":  # ask once here, not once per actor
            client = client.model_copy(update={"server_style": self.inner.resolved_style})
        if self.max_tokens is not None:
            requests = [Request(r.id, r.prompt, self.max_tokens, r.output, r.priority)
                        for r in requests]  # fmt: skip
        if cfg.ray_submit == "job":
            from resources.ray_executor.pipes import report_jobs, run_as_ray_job

            job = run_as_ray_job(requests, client, cfg, relquery_id, context=context)
            self.jobs.append(job)
            report_jobs(context, self.jobs)
            return job.result
        self.last_run = execute_on_ray(
            requests,
            client,
            api_key=self._api_key,
            block_by=cfg.ray_block_by,
            block_rows=cfg.ray_block_rows,
            relquery_id=relquery_id,
            commit_every=cfg.ray_commit_every,
            on_ledger=self.on_ledger,
        )
        return self.last_run.result

    def close(self) -> None:
        """Leave (or shut down the local) Ray cluster; the engine can run again afterwards."""
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        super().close()
