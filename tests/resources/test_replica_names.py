"""Each answer names the replica that gave it (issue 34 item 4): through the response cache
(also a file written before the column existed), into `llm_outputs`' `replica` column and the
per-replica counts; never with credentials; empty for the in-process sim engine."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from llm_assets.output_spec import OutputSpec
from llm_assets.pipeline.rows import INPUT
from llm_assets.pipeline.send import outputs_frame, replica_counts
from llm_assets.query.parts import LLMCall
from resources.engine import Request, Response
from resources.openai.engine import OpenAIEngine
from resources.response_cache import ResponseCache
from resources.runner import run_requests
from resources.sim.engine import SimulatedEngine

REQS = [Request(f"r{i}", f"Is review number {i} of this film positive?", 2) for i in range(8)]


def script(method: str, path: str, body: dict) -> Reply:
    if path.endswith("/models"):
        return Reply(body={"data": [{"id": "m", "owned_by": "vllm"}]})
    return Reply(body=completion_body())


def test_answers_name_their_replica_without_credentials_and_the_cache_keeps_it(tmp_path):
    cache = ResponseCache(tmp_path / "c.duckdb")
    with HostileServer(script) as a, HostileServer(script) as b:
        with_creds = [u.replace("http://", "http://user:s3cret-pass@") for u in (a.url, b.url)]
        engine = OpenAIEngine(",".join(with_creds), "m", max_concurrency=2)
        first = run_requests(engine, "q", REQS, cache=cache)
        again = run_requests(OpenAIEngine(a.url, "m"), "q", REQS, cache=cache)
    names = [r.replica for r in first.responses]
    assert set(names) == {a.url, b.url}  # both served, each named by its clean URL
    assert not any("s3cret" in n or "user" in n for n in names)
    assert again.sent == 0 and [r.replica for r in again.responses] == names  # from the cache


def test_a_cache_file_written_before_replicas_were_named_gains_the_column(tmp_path: Path):
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:  # the schema before issue 34
        con.execute(
            """CREATE TABLE responses (key VARCHAR PRIMARY KEY, engine VARCHAR NOT NULL,
            model VARCHAR NOT NULL, request_id VARCHAR, text VARCHAR NOT NULL,
            prompt_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL, ttft_s DOUBLE, finish_s DOUBLE,
            stored_at TIMESTAMP DEFAULT current_timestamp)"""
        )
        con.execute("INSERT INTO responses VALUES ('k0','e','m','r0','old',5,1,1,0.1,0.2,now())")
    cache = ResponseCache(path)
    assert cache.get_many(["k0"])["k0"].replica is None
    cache.put_many([("k1", Response("r1", "new", 5, 1, 1, 0.1, 0.2, replica="http://x/v1"))])
    got = cache.get_many(["k0", "k1"])
    assert got["k0"].text == "old" and got["k1"].replica == "http://x/v1"


def test_the_outputs_table_carries_the_replica_and_the_sim_engine_leaves_it_empty():
    plan = pd.DataFrame({INPUT: [0, 1, 2], "request_id": ["a", "b", "c"]})
    call = LLMCall("answer", "Is it good? {x}", ("x",), OutputSpec.choice(["Yes", "No"]), 2)
    responses = [
        Response("a", "Yes", 5, 0, 1, 0.1, 0.1, replica="http://one/v1"),
        Response("b", "No", 5, 0, 1, 0.1, 0.1, replica="http://two/v1"),
        Response("c", "", 0, 0, 0, 0.1, 0.1, error="boom"),
    ]
    out = outputs_frame(plan, responses, call)
    assert list(out["replica"]) == ["http://one/v1", "http://two/v1", None]
    assert replica_counts(out) == {"http://one/v1": 1, "http://two/v1": 1}  # not the error
    sim = SimulatedEngine(gpu="L4", model="llama-2-7b").run("q", REQS)
    sim_out = outputs_frame(
        pd.DataFrame({INPUT: range(len(REQS)), "request_id": [r.id for r in REQS]}),
        sim.responses,
        call,
    )
    assert sim_out["replica"].isna().all() and replica_counts(sim_out) == {}
