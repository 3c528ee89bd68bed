"""The Ray job of one LLM stage run: `python -m resources.ray_executor.job`, submitted by
`resources.ray_executor.pipes` through dagster-ray's `PipesRayJobClient` and run by Ray's job
server as the job's driver, inside the cluster.

It reads its orders from the Pipes extras (`dagster_pipes.open_dagster_pipes`):
`requests` and `answers` (Parquet locations, `resources.ray_executor.exchange`), `config`
(the OpenAI client's fields, replica URLs included, no key), `block_by`, `block_rows`,
`commit_every` and `relquery_id`; it runs the requests with `execute_on_ray` (blocks cut at
prefix groups, one actor per replica) on the cluster it runs in, and writes the answers.

Invariants:
- the answers file has one row per request, in request order (`exchange`), written only
  after every block came back; a job that fails writes none and exits non-zero (Pipes
  reports the exception), so the submitting step never reads a partial answer set;
- the API key is read here, from `LLM_ASSETS_OPENAI_API_KEY` in the cluster's environment
  (a secret of the head's pod): it is never part of the submission, whose `runtime_env` and
  Pipes context Ray's dashboard shows;
- its figures (`FIGURES`) go back through Pipes as a custom message, and as the metadata of
  an asset materialization when the step materializes exactly one asset; the job's own
  lines go to Dagster's log (`pipes.log`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

__all__ = ["FIGURES", "main", "run_job"]

FIGURES = ("requests", "answered", "errors", "blocks", "groups_split", "sent_per_replica",
           "stopped", "ray_wall_s")  # fmt: skip
"""What a job reports back (Pipes custom message and materialization metadata)."""


def run_job(extras: dict[str, Any]) -> dict[str, Any]:
    """Run the stage the `extras` describe on the Ray cluster this process belongs to; the
    job's figures (`FIGURES`). The answers are at `extras["answers"]` when it returns."""
    from resources.configs import OpenAIEngineConfig
    from resources.ray_executor.blocks import block_groups_split
    from resources.ray_executor.exchange import read_requests, write_answers
    from resources.ray_executor.executor import execute_on_ray, ray_cluster

    requests = read_requests(extras["requests"])
    config = OpenAIEngineConfig(**extras["config"])
    started = time.perf_counter()
    with ray_cluster(os.environ.get("RAY_ADDRESS") or "auto"):
        run = execute_on_ray(
            requests,
            config,
            api_key=os.environ.get("LLM_ASSETS_OPENAI_API_KEY") or None,
            block_by=extras.get("block_by", "groups"),
            block_rows=extras.get("block_rows"),
            relquery_id=extras.get("relquery_id", "ray"),
            commit_every=extras.get("commit_every"),
        )
    write_answers(run.result.responses, extras["answers"])
    responses = run.result.responses
    return {
        "requests": len(requests),
        "answered": sum(1 for r in responses if r.error is None),
        "errors": sum(1 for r in responses if r.error is not None),
        "blocks": len(run.blocks),
        "groups_split": block_groups_split([r.prompt for r in requests], run.blocks),
        "sent_per_replica": list(run.sent),
        "stopped": run.result.stopped,
        "ray_wall_s": round(time.perf_counter() - started, 3),
    }


def main() -> int:
    """The job's entrypoint: orders from Pipes, figures back through Pipes."""
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        extras = dict(pipes.extras)
        pipes.log.info(f"Ray job: {extras.get('relquery_id')}: reading {extras['requests']}")
        figures = run_job(extras)
        pipes.log.info(
            f"Ray job: {figures['answered']} of {figures['requests']} answered in "
            f"{figures['blocks']} blocks ({figures['groups_split']} prefix groups split), "
            f"sent per replica {figures['sent_per_replica']}"
        )
        pipes.report_custom_message(figures)
        if pipes.is_asset_step and len(pipes.asset_keys) == 1:
            metadata = {f"ray_job_{k}": v for k, v in figures.items() if v is not None}
            pipes.report_asset_materialization(metadata=metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
