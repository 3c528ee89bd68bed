"""The approximate tokenizer: determinism, prefix stability, speed, and fidelity to Llama 3."""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resources.sim.tokenizer import ApproxTokenizer, Tokenizer, load_tokenizer
from tests.conftest import SHARED

LLAMA3_JSON = SHARED / "tokenizers" / "llama3_tokenizer.json"
LLAMA3_TIKTOKEN = SHARED / "tokenizers" / "llama3_tokenizer.model"
DATA_FILES = ["movies_small.csv", "contributions.csv", "squad_v2_dev_half.csv"]
MAX_ROWS = 1500


def test_ids_are_deterministic_across_processes() -> None:
    text = "Classify the review: It's a 2019 MASTERPIECE, truly_great!\n"
    here = ApproxTokenizer().encode(text)
    code = (
        "from resources.sim.tokenizer import ApproxTokenizer;"
        f"print(ApproxTokenizer().encode({text!r}))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert str(here) == there
    assert all(0 <= i < 128_256 for i in here)


def test_line_aligned_prefixes_tokenize_the_same() -> None:
    tok = ApproxTokenizer()
    head = "Instruction: label the sentiment.\nmovie_info: A long synopsis. It goes on and on.\n"
    for tail in ("review: great", "review: awful. Truly bad.", ""):
        assert tok.encode(head + tail)[: len(tok.encode(head))] == tok.encode(head)


def test_counts_are_plausible() -> None:
    tok = ApproxTokenizer()
    assert tok.count("") == 0
    assert tok.count("hello world") == 2
    assert tok.count("12345") == 2  # digits split in groups of three, as in Llama 3
    assert isinstance(tok, Tokenizer)


def test_fast_on_relational_prompts() -> None:
    tok = ApproxTokenizer()
    instruction = "Decide whether the review below is positive or negative. " * 20
    prompts = [
        f"{instruction}\nmovie_info: synopsis number {i % 68} "
        + "words here. " * 30
        + f"\nreview: review {i} says the film was {'good' if i % 2 else 'bad'}.\n"
        for i in range(3000)
    ]
    t0 = time.perf_counter()
    for p in prompts:
        tok.encode(p)
    assert time.perf_counter() - t0 < 2.0  # ~0.1 s normally; generous for shared CI machines


def _texts(name: str) -> list[str]:
    csv.field_size_limit(1 << 30)
    with open(SHARED / "data" / name, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return [", ".join(row) for row in rows[1 : MAX_ROWS + 1]]


@pytest.mark.skipif(not LLAMA3_JSON.is_file(), reason="../shared/tokenizers is absent")
@pytest.mark.parametrize("name", DATA_FILES)
def test_within_15_percent_of_llama3_on_shared_data(name: str) -> None:
    if not (SHARED / "data" / name).is_file():
        pytest.skip(f"../shared/data/{name} is absent")
    pytest.importorskip("tokenizers")
    reference = load_tokenizer(LLAMA3_JSON)
    approx = ApproxTokenizer()
    texts = _texts(name)
    ref = sum(len(reference.encode(t)) for t in texts)
    got = sum(len(approx.encode(t)) for t in texts)
    assert abs(got / ref - 1) <= 0.15, f"{name}: approx {got} vs llama3 {ref} tokens"


@pytest.mark.skipif(
    not (LLAMA3_JSON.is_file() and LLAMA3_TIKTOKEN.is_file()),
    reason="../shared/tokenizers is absent",
)
def test_hf_and_tiktoken_files_load_and_agree() -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("tiktoken")
    text = "Hello world, it's 12345 THE_best\n\nok"
    hf = load_tokenizer(LLAMA3_JSON).encode(text)
    tk = load_tokenizer(LLAMA3_TIKTOKEN).encode(text)
    assert hf == tk and hf[0] == 9906  # "Hello", no BOS added


def test_missing_tokenizer_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")


def test_never_more_tokens_than_characters() -> None:
    """`SimulatedEngine.tokens_within_chars`: the planner skips counting a prompt no longer
    than the context limit in characters, so no text may have more tokens than characters."""
    tok = ApproxTokenizer()
    texts = [
        "", "a", " ", "\n", "\n\n \n", "!!!", "a,b;c", "'s't", "_", "__init__", "12345678",
        "ÀÉÎõü ß", "日本語のテキスト", "🙂🙂 x", "HELLO World", "x" * 5000, "- * / " * 50,
        " . ".join(["sentence one", "two"] * 200), "\t \r\n\r\n  a",
    ]  # fmt: skip
    for path in sorted(SHARED.glob("data/*.csv"))[:3]:
        with path.open(encoding="utf-8", newline="") as handle:
            texts += ["\n".join(row) for row in itertools.islice(csv.reader(handle), 300)]
    for text in texts:
        assert tok.count(text) <= len(text), text[:80]
