"""The planner's tokenizer (`resources.openai.tokens.plan_tokenizer`) against a tiny real HTTP
server: the server's `/tokenize` when it answers every prompt, the approximate tokenizer for
all prompts otherwise (never a mix), and llama.cpp's body and block size."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from resources.openai.tokens import plan_tokenizer
from resources.sim.tokenizer import ApproxTokenizer


@contextmanager
def tokenize_server(refuse: str | None = None, status: int = 200) -> Iterator[tuple[str, list]]:
    """A server whose `POST /tokenize` answers one token per character (+1000), except
    `refuse` (500) and every request when `status` is not 200; yields (base URL, bodies)."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            text = body.get("prompt", body.get("content"))
            code = status if self.path == "/tokenize" and text != refuse else 500
            payload = json.dumps({"tokens": [1000 + ord(c) for c in text]}).encode()
            self.send_response(code if self.path == "/tokenize" else 404)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()


PROMPTS = ["Rate it. a movie", "Rate it. another", "Rate it. a movie"]


def test_the_servers_tokens_when_it_tokenizes_every_prompt() -> None:
    with tokenize_server() as (url, bodies):
        tokenize, block_size = plan_tokenizer(url, "vllm", PROMPTS, model="m")
    assert block_size == 16
    assert [list(tokenize(p)) for p in PROMPTS] == [[1000 + ord(c) for c in p] for p in PROMPTS]
    assert len(bodies) == 2 and all(b["model"] == "m" for b in bodies)  # each text once


def test_the_approximate_tokenizer_for_all_when_one_prompt_fails_or_there_is_no_route() -> None:
    approx = ApproxTokenizer().encode
    for kwargs in ({"refuse": PROMPTS[1]}, {"status": 404}):
        with tokenize_server(**kwargs) as (url, _):
            tokenize, _ = plan_tokenizer(url, "vllm", PROMPTS)
        assert [list(tokenize(p)) for p in PROMPTS] == [approx(p) for p in PROMPTS], kwargs


def test_llamacpp_is_asked_for_content_and_caches_per_token() -> None:
    with tokenize_server() as (url, bodies):
        tokenize, block_size = plan_tokenizer(url, "llamacpp", PROMPTS[:1])
    assert block_size == 1 and bodies == [{"content": PROMPTS[0]}]
    assert list(tokenize(PROMPTS[0]))[0] == 1000 + ord("R")
