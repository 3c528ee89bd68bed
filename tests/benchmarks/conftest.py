"""Fixtures of the llama.cpp tests: the Llama 3 tokenizer file from ../shared (skipped when
absent) and a small random-weight GGUF model written once per test module."""

import pytest

from tests.conftest import shared_file


@pytest.fixture(scope="module")
def tokenizer_json():
    return shared_file("tokenizers", "llama3_tokenizer.json")


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer_json):
    from benchmarks.lib.gguf_model import write_model  # gguf only where a model is needed

    return write_model(tmp_path_factory.mktemp("model") / "model.gguf", tokenizer_json)
