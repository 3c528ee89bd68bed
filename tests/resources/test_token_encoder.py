"""An engine's `token_encoder` pickles without the engine (sharded planning ships it to Ray
tasks in other processes) and gives the engine's own `token_ids`."""

import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resources.engine import EngineWrapper
from resources.sim.engine import SimulatedEngine

LLAMA3 = Path(__file__).resolve().parents[3] / "shared" / "tokenizers" / "llama3_tokenizer.json"


def engines():
    yield SimulatedEngine()
    yield EngineWrapper(SimulatedEngine())
    if LLAMA3.is_file():
        yield SimulatedEngine(tokenizer=str(LLAMA3))


@pytest.mark.parametrize("engine", list(engines()), ids=lambda e: type(e).__name__)
@given(text=st.text(max_size=60))
def test_the_encoder_crosses_processes_and_encodes_as_the_engine(engine, text):
    encoder = pickle.loads(pickle.dumps(engine.token_encoder))
    assert list(encoder(text)) == list(engine.token_ids(text))
