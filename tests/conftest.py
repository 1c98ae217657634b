"""Fixtures every test folder may use."""

from __future__ import annotations

import pytest


@pytest.fixture
def stream_busy(monkeypatch):
    """An integrate request finds its stream's landing lock held by another transaction, so it
    queues its operation for a landing after its commit instead of landing it in its own
    transaction (repos/services/integration.py, ``request_integration``)."""
    from repos.services import integration

    monkeypatch.setattr(integration, "_lock_stream_by_id", lambda stream_id, unless_busy: None)
