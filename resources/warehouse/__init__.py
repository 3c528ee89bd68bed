"""The warehouse: every asset's table in one DuckDB file under `LLM_ASSETS_HOME`, one version
per run (`store`: the IO manager, versions, pruning), the landing partitions' slots and the
union view of live files (`slots`), and whether a version's run may still read it (`liveness`:
runs of this and of other Dagster instances).
"""
