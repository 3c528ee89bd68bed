"""`python -m resources.sim.server`: serve the simulated engine over HTTP until SIGTERM.

    python -m resources.sim.server --host 127.0.0.1 --port 8000 [--gpu L4] [--model llama-2-7b]
        [--policy vllm-v1] [--no-prefix-cache] [--num-gpu-blocks-override N]
        [--batch-window-ms 5] [--api-key KEY]
        [--api-key-env VAR] [--fault-rate 0.1 --fault-status 503] [--fault-latency-ms 200]
        [--fault-latency-jitter-ms 100] [--fault-hang-rate 0.05] [--fault-drop-rate 0.05]
        [--fault-malformed-rate 0.05] [--fault-seed 0]

Logs `sim server on http://HOST:PORT/v1 (...)` once it is serving. SIGTERM (and SIGINT, unless
the process was started with SIGINT ignored, as background jobs are) shuts it down cleanly:
no new connections, hung connections let go, queued requests answered with an error, the
dispatcher joined, exit status 0. The SIGTERM handler is installed even when SIGTERM arrived
ignored: a parent that maps SIGTERM to an ignored SIGINT (Dagster's interrupt set-up does, in a
shell started with SIGINT ignored) would otherwise leave servers that nothing but SIGKILL stops.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from collections.abc import Sequence

from resources.engine import LLMEngine
from resources.sim.server.app import ServerConfig
from resources.sim.server.faults import FaultConfig
from resources.sim.server.transport import SimServer, build_engine

log = logging.getLogger("resources.sim.server")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m resources.sim.server",
        description="OpenAI-compatible HTTP server backed by the simulated engine.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--gpu", default="L4", help="simulated GPU profile (default L4)")
    p.add_argument("--model", default="llama-2-7b", help="simulated model (default llama-2-7b)")
    p.add_argument("--policy", default="vllm-v1", help="scheduling policy (default vllm-v1)")
    p.add_argument("--no-prefix-cache", action="store_true", help="disable prefix caching")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json / tiktoken file (optional)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences per batch")
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="token budget per iteration"
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="default 0.9")
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        metavar="N",
        help="KV cache of N blocks of 16 tokens instead of the derived size (vLLM's flag; "
        "block 0 is vLLM's null block, so N >= 2)",
    )
    p.add_argument("--served-model-name", default=None, help="model name clients must send")
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=5.0,
        help="coalescing window after the oldest queued request (default 5)",
    )
    p.add_argument(
        "--max-batch-requests",
        type=int,
        default=256,
        help="most requests per engine batch (default 256)",
    )
    p.add_argument(
        "--disable-prompt-tokens-details",
        action="store_true",
        help="do not report usage.prompt_tokens_details.cached_tokens",
    )
    p.add_argument("--api-key", default=None, help="require this Bearer key on /v1/*")
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require the Bearer key held by environment variable VAR (keeps the key out of "
        "the process list); an error if VAR is unset or empty",
    )
    f = p.add_argument_group("fault injection (completion calls only; all off by default)")
    f.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="share of completion calls answered with --fault-status instead (e.g. 0.1)",
    )
    f.add_argument(
        "--fault-status",
        type=int,
        default=503,
        help="HTTP status of --fault-rate, 400-599 (default 503; e.g. 429, 500)",
    )
    f.add_argument(
        "--fault-latency-ms",
        type=float,
        default=0.0,
        help="fixed delay before every completion call is served (default 0)",
    )
    f.add_argument(
        "--fault-latency-jitter-ms",
        type=float,
        default=0.0,
        help="extra delay per call, uniform in [0, this] (default 0)",
    )
    f.add_argument(
        "--fault-hang-rate",
        type=float,
        default=0.0,
        help="share of calls never answered until the client gives up (default 0)",
    )
    f.add_argument(
        "--fault-max-hang-s",
        type=float,
        default=300.0,
        help="longest a hung call holds its connection before closing it (default 300)",
    )
    f.add_argument(
        "--fault-drop-rate",
        type=float,
        default=0.0,
        help="share of calls cut mid-response: headers and half the body, then close",
    )
    f.add_argument(
        "--fault-malformed-rate",
        type=float,
        default=0.0,
        help="share of calls answered HTTP 200 with a body that is not valid JSON",
    )
    f.add_argument(
        "--fault-seed",
        type=int,
        default=0,
        help="seed of the fault draws (default 0; draws follow arrival order)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def _api_key(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    if args.api_key is not None and args.api_key_env is not None:
        parser.error("give --api-key or --api-key-env, not both")
    if args.api_key_env is None:
        return args.api_key
    key = os.environ.get(args.api_key_env)
    if not key:
        parser.error(
            f"--api-key-env {args.api_key_env}: that environment variable is unset or empty"
        )
    return key


def _engine(args: argparse.Namespace) -> LLMEngine:
    """The simulated engine the flags describe."""
    return build_engine(
        gpu=args.gpu,
        model=args.model,
        policy=args.policy,
        enable_prefix_caching=not args.no_prefix_cache,
        tokenizer=args.tokenizer,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    api_key = _api_key(args, parser)
    try:
        faults = FaultConfig(
            rate=args.fault_rate,
            status=args.fault_status,
            latency_ms=args.fault_latency_ms,
            latency_jitter_ms=args.fault_latency_jitter_ms,
            hang_rate=args.fault_hang_rate,
            max_hang_s=args.fault_max_hang_s,
            drop_rate=args.fault_drop_rate,
            malformed_rate=args.fault_malformed_rate,
            seed=args.fault_seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        engine = _engine(args)
    except ValueError as exc:  # EngineConfig's one-line error naming the bad setting
        parser.error(str(exc))
    config = ServerConfig(
        served_model_name=args.served_model_name or args.model,
        batch_window_s=args.batch_window_ms / 1000.0,
        max_batch_requests=args.max_batch_requests,
        enable_prompt_tokens_details=not args.disable_prompt_tokens_details,
        api_key=api_key,
        faults=faults,
    )
    server = SimServer(engine, host=args.host, port=args.port, config=config, owns_engine=True)
    stop = _stop_on_signals()
    server.start()
    log.info(
        "sim server on %s (gpu=%s model=%s policy=%s prefix_cache=%s kv_blocks=%s faults=%s)",
        server.base_url,
        args.gpu,
        args.model,
        args.policy,
        not args.no_prefix_cache,
        getattr(engine, "num_kv_blocks", "?"),
        faults if faults.enabled else "off",
    )
    try:
        while not stop:
            time.sleep(0.1)
    finally:
        server.close()
    log.info("sim server stopped (%s)", stop[0] if stop else "error")
    return 0


def _stop_on_signals() -> list[str]:
    """Install the shutdown handlers; the returned list gets the signal's name when one
    arrives (a flag, not an Event: a handler must not take a lock the main thread may hold)."""
    received: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, on_signal)
    return received


if __name__ == "__main__":
    raise SystemExit(main())
