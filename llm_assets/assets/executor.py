"""How a query's steps execute when its assets are materialized without a job of ours
(`dg launch --assets`, the UI's "Materialize", a sensor's run request): in one process.

Dagster's default executor starts a process per step, and each one imports Dagster, the
project and its libraries and loads the definitions again: seconds per step, so a query of
ten steps took 10-40x as long as `llm-assets run` (issue 21 item 10). In one process the
steps also share one engine resource, so a simulated engine's prefix cache spans the run as
a server's would, and as `llm-assets run` and the code location's `<query>_job` do.

`QUERY_EXECUTOR` is Dagster's `multi_or_in_process_executor` with the default flipped to
`in_process`; every query's Definitions carry this one object (`Definitions.merge` accepts
the same executor from many), and multiprocess stays a run-config choice away:

    dg launch --assets 'group:my_reviews' \\
        --config-json '{"execution": {"config": {"multiprocess": {"max_concurrent": 4}}}}'

`LLM_ASSETS_EXECUTOR=dagster` (read when the definitions load) leaves the executor to Dagster
again: its default (multiprocess), or the one your own Definitions set (Dagster refuses to
merge two different executors).
"""

from __future__ import annotations

import os

import dagster as dg

EXECUTOR_ENV = "LLM_ASSETS_EXECUTOR"
"""`in_process` (default): queries' Definitions carry `QUERY_EXECUTOR`; `dagster`: none."""

EXECUTOR_CHOICES = ("in_process", "dagster")


def _selector() -> dg.Field:
    """Dagster's own `in_process` / `multiprocess` selector, defaulting to `in_process`."""
    selector = dg.multi_or_in_process_executor.config_schema.as_field().config_type
    return dg.Field(
        selector,
        default_value={"in_process": {}},
        is_required=False,
        description="in_process (default): every step in the run's process, sharing one "
        "engine; multiprocess: a process per step.",
    )


QUERY_EXECUTOR = dg.multi_or_in_process_executor.configured(
    lambda config: config,
    name="in_process_or_multiprocess",
    config_schema=_selector(),
    description="Runs every step in one process unless the run config says "
    "execution: {config: {multiprocess: {}}}.",
)


def query_executor() -> dg.ExecutorDefinition | None:
    """The executor a query's Definitions carry: `QUERY_EXECUTOR`, or None where
    `LLM_ASSETS_EXECUTOR=dagster`. Any other value is a ValueError naming the choices."""
    choice = os.environ.get(EXECUTOR_ENV, "").strip() or "in_process"
    if choice not in EXECUTOR_CHOICES:
        raise ValueError(
            f"{EXECUTOR_ENV}={choice!r}: expected one of {', '.join(EXECUTOR_CHOICES)}"
        )
    return QUERY_EXECUTOR if choice == "in_process" else None
