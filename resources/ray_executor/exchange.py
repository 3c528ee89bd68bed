"""The Parquet files a Ray job and the process that submits it exchange (pure: no Ray, no
Dagster): the planned requests one way (`write_requests` / `read_requests`), the answers the
other (`write_answers` / `read_answers`).

A location is a local path (made absolute) or a URI `pyarrow.fs.FileSystem.from_uri` opens
(`s3://bucket/dir`, `gs://...`, `hdfs://...`): for a Ray job on another machine it must be
one both sides read, a shared volume or an object store.

Invariants:
- the requests file holds the requests in plan order (after dedup and GGR: the order the
  Ray job cuts into blocks at prefix groups), one row each: `pos` (0..n-1), `id`, `prompt`,
  `max_tokens`, `priority` and `output` (the `OutputSpec` as JSON); `read_requests` gives back
  requests equal to the ones written, in the same order;
- the answers file holds one row per request: `pos` and the `Response` fields;
  `read_answers(location, requests)` gives one `Response` per request, in request order, each
  under its request's id, or raises `RuntimeError` naming what came back missing, twice or
  under another id (an answer is never matched to the wrong row);
- a file is written whole or not at all (a local file is written beside and renamed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.output_spec import OutputSpec
from resources.engine import Request, Response
from resources.ray_executor.actors import in_request_order

__all__ = ["read_answers", "read_requests", "write_answers", "write_requests"]

ANSWER_FIELDS = tuple(f.name for f in dataclasses.fields(Response))
"""The columns of the answers file, after `pos`."""


def _filesystem(location: str):
    """(pyarrow filesystem, path inside it) of `location`."""
    from pyarrow import fs

    if "://" not in location:
        return fs.LocalFileSystem(), str(Path(location).resolve())
    return fs.FileSystem.from_uri(location)


def _write(table: pa.Table, location: str) -> None:
    filesystem, path = _filesystem(location)
    parent = path.rsplit("/", 1)[0]
    filesystem.create_dir(parent, recursive=True)
    if "://" in location:  # an object store's put is whole or nothing
        pq.write_table(table, path, filesystem=filesystem)
        return
    partial = f"{path}.{uuid.uuid4().hex}.partial"
    pq.write_table(table, partial)
    os.replace(partial, path)


def _read(location: str) -> pd.DataFrame:
    filesystem, path = _filesystem(location)
    return pq.read_table(path, filesystem=filesystem).to_pandas()


def _spec_json(spec: OutputSpec) -> str:
    return json.dumps(dataclasses.asdict(spec), sort_keys=True)


def _spec(text: str) -> OutputSpec:
    fields = json.loads(text)
    return OutputSpec(**{**fields, "values": tuple(fields["values"])})


def write_requests(requests: Sequence[Request], location: str) -> None:
    """Write `requests`, in their order, to `location` (see the module invariants)."""
    frame = pd.DataFrame(
        {
            "pos": pd.Series(range(len(requests)), dtype="int64"),
            "id": pd.Series([r.id for r in requests], dtype="object"),
            "prompt": pd.Series([r.prompt for r in requests], dtype="object"),
            "max_tokens": pd.Series([r.max_tokens for r in requests], dtype="int64"),
            "priority": pd.Series([r.priority for r in requests], dtype="int64"),
            "output": pd.Series([_spec_json(r.output) for r in requests], dtype="object"),
        }
    )
    _write(pa.Table.from_pandas(frame, preserve_index=False), location)


def read_requests(location: str) -> list[Request]:
    """The requests `write_requests` wrote to `location`, in plan order."""
    frame = _read(location).sort_values("pos")
    if list(frame["pos"]) != list(range(len(frame))):
        raise RuntimeError(f"{location}: request positions are not 0..{len(frame) - 1}")
    specs: dict[str, OutputSpec] = {}
    requests = []
    for rid, prompt, max_tokens, output, priority in zip(
        frame["id"], frame["prompt"], frame["max_tokens"], frame["output"], frame["priority"],
        strict=True,
    ):  # fmt: skip
        spec = specs[output] if output in specs else specs.setdefault(output, _spec(output))
        requests.append(Request(str(rid), str(prompt), int(max_tokens), spec, int(priority)))
    return requests


def write_answers(responses: Sequence[Response], location: str) -> None:
    """Write `responses` (position i answers request i) to `location`."""
    rows: dict[str, list[Any]] = {"pos": list(range(len(responses)))}
    for name in ANSWER_FIELDS:
        rows[name] = [getattr(r, name) for r in responses]
    schema = pa.schema(
        [("pos", pa.int64()), ("id", pa.string()), ("text", pa.string()),
         ("prompt_tokens", pa.int64()), ("cached_tokens", pa.int64()),
         ("output_tokens", pa.int64()), ("ttft_s", pa.float64()), ("finish_s", pa.float64()),
         ("error", pa.string()), ("cached_tokens_known", pa.bool_()), ("replica", pa.string())]
    )  # fmt: skip
    _write(pa.Table.from_pydict(rows, schema=schema), location)


def read_answers(location: str, requests: Sequence[Request]) -> list[Response]:
    """One `Response` per request of `requests`, in order, from the answers at `location`;
    RuntimeError (one line) when a position came back missing or twice or under another id."""
    return in_request_order(requests, _read(location), location, _answer)


def _answer(row: dict[str, Any]) -> Response:
    values = {n: (None if row[n] is None or row[n] != row[n] else row[n])
              for n in ("error", "replica")}  # fmt: skip
    return Response(
        id=str(row["id"]), text=str(row["text"]), prompt_tokens=int(row["prompt_tokens"]),
        cached_tokens=int(row["cached_tokens"]), output_tokens=int(row["output_tokens"]),
        ttft_s=float(row["ttft_s"]), finish_s=float(row["finish_s"]),
        cached_tokens_known=bool(row["cached_tokens_known"]), **values,
    )  # fmt: skip
