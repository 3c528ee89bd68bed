"""What runs inside the Ray cluster: one `ReplicaActor` per replica and the run's `Ledger`.

Plain classes (no Ray import at module level): `resources.ray_executor.executor` wraps them
with `ray.remote` / hands `ReplicaActor` to `Dataset.map_batches` as its actor class.

Invariants:
- a `ReplicaActor` is bound to ONE replica (the index the ledger hands it, `Ledger.claim`:
  the replica with the fewest live holders, lowest index first) and sends every request of a
  block it gets to that replica, in block order, through a one-URL `OpenAIEngine` built from
  the run's `OpenAIEngineConfig`: retries, deadlines, reply validation and the circuit breaker
  are the fleet client's own;
- an answer is paid for once per run: before sending, the actor asks the ledger which of the
  block's positions are answered already (a block retried after its actor died) and sends only
  the others, `commit_every` at a time, putting each slice's successful answers into the
  ledger before sending the next. A kill -9 therefore resends only the requests of the slice
  in flight (at most `commit_every`), never a committed one. Errors are not committed, so a
  retried block retries them;
- the batch it returns has one row per row it got, same order, with the position, the
  replica, its own pid and the block's first position (to check what Ray cut).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from resources.engine import Request, Response

__all__ = ["RESPONSE_COLUMNS", "Ledger", "ReplicaActor", "response_from_row"]

RESPONSE_COLUMNS = ("id", "text", "prompt_tokens", "cached_tokens", "output_tokens", "ttft_s",
                    "finish_s", "error", "cached_tokens_known", "answered_by")  # fmt: skip
"""The `Response` fields, as columns of a returned batch (`answered_by`: its `replica`, the
URL; the batch's `replica` column is the replica's index)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Ledger:
    """One run's shared state (a Ray actor): which actor holds which replica, the answers
    committed so far by position, and how many requests each replica was sent."""

    def __init__(self, n_replicas: int) -> None:
        self.holders: list[list[tuple[str, int]]] = [[] for _ in range(n_replicas)]
        self.answers: dict[int, Response] = {}
        self.sent = [0] * n_replicas
        self.stopped: str | None = None

    def claim(self, node: str, pid: int) -> int:
        """The replica for a new actor (process `pid` on `node`): the fewest live holders.
        A holder on this ledger's node whose process is gone (killed) no longer counts; one on
        another node always does (its liveness cannot be read from here)."""
        here = _node_id()
        live = [sum(1 for n, p in hs if n != here or _alive(p)) for hs in self.holders]
        index = min(range(len(live)), key=lambda r: (live[r], r))
        self.holders[index].append((node, pid))
        return index

    def answered(self, positions: list[int]) -> dict[int, Response]:
        return {p: self.answers[p] for p in positions if p in self.answers}

    def commit(self, replica: int, sent: int, answers: dict[int, Response],
               stopped: str | None) -> None:  # fmt: skip
        """Record `sent` requests sent to `replica` and keep the successful `answers`."""
        self.sent[replica] += sent
        for pos, response in answers.items():
            if response.error is None:
                self.answers.setdefault(pos, response)
        self.stopped = self.stopped or stopped

    def pids(self) -> list[list[int]]:
        """Each replica's holders' pids, in claim order."""
        return [[p for _, p in hs] for hs in self.holders]

    def summary(self) -> dict[str, Any]:
        return {"committed": len(self.answers), "sent": list(self.sent), "stopped": self.stopped}


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def response_from_row(row: dict[str, Any]) -> Response:
    """The `Response` of one returned row."""
    error = row["error"]
    return Response(
        id=str(row["id"]),
        text=str(row["text"]),
        prompt_tokens=int(row["prompt_tokens"]),
        cached_tokens=int(row["cached_tokens"]),
        output_tokens=int(row["output_tokens"]),
        ttft_s=float(row["ttft_s"]),
        finish_s=float(row["finish_s"]),
        error=None if error is None or (isinstance(error, float) and error != error) else error,
        cached_tokens_known=bool(row["cached_tokens_known"]),
        replica=_text_or_none(row.get("answered_by")),
    )


def in_request_order(
    requests: Sequence[Request],
    rows: pd.DataFrame,
    source: str,
    to_response: Callable[[dict[str, Any]], Response] = response_from_row,
) -> list[Response]:
    """One response per request, in request order, from `rows` (each with its request's
    position `pos`); RuntimeError (one line naming `source`) when a position came back
    missing or twice, or an answer under another request's id: never matched to a wrong row."""
    positions = [int(p) for p in rows["pos"]]
    if sorted(positions) != list(range(len(requests))):
        missing = len(set(range(len(requests))) - set(positions))
        raise RuntimeError(
            f"{source}: {len(positions)} answers for {len(requests)} requests "
            f"({missing} missing, {len(positions) - len(set(positions))} twice)"
        )
    by_pos = {int(row["pos"]): to_response(row) for row in rows.to_dict("records")}
    responses = [by_pos[i] for i in range(len(requests))]
    for got, asked in zip(responses, requests, strict=True):
        if got.id != asked.id:
            raise RuntimeError(f"{source}: answer {got.id!r} came back for request {asked.id!r}")
    return responses


def _text_or_none(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


class ReplicaActor:
    """The `map_batches` actor class: see the module invariants. Constructor arguments come
    from `fn_constructor_kwargs`: the ledger handle, the replicas' URLs, the OpenAI config as a
    dict (without URLs), the API key (None for none), the output specs the rows index, the
    relQuery id and `commit_every`."""

    def __init__(self, ledger: Any, base_urls: list[str], config: dict[str, Any],
                 api_key: str | None, specs: list[Any], relquery_id: str,
                 commit_every: int) -> None:  # fmt: skip
        import ray

        from resources.configs import OpenAIEngineConfig
        from resources.openai.engine import OpenAIEngine

        self.ledger = ledger
        self.pid = os.getpid()
        self.replica = ray.get(ledger.claim.remote(_node_id(), self.pid))
        fields = {**config, "base_url": base_urls[self.replica], "base_urls": None}
        self.engine = OpenAIEngine(config=OpenAIEngineConfig(**fields), api_key=api_key)
        self.specs = specs
        self.relquery_id = relquery_id
        self.commit_every = commit_every

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        import ray

        positions = [int(p) for p in batch["pos"]]
        requests = {
            int(pos): Request(str(rid), str(prompt), int(mt), self.specs[int(spec)], int(prio))
            for pos, rid, prompt, mt, spec, prio in zip(
                batch["pos"], batch["id"], batch["prompt"], batch["max_tokens"], batch["spec"],
                batch["priority"], strict=True,
            )
        }  # fmt: skip
        answers: dict[int, Response] = ray.get(self.ledger.answered.remote(positions))
        todo = [p for p in positions if p not in answers]
        for start in range(0, len(todo), self.commit_every):
            piece = todo[start : start + self.commit_every]
            result = self.engine.run(self.relquery_id, [requests[p] for p in piece])
            got = dict(zip(piece, result.responses, strict=True))
            ray.get(self.ledger.commit.remote(self.replica, len(piece), got, result.stopped))
            answers.update(got)
            if result.stopped is not None:  # the replica refuses: the rest fail with why
                for p in todo[start + len(piece) :]:
                    answers[p] = Response(requests[p].id, "", 0, 0, 0, 0.0, 0.0,
                                          error=f"not sent: {result.stopped}")  # fmt: skip
                break
        rows = []
        for pos in positions:
            r = answers[pos]
            row = {name: getattr(r, name) for name in RESPONSE_COLUMNS[:-1]}
            row["answered_by"] = r.replica
            rows.append({"pos": pos, **row, "replica": self.replica, "pid": self.pid,
                         "block": positions[0]})  # fmt: skip
        return pd.DataFrame(rows)
