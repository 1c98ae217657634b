"""A webhook receiver for the tests: a real HTTP server on 127.0.0.1, on a thread of the test."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: How long a held request waits to be released (a bound on a hang, not a measurement).
HOLD_S = 30


class Receiver:
    """Records what it is sent and answers the statuses it is given in turn (then 200). Clear
    ``release`` to keep each request unanswered until it is set again."""

    def __init__(self, statuses: list[int] | None = None, headers: dict[str, str] | None = None) -> None:
        self.requests: list[dict] = []
        self.statuses = list(statuses or [])
        self.headers = headers or {}
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.answered = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                receiver.arrived.set()
                receiver.release.wait(HOLD_S)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                receiver.answered.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def verified(request: dict, secret: str) -> dict:
    """The JSON body of a received delivery whose signature is the HMAC-SHA256 of its body
    under ``secret`` (AssertionError otherwise)."""
    expected = "sha256=" + hmac.new(secret.encode(), request["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request["headers"]["X-AgentGit-Signature-256"], expected), request["headers"]
    return json.loads(request["body"])
