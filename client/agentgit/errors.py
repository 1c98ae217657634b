"""Every exception the client raises, chosen by the error ``code`` the server answers.

    AgentGitError
    ├── TransportError          the server could not be reached, or the connection dropped (retried)
    ├── OperationPending        an integration still queued when the client stopped waiting
    └── ApiError                an error answer: .code, .status, .message, .retryable, .details
        ├── Invalid             invalid          400
        ├── Unauthenticated     unauthenticated  401
        ├── Forbidden           forbidden        403
        ├── PolicyDenied        policy_denied    403  .requirements (the unmet ones), .proposal (the one that waits)
        ├── NotFound            not_found        404
        ├── AlreadyExists       already_exists   409
        ├── Aborted             aborted          409  retryable (retried)
        ├── WrongState          wrong_state      409  (a review of an integrated proposal, ...)
        ├── TooLarge            too_large        413
        ├── RateLimited         rate_limited     429  retryable (retried), .retry_after_ms
        ├── Unavailable         unavailable      503  retryable (retried)
        └── InternalError       internal         500, and any code this client does not know

A ``conflict`` is not an error: it is an integration outcome (``Outcome.conflicted``).
"""

from __future__ import annotations

from typing import Any

import httpx


class AgentGitError(Exception):
    """Base of everything this package raises."""


class TransportError(AgentGitError):
    """No answer: the connection could not be made, or it dropped before the answer came."""


class OperationPending(AgentGitError):
    """The integration was still queued when the client stopped waiting; poll ``operation``."""

    def __init__(self, message: str, operation: int) -> None:
        super().__init__(message)
        self.operation = operation


class ApiError(AgentGitError):
    """An error answer in the API's one JSON shape."""

    code = "internal"

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        retryable: bool = False,
        details: list[dict] | None = None,
        retry_after_ms: int | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.details = details or []
        self.retry_after_ms = retry_after_ms
        self.body = body

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Invalid(ApiError):
    code = "invalid"


class Unauthenticated(ApiError):
    code = "unauthenticated"


class Forbidden(ApiError):
    code = "forbidden"


class PolicyDenied(ApiError):
    """The repository's policy refuses the update. ``requirements``: one ``{"requirement",
    "message"}`` per unmet requirement, each saying who or what can meet it; ``proposal``: the
    proposal that stays open for that (a landing's or the one integrated; None for a push or a
    stream created at a head)."""

    code = "policy_denied"

    @property
    def requirements(self) -> list[dict]:
        return self.details

    @property
    def proposal(self) -> int | None:
        return _error_field(self.body, "proposal")

    @property
    def policy_version(self) -> int | None:
        return _error_field(self.body, "policy_version")


class NotFound(ApiError):
    code = "not_found"


class AlreadyExists(ApiError):
    code = "already_exists"


class Aborted(ApiError):
    code = "aborted"


class WrongState(ApiError):
    """The thing is not in a state that allows it: a closed proposal integrated, an integrated one
    revised or reviewed."""

    code = "wrong_state"


class TooLarge(ApiError):
    code = "too_large"


class RateLimited(ApiError):
    code = "rate_limited"


class Unavailable(ApiError):
    code = "unavailable"


class InternalError(ApiError):
    code = "internal"


#: The exception class of each error code.
BY_CODE: dict[str, type[ApiError]] = {cls.code: cls for cls in ApiError.__subclasses__()}


def _error_field(body: Any, name: str) -> Any:
    """A code's own field of an error object (``proposal`` of a ``policy_denied``)."""
    doc = body.get("error", body) if isinstance(body, dict) else None
    return doc.get(name) if isinstance(doc, dict) else None


def error_from_body(body: Any, status: int = 0, retry_after_s: float | None = None) -> ApiError:
    """The exception an error body (``{"error": {...}}`` or its inside) describes."""
    doc = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(doc, dict):
        doc = {}
    code = doc.get("code")
    cls = BY_CODE.get(code, InternalError) if isinstance(code, str) else InternalError
    retry_after_ms = doc.get("retry_after_ms")
    if retry_after_ms is None and retry_after_s is not None:
        retry_after_ms = int(retry_after_s * 1000)
    message = doc.get("message") or (f"HTTP {status}" if status else "the request failed")
    return cls(
        str(message),
        status=status,
        retryable=bool(doc.get("retryable", cls in (Aborted, RateLimited, Unavailable))),
        details=doc.get("details") if isinstance(doc.get("details"), list) else None,
        retry_after_ms=retry_after_ms if isinstance(retry_after_ms, int) else None,
        body=body,
    )


def error_from_response(response: httpx.Response) -> ApiError:
    """The exception for an error response (its body must have been read)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = {"error": {"code": _code_of_status(response.status_code), "message": response.text[:500]}}
    return error_from_body(body, response.status_code, retry_after_seconds(response.headers.get("Retry-After")))


def retry_after_seconds(header: str | None) -> float | None:
    """``Retry-After`` in seconds (the delta form; the date form is not used by AgentGit)."""
    if header is None:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        return None


def _code_of_status(status: int) -> str:
    """For answers that are not the API's JSON (a proxy's page): the code of the status."""
    return {400: "invalid", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 413: "too_large"}.get(
        status, {429: "rate_limited", 503: "unavailable"}.get(status, "internal")
    )
