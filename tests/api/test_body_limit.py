"""Bodies over the limit are refused before the server reads them (real server, ASGI).

Each request sends only the start of its body and then waits: the 413 must come back while the
rest is still unsent. A server that read first and refused later would never answer.
"""

from __future__ import annotations

import json
import socket

import httpx

from tests.deployment import Deployment


def _send_part_and_read_answer(port: int, head: bytes, body_start: bytes) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head + body_start)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)  # times out (and fails the test) if no answer comes
            if not chunk:
                break
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, json.loads(answer.split(b"\r\n\r\n", 1)[1])


def test_oversized_bodies_are_refused_before_they_are_read():
    with Deployment("embedded", env={"AGENTGIT_MAX_BODY_BYTES": "1000"}) as server:
        token = server.create_token("u", scopes="admin")
        server.start_server()
        server.port = int(server.url.rsplit(":", 1)[1])
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"{server.url}/api/v1", headers=auth, timeout=30, trust_env=False) as http:
            assert http.post("/repos", json={"name": "demo"}).status_code == 201
            small = http.post("/repos/demo/blobs", content=b"z" * 900)
            assert small.status_code == 201

        start = b"POST /api/v1/repos/demo/blobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token.encode()
        declared = start + b"\r\nContent-Length: 1000000000\r\n\r\n"
        status, body = _send_part_and_read_answer(server.port, declared, b"x" * 100)
        assert (status, body["error"]["code"]) == (413, "too_large")

        chunked = start + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        status, body = _send_part_and_read_answer(server.port, chunked, b"400\r\n" + b"y" * 1024 + b"\r\n")
        assert (status, body["error"]["code"]) == (413, "too_large")
