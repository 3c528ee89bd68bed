"""Ray Data as the executor of an LLM stage: blocks cut at prefix groups (`blocks`), one actor
per replica (`actors`), the run (`executor.run_on_ray`) and the engine the runner drives
(`engine.RayFleetEngine`: kind "ray" of `resources.environment.build_engine`, so
`LLM_ASSETS_ENGINE=ray` in Dagster and `llm-assets run --engine ray` / `--executor ray`). With
`ray_submit="job"` a Dagster step submits each run as a Ray job through dagster-ray's Pipes
client (`pipes`), the job (`job`) running it inside the cluster, requests and answers going as
Parquet (`exchange`). Ray and dagster-ray are an optional extra (`pip install
'llm-assets[ray]'`), imported only when a run starts."""
