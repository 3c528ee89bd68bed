"""A real engine: the project's pipeline against llama.cpp's `llama-server` on this CPU.

Skipped (one line) unless the binary is built: `make llama-server` (`.ci/run` does it). The
model is a small random-weight Llama with the real Llama 3 tokenizer, written per session.
What is asserted is what does not depend on timing: the project's cached-token count equals
the server's own counter, GGR's real hit rate beats the original order's, every row is
accounted for, prompt token counts are the Llama 3 tokenizer's, and each request's cached
tokens are its common prefix with the previous request (one slot, one request in flight).
"""

import pytest

from benchmarks.lib.llama_cpp_build import server_binary

BINARY = server_binary()
if BINARY is None:
    pytest.skip("llama-server is not built (make llama-server)", allow_module_level=True)

from benchmarks.lib.gguf_model import BOS_ID  # noqa: E402
from benchmarks.lib.llama_cpp_pair import first_rows_csv, run_pair  # noqa: E402
from benchmarks.lib.llama_server import LlamaServer, one_slot_cached  # noqa: E402
from tests.conftest import shared_file  # noqa: E402

pytestmark = pytest.mark.llama_cpp
ROWS = 60


@pytest.fixture(scope="module")
def pair(tmp_path_factory, model):
    home = tmp_path_factory.mktemp("pair")
    movies = first_rows_csv(shared_file("data", "movies_small.csv"), ROWS, home / "movies.csv")
    return {r.method: r for r in run_pair(BINARY, model, movies, home)}


def test_project_cached_tokens_equal_the_server_counter(pair):
    for method, r in pair.items():
        assert r.run.success, (method, r.run.failed_checks)
        assert r.cached_tokens == r.server_cached_tokens, method
        prompt_tokens = r.run.metadata["prompt_tokens"]
        computed = r.server["prompt_tokens_total"]
        assert prompt_tokens == computed + r.server_cached_tokens, method
    assert pair["ggr"].cached_tokens > 0


def test_ggr_real_hit_rate_beats_the_original_order(pair):
    assert all(r.run.success for r in pair.values())
    assert pair["ggr"].hit_rate > pair["original"].hit_rate


def test_every_row_accounted_for(pair):
    for method, r in pair.items():
        meta = r.run.metadata
        assert r.run.success and not r.run.failed_checks, (method, r.run.failed_checks)
        assert (
            meta["stage_rows_answered"] + meta["stage_rows_failed"] + meta["stage_rows_skipped"]
            == ROWS
        )
        assert meta["stage_rows_failed"] == 0 and meta["errors"] == 0
        assert len(r.run.requests) == meta["n_requests"] == meta["requests_sent"] > 0


@pytest.fixture(scope="module")
def llama3(tokenizer_json):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json))


def _ids(llama3, prompts) -> list[list[int]]:
    return [llama3.encode(p, add_special_tokens=False).ids for p in prompts]


def test_prompt_tokens_are_the_llama3_tokenizers(pair, model, llama3, tmp_path):
    requests = pair["ggr"].run.requests
    assert not requests.empty
    ids = _ids(llama3, requests["prompt"])
    with LlamaServer(BINARY, model, log_path=tmp_path / "server.log") as server:
        assert [server.tokenize(p) for p in requests["prompt"]] == ids
    assert list(requests["prompt_tokens"]) == [len(i) + 1 for i in ids]  # + BOS, as Llama 3


def test_each_request_reuses_its_common_prefix_with_the_previous_one(pair, llama3):
    for method, r in pair.items():
        ids = [[BOS_ID, *i] for i in _ids(llama3, r.run.requests["prompt"])]
        assert ids, method
        assert list(r.run.requests["cached_tokens"]) == one_slot_cached(ids), method
