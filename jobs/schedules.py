"""A daily run of the benchmark job (stopped by default: turn it on in the UI)."""

import dagster as dg

daily_benchmark = dg.ScheduleDefinition(
    name="daily_benchmark",
    job_name="benchmark_job",
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Q1-Q5 every day at 03:00 on the configured engine.",
)
