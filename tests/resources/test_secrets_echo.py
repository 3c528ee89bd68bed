"""A server that echoes what it was sent (a proxy's error page, a debugging gateway) must not
carry a secret into an error row: not the API key in a 200 body that is not JSON, and not a
`user:password@` URL's password, echoed as the Basic header's base64 (issue 22 item 6)."""

from __future__ import annotations

import base64
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from resources.engine import Request
from resources.openai.engine import OpenAIEngine
from resources.runner import run_requests


class Echo(BaseHTTPRequestHandler):
    """Answers every POST with `status` and a body quoting the request's Authorization (as
    base64 of the whole header line with `encoded`)."""

    status = 200
    encoded = False

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen = f"Authorization: {self.headers.get('Authorization')}"
        if self.encoded:
            seen = "base64 " + base64.b64encode(seen.encode()).decode()
        body = f"<html>gateway saw {seen}</html>"
        data = body.encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture(params=[(200, False), (502, False), (200, True), (502, True)])
def echo_url(request):
    status, encoded = request.param
    handler = type("EchoWith", (Echo,), {"status": status, "encoded": encoded})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def errors_of(engine: OpenAIEngine) -> list[str]:
    outcome = run_requests(engine, "echo", [Request(id="r1", prompt="Say hi", max_tokens=4)])
    engine.close()
    assert outcome.failed == 1
    return [r.error or "" for r in outcome.responses]


def test_an_echoed_api_key_never_reaches_the_error_row(echo_url):
    key = f"sk-test-{secrets.token_hex(16)}"
    engine = OpenAIEngine(f"http://{echo_url}", "m", api_key=key, max_retries=0)
    (error,) = errors_of(engine)
    assert "gateway saw " in error  # the body is shown, redacted
    assert key not in error and key[:12] not in error, error
    header = base64.b64encode(f"Authorization: Bearer {key}".encode()).decode()
    assert header[24:36] not in error, error  # (characters 24.. encode the key alone)


def test_an_echoed_basic_auth_header_never_shows_the_password(echo_url):
    password = secrets.token_hex(12)
    token = base64.b64encode(f"analyst:{password}".encode()).decode()
    engine = OpenAIEngine(f"http://analyst:{password}@{echo_url}", "m", max_retries=0)
    (error,) = errors_of(engine)
    assert "gateway saw " in error, error
    assert password not in error and token not in error and token[:12] not in error, error
    encoded = base64.b64encode(f"Authorization: Basic {token}".encode()).decode()
    assert encoded[32:44] not in error, error  # (the encoded token's middle)
