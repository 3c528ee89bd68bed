"""The LLM query model: `model.LLMQuery` (sources, joins, predicates, LLM stages, post-ops),
its frozen `parts`, the `answer`'s shape after the LLM calls, and the DuckDB SQL it `render`s.
Pure data and pure functions: no Dagster, no I/O.
"""
