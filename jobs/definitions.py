"""The Dagster code location: `dagster definitions validate -w workspace.yaml` loads this."""

import dagster as dg

defs = dg.Definitions()
