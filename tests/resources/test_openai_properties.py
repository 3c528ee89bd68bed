"""Property tests of the OpenAI engine against hostile replies (issue 11) and of its lanes.

Invariant under test: whatever a server sends (any JSON, every malformed shape, non-JSON),
every request ends answered (only from a well-formed completion) or failed with a reason,
in request order, and nothing escapes the engine as an exception.
"""

from __future__ import annotations

import json
import threading
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.openai.fleet import Replica, part_lanes, plan_caps
from resources.openai.placement import plan_fleet, prefix_groups
from resources.openai.wire import (
    MAX_TOKEN_COUNT,
    MalformedReply,
    Redactor,
    UsageBounds,
    completion_from_reply,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip
counts = st.one_of(
    st.integers(-5, 50), st.just(2**64), st.booleans(), st.none(), st.text(max_size=3)
)
near_completions = st.builds(
    lambda text, p, c, cached, n: {
        "choices": [{"text": text}] * n,
        "usage": {"prompt_tokens": p, "completion_tokens": c}
        | ({} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}),
    },
    st.one_of(st.text(max_size=5), st.integers(), st.none()),
    counts,
    counts,
    st.one_of(st.none(), counts),
    st.integers(0, 3),
)
replies = st.one_of(json_values, near_completions)


@settings(max_examples=400, deadline=None)
@given(replies, st.booleans())
def test_any_reply_is_a_valid_completion_or_malformed(data, chat: bool) -> None:
    try:
        got = completion_from_reply(data, chat=chat, request_id="r7")
    except MalformedReply as exc:
        assert str(exc).startswith("request r7: ")
        return
    assert isinstance(got.text, str)
    for n in (got.prompt_tokens, got.output_tokens):
        assert type(n) is int and 0 <= n < MAX_TOKEN_COUNT
    assert got.cached_tokens is None or 0 <= got.cached_tokens <= got.prompt_tokens


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(replies, st.builds(completion_body), st.binary(max_size=20)),
                min_size=1, max_size=6))  # fmt: skip
@example([{"choices": [{"text": ""}], "usage": {"prompt_tokens": 0, "completion_tokens": 18}}])
def test_every_request_ends_answered_or_failed_with_a_reason(bodies: list) -> None:
    sent: dict[int, dict] = {}

    def script(method: str, path: str, body: dict) -> Reply:
        i = int(body["prompt"].rsplit(" ", 1)[1])
        sent[i] = body
        reply = bodies[i]
        if isinstance(reply, bytes):
            return Reply(raw=reply)
        return Reply(body=reply)

    requests = [Request(f"r{i}", f"prompt {i}") for i in range(len(bodies))]
    with HostileServer(script) as srv:
        eng = OpenAIEngine(srv.url, "m", max_retries=1, initial_backoff_s=0.0, probe=False)
        result = eng.run("q", requests)
    assert [r.id for r in result.responses] == [r.id for r in requests]
    for i, (reply, response) in enumerate(zip(bodies, result.responses, strict=True)):
        # valid: a completion whose usage the request it answers can have (the engine's bounds)
        bounds = UsageBounds.of(sent[i]["prompt"], sent[i].get("max_tokens"))
        try:
            completion_from_reply(reply, chat=False, request_id="x", bounds=bounds)
            valid = not isinstance(reply, bytes)
        except MalformedReply:
            valid = False
        if isinstance(reply, bytes):
            try:
                completion_from_reply(json.loads(reply), chat=False, request_id="x", bounds=bounds)
                valid = True
            except (ValueError, MalformedReply):
                valid = False
        assert response.ok == valid, (reply, response)
        if not response.ok:
            assert response.error and response.error.startswith("failed after 2 attempts: ")


# -- secrets -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), min_size=8, max_size=40),
    st.data(),
)
def test_no_8_char_fragment_of_a_secret_survives_redaction(secret: str, data) -> None:
    start = data.draw(st.integers(0, len(secret) - 8))
    stop = data.draw(st.integers(start + 8, len(secret)))
    fragment = secret[start:stop]
    fragment = data.draw(st.sampled_from([fragment, fragment.lower(), fragment.upper()]))
    text = data.draw(st.text(max_size=10)) + fragment + data.draw(st.text(max_size=10))
    shown = Redactor([secret])(text).lower()
    low = secret.lower()
    assert all(low[i : i + 8] not in shown for i in range(len(low) - 7))


# -- lanes -------------------------------------------------------------------------------------

prompt_lists = st.lists(
    st.builds(lambda head, movie, rest: head + (movie + " ") * 40 + rest,
              st.sampled_from(["Q: ", "R: "]), st.sampled_from("abc"), st.text(max_size=5)),
    max_size=40,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(prompt_lists, st.integers(1, 8), st.booleans(), st.sampled_from([1, 4]))
def test_lanes_partition_the_run_in_order(prompts: list[str], workers: int, affinity: bool,
                                          per_worker: int):  # fmt: skip
    """One replica (a server or a router): its lanes, as `serve_fleet` starts them."""
    replica = Replica(0, "http://h/v1")
    replica.parts.extend(enumerate(plan_fleet(prompts, 1).queues[0]))
    plan_caps([replica], workers, affinity, per_worker)
    lanes = [lane for n, part in replica.parts for lane in part_lanes(part, n, replica.cap)]
    flat = [i for lane in lanes for i in lane.indices]
    assert flat == list(range(len(prompts)))  # every request once, in order
    cap = -(-len(prompts) // (workers * per_worker)) if prompts else 1
    groups = prefix_groups(prompts)
    for lane in lanes:
        assert lane.indices and (not affinity or len(lane.indices) <= cap)
        if affinity:
            assert len({groups[i] for i in lane.indices}) == 1
    leaders = [lane.part for lane in lanes if lane.leads]
    assert len(leaders) == len({lane.part for lane in lanes})
    # neighbours sharing head and movie (42 tokens: two full KV blocks) are one group, unless
    # every prompt shares them (then that prefix is common to all and groups nothing)
    if len({p[:83] for p in prompts}) > 1:
        for i in range(1, len(prompts)):
            same_movie = prompts[i][:83] == prompts[i - 1][:83]
            assert (groups[i] == groups[i - 1]) == same_movie


def test_a_prefix_group_is_served_in_order_one_at_a_time() -> None:
    """A llama.cpp-style server (a cache per slot), GGR order: three movies x five reviews,
    three workers (so no group is cut: a group is cut only when longer than ceil(n /
    max_concurrency)). Each movie's requests must reach the server in order and never overlap
    in time (one slot keeps the group's prefix); movies run in parallel."""
    movies = ["A" * 200, "B" * 200, "C" * 200]
    prompts = [f"Instruction.\nmovie: {m}\nreview {k}" for m in movies for k in range(5)]
    spans: dict[int, list[tuple[float, float]]] = {}
    lock = threading.Lock()
    active: dict[str, int] = {}
    overlap: list[int] = []
    total: list[int] = []

    def script(method: str, path: str, body: dict) -> Reply:
        i = prompts.index(body["prompt"])
        movie = body["prompt"][20]
        with lock:
            active[movie] = active.get(movie, 0) + 1
            overlap.append(active[movie])
            total.append(sum(active.values()))
            spans.setdefault(i // 5, []).append((time.monotonic(), i))
        time.sleep(0.02)
        with lock:
            active[movie] -= 1
        return Reply(body=completion_body())

    requests = [Request(f"r{i}", p) for i, p in enumerate(prompts)]
    with HostileServer(script) as srv:
        engine = OpenAIEngine(srv.url, "m", max_concurrency=3, probe=False, server_style="llamacpp")
        result = engine.run("q", requests)
    assert all(r.ok for r in result.responses)
    assert max(overlap) == 1  # never two requests of one movie in flight at once
    assert max(total) > 1  # but the movies ran side by side
    for group, seen in spans.items():
        assert [i for _, i in seen] == list(range(group * 5, group * 5 + 5))
