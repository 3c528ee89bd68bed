"""What a replica says about itself, and when a fleet replica stalls: tests written from the
mutation survivors of `resources.openai.probe`, `stall` and `roster` (issue 34 item 7)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lib.hostile import HostileServer, Reply
from resources.openai.fleet import Replica
from resources.openai.probe import ServerInfo, probe_server
from resources.openai.roster import check_roster
from resources.openai.stall import stalled


def probe(url: str) -> ServerInfo:
    return asyncio.run(probe_server(url, {}, None, timeout_s=5.0, redact=lambda s: s))


def llama_server(method: str, path: str, body: dict) -> Reply:
    if path == "/v1/models":
        return Reply(body={"data": [{"id": "q4.gguf", "owned_by": "llamacpp"}]})
    if path == "/props":
        return Reply(body={"default_generation_settings": {"n_ctx": 8192}})
    return Reply(404, {"error": {"message": "not found"}})


def test_a_llama_server_is_named_by_its_props_and_its_window() -> None:
    with HostileServer(llama_server) as server:
        info = probe(server.url)
    assert info == ServerInfo(
        style="llamacpp", max_model_len=8192, identity="llamacpp[q4.gguf]+props"
    )


def test_a_401_without_a_message_says_unauthorized() -> None:
    with HostileServer(lambda *_: Reply(401, raw=b"")) as server:
        info = probe(server.url)
    assert info.auth_error == "HTTP 401 from GET /models: unauthorized"


def test_replicas_with_other_context_windows_are_two_deployments() -> None:
    urls = ["http://a/v1", "http://b/v1"]
    small = ServerInfo(style="vllm", max_model_len=4096, identity="vllm[m]")
    large = ServerInfo(style="vllm", max_model_len=8192, identity="vllm[m]")
    assert "context 8192" in check_roster(urls, [small, large])
    assert check_roster(urls, [small, small]) is None
    assert check_roster(urls, [small, ServerInfo(no_reply="refused")]) is None  # not a refusal


def fleet(waits: list[float | None], answers: int = 20, latency: float = 0.01) -> list[Replica]:
    """Replicas that answered `answers` requests at `latency` s each; replica k holds one
    request in flight sent `waits[k]` seconds before time 100 (None: nothing in flight)."""
    out = []
    for k, wait in enumerate(waits):
        replica = Replica(k, f"http://r{k}/v1")
        replica.latencies.extend([latency] * answers)
        if wait is not None:
            replica.in_flight[0] = 100.0 - wait
        out.append(replica)
    return out


@settings(max_examples=100, deadline=None, derandomize=True)
@given(waits=st.lists(st.one_of(st.none(), st.floats(0, 5)), min_size=1, max_size=5))
def test_stalled_never_gives_up_the_last_live_replica_nor_an_idle_one(waits) -> None:
    replicas = fleet(waits)
    out = stalled(replicas, 100.0)
    assert len(out) <= len(replicas) - 1
    bound = max(0.5, 10 * 0.01)
    for replica, reason, got in out:
        assert replica.in_flight and got == bound and reason.startswith("stalled")
        assert 100.0 - min(replica.in_flight.values()) > bound


def test_stalled_names_exactly_the_replicas_past_the_bound() -> None:
    assert [r.index for r, _, _ in stalled(fleet([0.1, 3.0, None, 0.6]), 100.0)] == [1, 3]
    assert [r.index for r, _, _ in stalled(fleet([3.0, 3.0]), 100.0)] == [0]  # never both
    assert stalled(fleet([3.0]), 100.0) == []  # the last live replica
    assert stalled(fleet([0.1, 3.0], answers=3), 100.0) == []  # too few answers to judge
    slow = fleet([0.1, 3.0], latency=0.2)  # bound 10 x 0.2 = 2 s
    assert [r.index for r, _, bound in stalled(slow, 100.0) if bound == 2.0] == [1]
    dead = fleet([3.0, 3.0, 0.1])
    dead[0].dead = "given up"
    assert [r.index for r, _, _ in stalled(dead, 100.0)] == [1]


def vllm_server(method: str, path: str, body: dict) -> Reply:
    if path == "/v1/models":
        return Reply(
            body={
                "data": [
                    "not an entry",
                    {"id": "m", "owned_by": "vllm", "max_model_len": 4096},
                    {"id": "lora", "owned_by": "vllm", "max_model_len": 2048},
                ]
            }
        )
    return Reply(404, {"error": {"message": "not found"}})


def test_a_vllm_server_is_named_by_its_models_and_the_first_window() -> None:
    with HostileServer(vllm_server) as server:
        info = probe(server.url)
    assert info == ServerInfo(style="vllm", max_model_len=4096, identity="vllm[lora,m]")


def test_a_window_from_meta_and_a_server_that_names_no_owner() -> None:
    def script(method: str, path: str, body: dict) -> Reply:
        if path == "/v1/models":
            return Reply(body={"data": [{"id": "x.gguf", "meta": {"n_ctx_train": 32768}}]})
        return Reply(404, {"error": {"message": "not found"}})

    with HostileServer(script) as server:
        info = probe(server.url)
    assert info == ServerInfo(style=None, max_model_len=32768, identity="?[x.gguf]")
