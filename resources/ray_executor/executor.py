"""Run a stage's planned requests with Ray Data: blocks cut at prefix groups, one actor per
replica (`run_on_ray`, `execute_on_ray`), on a Ray cluster (`ray_cluster`).

    result = run_on_ray(requests, ["http://a:8000/v1", "http://b:8000/v1"], "llama-2-7b")

The requests, in plan order, are cut into blocks (`resources.ray_executor.blocks.cut_blocks`:
`block_by="groups"` at prefix-group boundaries, `"default"` where Ray Data cuts by row count,
`ray.data.from_items(..., override_num_blocks=k)`, or with Ray's own k when no block size is
given), and `Dataset.map_batches` runs them on an
actor pool of exactly one `ReplicaActor` per replica URL (`batch_size=None`: a batch is a
block). Ray Data hands each block to a free actor (at most one block queued per actor, so a
replica done early takes the next block) and restarts a dead one, retrying its task (its
defaults: `max_restarts=-1`, `max_task_retries=-1`).

Invariants of `execute_on_ray` / `run_on_ray`:
- one `Response` per request, in request order, each with its request's id; a request whose
  row comes back missing or twice is an error (`RuntimeError`), never silently dropped;
- every answer is the replica's answer through the fleet client's own request path (retries,
  deadlines, validation, `RunResult.stopped` on a 401/403/unknown model or a dead replica);
- requests sent (`RayRun.sent`, counted by the actors) = requests needed + the ones in flight
  when an actor died (at most `commit_every` per death): the run's `Ledger` keeps committed
  answers across actor restarts;
- Ray is imported only inside these functions; `ray_cluster()` starts a local one (2 CPUs,
  500 MB object store, no dashboard) when none is running and no address is given, and shuts
  down only what it started.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from resources.configs import OpenAIEngineConfig
from resources.engine import Request, RunResult, RunStats
from resources.ray_executor.actors import Ledger, ReplicaActor, in_request_order
from resources.ray_executor.blocks import BlockBy, cut_blocks, default_rows

__all__ = ["RayRun", "check_address", "execute_on_ray", "import_ray", "ray_cluster", "run_on_ray"]

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOCAL_CPUS = 2
"""CPUs of a local cluster started here (this machine's 2 cores are shared)."""
OBJECT_STORE_BYTES = 500 * 2**20
"""Object store of a local cluster started here."""


def import_ray():
    """`ray` with Ray Data loaded; ImportError in one line naming the extra when it is absent."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ImportError(
            "the Ray executor needs Ray Data: pip install 'llm-assets[ray]' (ray[data]==2.60.0)"
        ) from None
    return ray


def check_address(address: str) -> None:
    """ValueError, one line naming `address`, when it is not `auto`/`local` nor a
    `[ray://]host:port` where something accepts a connection within 3 s."""
    if address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1].rstrip("/")
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ValueError(
            f"ray_address {address!r}: expected host:port (the head's GCS, ray start's --port), "
            "ray://host:10001 or auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3.0).close()
    except OSError as exc:
        raise ValueError(
            f"ray_address {address!r}: nothing answers at {host}:{port} "
            f"({exc.strerror or type(exc).__name__}); start the head (ray start --head) or fix "
            "--ray-address / LLM_ASSETS_RAY_ADDRESS"
        ) from None


@contextmanager
def ray_cluster(address: str | None = None, *, num_cpus: int = LOCAL_CPUS) -> Iterator[None]:
    """Connect to the Ray cluster at `address` ("auto": the one `ray start` runs here), or use
    the one this process already joined, or start a local one of its own (`num_cpus`, small
    object store, no dashboard; workers import this checkout; never a cluster someone else
    started with `ray start` on this machine); shuts down only one it started. An
    address where no cluster answers is a one-line ValueError naming it (`check_address`)."""
    ray = import_ray()

    if ray.is_initialized():
        yield
        return
    common = {"include_dashboard": False, "log_to_driver": False,
              "logging_level": logging.WARNING}  # fmt: skip
    if address:
        check_address(address)
        try:
            ray.init(address=address, **common)
        except ConnectionError as exc:
            reason = " ".join(str(exc).split())[:200]
            raise ValueError(f"ray_address {address!r}: {reason}") from None
    else:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        # "local": a new instance even where `ray start` runs one on this machine (ray.init
        # would join that otherwise, and lose its actors when its owner stops it)
        ray.init(address="local", num_cpus=num_cpus, object_store_memory=OBJECT_STORE_BYTES,
                 runtime_env={"env_vars": {"PYTHONPATH": path}}, **common)  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


@dataclass
class RayRun:
    """What `execute_on_ray` did: the result and how Ray Data ran it."""

    result: RunResult
    blocks: list[list[int]]
    """The blocks Ray ran (positions in request order), as its actors saw them."""
    block_replica: dict[int, int] = field(default_factory=dict)
    """Block (by its first position) -> the replica that answered it."""
    sent: list[int] = field(default_factory=list)
    """Requests each replica was sent (retried blocks' resent slices included)."""
    pids: list[list[int]] = field(default_factory=list)
    """Each replica's actor processes, in the order they claimed it (a restart adds one)."""


def _rows(requests: Sequence[Request]) -> tuple[list[dict[str, Any]], list[Any]]:
    specs: dict[Any, int] = {}
    rows = []
    for pos, r in enumerate(requests):
        spec = specs.setdefault(r.output, len(specs))
        rows.append({"pos": pos, "id": r.id, "prompt": r.prompt, "max_tokens": r.max_tokens,
                     "spec": spec, "priority": r.priority})  # fmt: skip
    return rows, list(specs)


def execute_on_ray(
    requests: Sequence[Request],
    config: OpenAIEngineConfig,
    *,
    api_key: str | None = None,
    block_by: BlockBy = "groups",
    block_rows: int | None = None,
    relquery_id: str = "ray",
    commit_every: int | None = None,
    actor_cpus: float | None = None,
    on_ledger: Callable[[Any], None] | None = None,
) -> RayRun:
    """Run `requests` over `config`'s replica URLs on the Ray cluster this process has joined
    (see the module invariants). `block_rows` defaults to `default_rows` (4 blocks per
    replica) with `block_by="groups"`, and to Ray Data's own block count (`from_items`
    without `override_num_blocks`) with `"default"`; `commit_every` (default
    `2 x max_concurrency`) is how many requests an actor sends between ledger commits;
    `actor_cpus` (default 1 / replicas, at most 0.5) the CPU share each actor reserves;
    `on_ledger(handle)` is called once the run's ledger exists."""
    urls = config.urls()
    if not urls:
        raise ValueError("the Ray executor needs at least one replica URL (base_url or base_urls)")
    if commit_every is not None and commit_every < 1:
        raise ValueError(f"commit_every must be >= 1, got {commit_every}")
    ray = import_ray()
    requests = list(requests)
    n = len(urls)
    ray_cut = block_by == "default" and block_rows is None  # Ray's own block count
    rows_per = block_rows if block_rows is not None else default_rows(len(requests), n)
    blocks = cut_blocks([r.prompt for r in requests], rows_per, block_by)
    start = time.perf_counter()
    if not requests:
        stats = RunStats.empty("openai", config.model or "", config.hardware)
        return RayRun(RunResult([], stats), blocks, sent=[0] * n)
    rows, specs = _rows(requests)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ledger = ray.remote(Ledger).options(num_cpus=0).remote(n)
    if on_ledger is not None:
        on_ledger(ledger)
    if block_by == "groups":
        dataset = ray.data.from_pandas([pd.DataFrame([rows[i] for i in b]) for b in blocks])
    else:
        dataset = ray.data.from_items(rows, override_num_blocks=None if ray_cut else len(blocks))
    fields = config.model_dump(exclude={"base_url", "base_urls", "routing"})
    kwargs = {"ledger": ledger, "base_urls": urls, "config": fields, "api_key": api_key,
              "specs": specs, "relquery_id": relquery_id,
              "commit_every": commit_every or 2 * config.max_concurrency}  # fmt: skip
    out = dataset.map_batches(
        ReplicaActor,
        fn_constructor_kwargs=kwargs,
        batch_size=None,
        batch_format="pandas",
        compute=ray.data.ActorPoolStrategy(size=n, max_tasks_in_flight_per_actor=1),
        num_cpus=actor_cpus if actor_cpus is not None else min(0.5, 1.0 / n),
    ).to_pandas()
    summary = ray.get(ledger.summary.remote())
    pids = ray.get(ledger.pids.remote())
    ray.kill(ledger)
    responses = in_request_order(requests, out, "Ray")
    wall = time.perf_counter() - start
    stats = RunStats.from_responses(responses, engine="openai", model=config.model or "",
                                    hardware=config.hardware, engine_time_s=wall,
                                    wall_time_s=wall)  # fmt: skip
    block_replica = {int(b): int(r) for b, r in zip(out["block"], out["replica"], strict=True)}
    ran: dict[int, list[int]] = {}
    for b, pos in zip(out["block"], out["pos"], strict=True):
        ran.setdefault(int(b), []).append(int(pos))
    ran_blocks = [sorted(ran[b]) for b in sorted(ran)]
    return RayRun(RunResult(responses, stats, summary["stopped"]), ran_blocks, block_replica,
                  summary["sent"], pids)  # fmt: skip


def run_on_ray(
    requests: Sequence[Request],
    base_urls: Sequence[str],
    model: str,
    ray_address: str | None = None,
    block_by: BlockBy = "groups",
    *,
    block_rows: int | None = None,
    api_key: str | None = None,
    relquery_id: str = "ray",
    **config_fields: Any,
) -> RunResult:
    """`requests` answered by the replicas at `base_urls` through Ray Data (`execute_on_ray`),
    on the cluster at `ray_address` (None: the one joined, else a local one). Other keywords
    are `OpenAIEngineConfig` fields (max_concurrency, timeout_s, ...)."""
    config = OpenAIEngineConfig(base_urls=list(base_urls), model=model, **config_fields)
    with ray_cluster(ray_address):
        run = execute_on_ray(requests, config, api_key=api_key, block_by=block_by,
                             block_rows=block_rows, relquery_id=relquery_id)  # fmt: skip
    return run.result
