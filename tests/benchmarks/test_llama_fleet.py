"""A real fleet: one `OpenAIEngine` over two llama.cpp `llama-server` replicas (issue 20, item 5).

Skipped (one line) unless the binary is built: `make llama-server`. Each replica has one slot
with the host prompt cache off (`benchmarks.lib.llama_server`), so a request reuses exactly its
common prefix with the previous request that replica served; the engine runs one lane per
replica (`max_concurrency=1`). The plan: GGR-ordered rows of seven prefix groups, each a long
shared movie description (~250 tokens) followed by a short review, all under one instruction.

The same requests run with `routing="affinity"`, then with `routing="round_robin"`, each on two
fresh servers. Asserted:

- per routing, the project's cached tokens (`RunStats.cached_tokens`, equal to the sum of
  `Response.cached_tokens`) equal the sum over both servers of llama.cpp's own counter
  `llamacpp:prompt_tokens_cached_total` (prompt tokens reused from a slot's cache) over the
  run, and its prompt tokens equal that counter plus `llamacpp:prompt_tokens_total` (prompt
  tokens computed); both replicas served requests; every row is accounted for (one response
  per request, in order, none failed, the run not stopped);
- affinity keeps every group whole on one replica: its cached tokens are exactly what that
  predicts, whichever replica each group went to (inside a group each request reuses its
  common prefix with the previous one; a group's first request reuses the instruction when
  its replica served something before, nothing on a fresh slot);
- affinity's hit rate, by the project's count and by the servers' counters, is above round
  robin's (round robin splits every group over both replicas, so each group's long
  description is computed twice).
"""

import random

import pytest

from benchmarks.lib.llama_cpp_build import server_binary

BINARY = server_binary()
if BINARY is None:
    pytest.skip("llama-server is not built (make llama-server)", allow_module_level=True)

from benchmarks.lib.gguf_model import BOS_ID  # noqa: E402
from benchmarks.lib.llama_server import ALIAS, LlamaServer, one_slot_cached  # noqa: E402
from resources.engine import Request  # noqa: E402
from resources.openai.engine import OpenAIEngine  # noqa: E402
from resources.openai.placement import prefix_groups  # noqa: E402

pytestmark = pytest.mark.llama_cpp

GROUP_SIZES = (6, 3, 5, 4, 7, 2, 5)
"""Rows per prefix group, in plan order (uneven, so the plan has to balance mass)."""
REPLICAS = 2
INSTRUCTION = "Is this review positive about the movie described? Answer Yes or No.\n"
WORDS = (
    "river city night quiet storm family secret letter garden winter train old doctor "
    "music school summer island friend war bright machine forest ocean village road "
    "mirror queen soldier painter dream clock bridge harbor lantern field mountain"
).split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def fleet_requests(seed: int = 0) -> list[Request]:
    """GGR-ordered rows: each group's rows together, its description first in the prompt."""
    rng = random.Random(seed)
    requests = []
    for g, size in enumerate(GROUP_SIZES):
        info = f"Movie {g}: {_text(rng, 220)}."
        for k in range(size):
            prompt = f"{INSTRUCTION}movie_info: {info}\nreview: {_text(rng, 18)}.\nanswer:"
            requests.append(Request(f"g{g}-r{k}", prompt, max_tokens=1))
    return requests


def _counters(server: LlamaServer) -> dict[str, float]:
    return {k: v for k, v in server.metrics().items() if k.endswith("_total")}


def _run(routing: str, model, tmp_path, requests):
    """`requests` through one engine over two fresh one-slot servers: the result and each
    server's counter increases over the run."""
    logs = [tmp_path / f"{routing}-{k}.log" for k in range(REPLICAS)]
    with LlamaServer(BINARY, model, log_path=logs[0]) as a:
        with LlamaServer(BINARY, model, log_path=logs[1]) as b:
            before = [_counters(a), _counters(b)]
            engine = OpenAIEngine(
                f"{a.base_url},{b.base_url}",
                ALIAS,
                routing=routing,
                max_concurrency=1,
                timeout_s=60.0,
                max_retries=1,
            )
            result = engine.run(f"fleet-{routing}", requests)
            after = [_counters(a), _counters(b)]
    deltas = [
        {k: v - old.get(k, 0.0) for k, v in new.items()}
        for old, new in zip(before, after, strict=True)
    ]
    return result, deltas


@pytest.fixture(scope="module")
def runs(model, tmp_path_factory):
    requests = fleet_requests()
    tmp = tmp_path_factory.mktemp("fleet")
    return requests, {r: _run(r, model, tmp, requests) for r in ("affinity", "round_robin")}


def test_the_plan_has_the_groups_it_was_built_with():
    groups = prefix_groups([r.prompt for r in fleet_requests()])
    assert [groups.count(g) for g in range(max(groups) + 1)] == list(GROUP_SIZES)


def test_project_cached_tokens_equal_both_servers_counters(runs):
    _, by_routing = runs
    for routing, (result, deltas) in by_routing.items():
        server_cached = sum(d["prompt_tokens_cached_total"] for d in deltas)
        server_computed = sum(d["prompt_tokens_total"] for d in deltas)
        assert result.stats.cached_tokens == sum(r.cached_tokens for r in result.responses)
        assert result.stats.cached_tokens == server_cached, (routing, deltas)
        assert result.stats.prompt_tokens == server_computed + server_cached, (routing, deltas)
        assert result.stats.cached_tokens_unknown == 0, routing
        assert all(d["prompt_tokens_total"] > 0 for d in deltas), (routing, "a replica idled")


def test_affinity_keeps_every_group_whole_on_one_slot(runs, tokenizer_json):
    from tokenizers import Tokenizer

    requests, by_routing = runs
    llama3 = Tokenizer.from_file(str(tokenizer_json))
    ids = [[BOS_ID, *llama3.encode(r.prompt, add_special_tokens=False).ids] for r in requests]
    groups = prefix_groups([r.prompt for r in requests])
    within = sum(
        one_slot_cached([ids[i - 1], ids[i]])[1]
        for i in range(1, len(ids))
        if groups[i] == groups[i - 1]
    )
    across = {
        one_slot_cached([ids[i], ids[j]])[1]
        for i in range(len(ids))
        for j in range(len(ids))
        if groups[i] != groups[j]
    }
    assert len(across) == 1  # any two groups share just the instruction (the fixture's design)
    (instruction,) = across
    expected = within + (len(GROUP_SIZES) - REPLICAS) * instruction
    assert by_routing["affinity"][0].stats.cached_tokens == expected


def test_affinity_hit_rate_beats_round_robin(runs):
    _, by_routing = runs

    def server_rate(deltas):
        cached = sum(d["prompt_tokens_cached_total"] for d in deltas)
        return cached / (cached + sum(d["prompt_tokens_total"] for d in deltas))

    affinity, round_robin = by_routing["affinity"], by_routing["round_robin"]
    assert affinity[0].stats.token_hit_rate > round_robin[0].stats.token_hit_rate
    assert server_rate(affinity[1]) > server_rate(round_robin[1])


def test_every_row_accounted_for(runs):
    requests, by_routing = runs
    for routing, (result, _) in by_routing.items():
        assert result.stopped is None, routing
        assert [r.id for r in result.responses] == [r.id for r in requests], routing
        failed = [(r.id, r.error) for r in result.responses if r.error is not None]
        assert not failed, (routing, failed)
        assert all(r.prompt_tokens > 0 and r.output_tokens >= 1 for r in result.responses)
