"""No secret survives a log record: agentgit_site.redaction, the filter on every log handler."""

from __future__ import annotations

import base64
import logging
import sys

import pytest

from agentgit_site.redaction import RedactSecrets, redact

TOKEN = "agt_Qm9vX3NlY3JldF90b2tlbl9mb3JfdGVzdHMhISE-_x"


@pytest.mark.parametrize(
    "text, expected",
    [
        (f'"WebSocket /ws/repos/fan/events?token={TOKEN}" [accepted]', '"WebSocket /ws/repos/fan/events?token=[redacted]" [accepted]'),
        (f"/api/v1/repos?after=3&TOKEN={TOKEN}&x=1", "/api/v1/repos?after=3&TOKEN=[redacted]&x=1"),
        (f"Authorization: Bearer {TOKEN}", "Authorization: Bearer [redacted]"),
        ("authorization: basic " + base64.b64encode(f"git:{TOKEN}".encode()).decode(), "authorization: basic [redacted]"),
        ("push to https://git:hunter2-password@example.com/r.git", "push to https://git:[redacted]@example.com/r.git"),
        ("password=hunter2&user=me", "password=[redacted]&user=me"),
        (f"a token in a path: /x/{TOKEN}/y", "a token in a path: /x/[redacted]/y"),
        ("agt%5FQm9vX3NlY3JldA percent-encoded", "[redacted] percent-encoded"),
    ],
)  # fmt: skip
def test_secrets_are_redacted(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text", ["GET /api/v1/repos/demo/log 200", "basic settings apply", "Started server process [7]"]
)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == text


def test_the_filter_redacts_arguments_and_tracebacks():
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s"', ("1.2.3.4", f"/ws?token={TOKEN}"), None
    )
    try:
        raise ValueError(f"bad token {TOKEN}")
    except ValueError:
        failing = logging.LogRecord("repos", logging.ERROR, __file__, 2, "failed", None, sys.exc_info())

    assert RedactSecrets().filter(record) and RedactSecrets().filter(failing)

    formatter = logging.Formatter("%(message)s")
    assert formatter.format(record) == '1.2.3.4 - "WebSocket /ws?token=[redacted]"'
    assert "agt_" not in formatter.format(failing) and "bad token [redacted]" in formatter.format(failing)
