"""The approximate tokenizer on long runs without spaces (issue 22 item 8): the same ids as the
one-CRC-per-sub-token definition, in work linear in the text, and a fast context-window check.

Work is counted, not timed, where it can be: the bytes fed to CRC-32 (the old quadratic part
hashed a whole piece once per sub-token). One generous n-vs-4n timing covers the rest (the
regex split, segments, memo tables).
"""

from __future__ import annotations

import json
import math
import time
import types
import zlib

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resources.sim.tokenizer as tokenizer_module
from llm_assets.benchmark_queries import compile_query
from llm_assets.optimizer.prompts import TRUNCATION_MARKER
from llm_assets.pipeline.plan import run_dedup, run_plan
from llm_assets.pipeline.rows import ROW
from resources.sim.tokenizer import (
    _APPROX_SPLIT,
    _MAX_MEMO_CHARS,
    VOCAB_SIZE,
    ApproxTokenizer,
    _crc_shift,
    _piece_ids,
    _piece_token_count,
    _segments,
)

SEED = 0x9E3779B1
LONG_RUNS = {
    "x": "x",
    "ab": "ab",
    "Title": "Ab",
    "CAPS": "AB",
    "punct": ".",
    "underscore": "_",
    "accented": "é",
    "digits": "7",
    "spaces": " \t",
}


def reference_piece_ids(piece: str) -> tuple[int, ...]:
    """The definition (and the former implementation): one CRC of the piece per sub-token."""
    data = piece.encode("utf-8")
    return tuple(zlib.crc32(data, SEED ^ i) % VOCAB_SIZE for i in range(_piece_token_count(piece)))


def reference_encode(text: str) -> list[int]:
    """The former `encode` without its memo tables."""
    return [
        i
        for segment in _segments(text)
        for piece in _APPROX_SPLIT.findall(segment)
        for i in reference_piece_ids(piece)
    ]


CHARS = list("abcxyzABCXYZéÉß0189 .,!?_'\"-(\n\r\t")
# Runs long enough to take the fast path (more than 8 sub-tokens: 57+ lower-case letters, 25+
# capitals or punctuation), joined with ordinary text.
runs = st.lists(
    st.tuples(
        st.sampled_from([*CHARS, "ab", "Ab", "A.", "x1", "\u00e9t\u00e9"]), st.integers(1, 400)
    ),
    max_size=6,
).map(lambda parts: "".join(chunk * k for chunk, k in parts))
texts = st.one_of(
    st.text(alphabet=st.sampled_from(CHARS), max_size=300), runs, st.text(max_size=80)
)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_ids_match_the_one_crc_per_sub_token_definition(text: str) -> None:
    tok = ApproxTokenizer()
    expected = reference_encode(text)
    assert tok.encode(text) == expected
    assert tok.encode(text) == expected  # from the memo tables
    assert tok.count(text) == len(expected)
    for piece in _APPROX_SPLIT.findall(text):
        assert _piece_ids(piece) == reference_piece_ids(piece)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_crc_is_affine_in_its_start_value(data: bytes, a: int, b: int) -> None:
    assert zlib.crc32(data, a) ^ zlib.crc32(data, b) == _crc_shift(a ^ b, len(data))


@pytest.mark.parametrize("n", [57, 58, 64, 65, 449, 450, 20_000])
def test_long_pieces_around_the_doubling_edges(n: int) -> None:
    for piece in ("x" * n, "A" * n, "!" * n, "é" * n):
        assert _piece_ids(piece) == reference_piece_ids(piece)


class CountingCrc:
    """Stands in for the tokenizer module's `zlib`: counts the bytes hashed."""

    def __init__(self) -> None:
        self.bytes = 0

    def crc32(self, data: bytes, value: int = 0) -> int:
        self.bytes += len(data)
        return zlib.crc32(data, value)


@pytest.fixture
def crc(monkeypatch: pytest.MonkeyPatch) -> CountingCrc:
    counter = CountingCrc()
    monkeypatch.setattr(tokenizer_module, "zlib", types.SimpleNamespace(crc32=counter.crc32))
    return counter


@pytest.mark.parametrize("run", LONG_RUNS.values(), ids=LONG_RUNS.keys())
def test_a_long_run_is_hashed_once(run: str, crc: CountingCrc) -> None:
    text = run * (200_000 // len(run))
    n_bytes = len(text.encode("utf-8"))
    ids = ApproxTokenizer().encode(text)
    assert len(ids) >= 1
    # One pass over the text (plus short pieces hashed once per sub-token, here none long);
    # one CRC per sub-token over the whole run would be ~n_bytes * len(ids).
    assert crc.bytes <= 2 * n_bytes, f"{crc.bytes} bytes hashed for {n_bytes}"


def test_long_segments_and_pieces_stay_out_of_the_memo_tables() -> None:
    tok = ApproxTokenizer()
    text = "head line\n" + "x" * (3 * _MAX_MEMO_CHARS) + "\ntail"
    first = tok.encode(text)
    assert tok.encode(text) == first == reference_encode(text)
    memo_keys = [*tok._segment_memo, *tok._piece_memo]
    assert "head line\n" in memo_keys
    assert max(map(len, memo_keys)) <= _MAX_MEMO_CHARS


def adversarial(n: int) -> str:
    """~n characters of long runs without spaces, and ~n/4 of short mixed pieces."""
    mixed = "".join(CHARS[(i * 7919) % len(CHARS)] for i in range(n // 4))
    return " ".join(run * (n // 8 // len(run)) for run in LONG_RUNS.values()) + mixed


def test_work_grows_linearly_n_vs_4n() -> None:
    def best_of_3(text: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            ApproxTokenizer().encode(text)  # fresh memo tables: no reuse between runs
            times.append(time.perf_counter() - t0)
        return min(times)

    small, large = adversarial(60_000), adversarial(240_000)
    best_of_3(small)  # warm caches (the CRC shift maps)
    ratio = best_of_3(large) / best_of_3(small)
    # Linear is ~4; quadratic ~16. Generous for a shared machine.
    assert ratio < 8, f"4x the text took {ratio:.1f}x the time"


def test_context_window_check_on_a_1m_character_cell(crc: CountingCrc) -> None:
    """run_plan's check counts the whole prompt, then fit_row binary-searches the cut: O(log n)
    counts, each linear in its prompt (bytes hashed bounded by the characters counted)."""
    n = 1_000_000
    rows = pd.DataFrame(
        {
            ROW: [0, 1],
            "movie_info": ["short info", "x" * n],
            "review_content": ["fine", "ok"],
        }
    )
    deduped = run_dedup(rows, ["movie_info", "review_content"], dedup=True)
    tok = ApproxTokenizer()
    counted: list[int] = []

    def count_tokens(text: str) -> int:
        counted.append(len(text))
        return len(tok.encode(text))

    plan = run_plan(
        deduped,
        compile_query("q1", "movies").llm_calls[0],
        ["movie_info", "review_content"],
        "ggr",
        max_prompt_tokens=8_000,
        count_tokens=count_tokens,
        context_policy="truncate",
    )
    assert plan["error"].isna().all() and plan["truncated"].sum() == 1
    cut = plan.loc[plan["truncated"], "prompt"].iloc[0]
    assert TRUNCATION_MARKER in cut and len(tok.encode(cut)) <= 8_000
    long_counts = [c for c in counted if c > n // 2]
    assert len(counted) <= 2 + 2 + math.ceil(math.log2(n + 1)), counted  # 2 whole prompts
    assert len(long_counts) <= 3  # the whole prompt, and the search's first probe or two
    assert crc.bytes <= 2 * sum(counted)


def test_sim_server_answers_a_2m_character_prompt(crc: CountingCrc) -> None:
    """The server's context-window check tokenizes the prompt once: a 2M-character prompt
    without spaces gets its 400 (over the window) after one pass, not minutes."""
    from resources.sim.engine import SimulatedEngine
    from resources.sim.server import ServerConfig, SimApp

    engine = SimulatedEngine(gpu="L4", model="llama-2-7b", policy="vllm-v1")
    app = SimApp(engine, ServerConfig(served_model_name="llama-2-7b", batch_window_s=0.0))
    prompt = "x" * 2_000_000
    try:
        body = {"model": "llama-2-7b", "prompt": prompt, "max_tokens": 5}
        reply = app.handle("POST", "/v1/completions", {}, json.dumps(body).encode())
    finally:
        app.close()
    assert reply.status == 400
    assert "maximum context length is 4096 tokens" in reply.body["error"]["message"]
    assert crc.bytes <= 2 * len(prompt)
