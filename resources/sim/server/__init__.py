"""An OpenAI-compatible HTTP server in front of one shared simulated engine, speaking what a
vLLM server (`vllm serve ... --enable-prompt-tokens-details`) speaks.

    python -m resources.sim.server --port 8000 [--gpu L4] [--model llama-2-7b] ...   (__main__)

Modules, one job each:

- `protocol.py`, `structured.py`, `errors.py`: the request bodies of `/v1/completions` and
  `/v1/chat/completions`, structured outputs / `response_format`, and the error body, as
  pydantic models (the one place field types, bounds and vLLM's wording live);
- `app.py`: routing, auth, `/v1/models`, the context-window check, replies (`SimApp`);
- `stops.py`: stop strings (the answer ends before the first one);
- `batcher.py`: admission in arrival order and coalesced batches, one engine run at a time;
- `metrics.py`: `GET /metrics`, Prometheus text with vLLM's metric names (and the sim's clock);
- `faults.py`: injected faults for completion calls (`FaultConfig`, `FaultInjector`);
- `transport.py`: the threading HTTP server, `SimServer`, `serve_in_thread`, `build_engine`;
- `__main__.py`: the command line, with a SIGTERM handler that shuts the server down cleanly.
"""

from resources.sim.server.app import Reply, ServerConfig, SimApp
from resources.sim.server.batcher import EngineBatcher, EngineFailure
from resources.sim.server.errors import ApiError
from resources.sim.server.faults import FAULT_KINDS, FaultConfig, FaultInjector
from resources.sim.server.protocol import parse_call, render_chat
from resources.sim.server.transport import SimServer, build_engine, serve_in_thread

__all__ = [
    "FAULT_KINDS",
    "ApiError",
    "EngineBatcher",
    "EngineFailure",
    "FaultConfig",
    "FaultInjector",
    "Reply",
    "ServerConfig",
    "SimApp",
    "SimServer",
    "build_engine",
    "parse_call",
    "render_chat",
    "serve_in_thread",
]
