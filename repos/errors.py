"""The server's error taxonomy: what an API caller is told, as a machine code.

    ApiError            code            retryable   typical cause
    ├── Invalid         invalid         no          malformed JSON, wrong types, unsafe paths, missing blobs
    ├── Unauthenticated unauthenticated no          no, unknown or revoked token
    ├── Forbidden       forbidden       no          the credential lacks the scope
    ├── NotFound        not_found       no          unknown repository, stream, proposal, object, path
    ├── AlreadyExists   already_exists  no          a repository or stream name that is taken
    ├── Aborted         aborted         yes         the stream kept moving while integrating; retry
    ├── TooLarge        too_large       no          a body over the configured limit
    ├── RateLimited     rate_limited    yes         the credential's token bucket is empty
    └── Unavailable     unavailable     yes         a dependency (database, broker) is not reachable

``conflict`` is not an error: it is an integration outcome. Engine errors become API errors in
one place, :func:`from_engine`; HTTP statuses are chosen in one place, the API's exception
handler (repos/api/errors.py).
"""

from __future__ import annotations

from engine.errors import EngineError, InvalidInput, ObjectMissing, PathNotFound, WrongObjectType


class ApiError(Exception):
    """An error the API reports in its one JSON shape."""

    code = "internal"
    retryable = False

    def __init__(self, message: str, *, details: list[dict] | None = None, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.retry_after_ms = retry_after_ms

    def as_dict(self) -> dict:
        body: dict = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.details:
            body["details"] = self.details
        if self.retry_after_ms is not None:
            body["retry_after_ms"] = self.retry_after_ms
        return {"error": body}


class Invalid(ApiError):
    code = "invalid"


class Unauthenticated(ApiError):
    code = "unauthenticated"


class Forbidden(ApiError):
    code = "forbidden"


class NotFound(ApiError):
    code = "not_found"


class AlreadyExists(ApiError):
    code = "already_exists"


class Aborted(ApiError):
    code = "aborted"
    retryable = True


class TooLarge(ApiError):
    code = "too_large"


class RateLimited(ApiError):
    code = "rate_limited"
    retryable = True


class Unavailable(ApiError):
    code = "unavailable"
    retryable = True


def from_engine(error: EngineError, *, missing: type[ApiError] = NotFound) -> ApiError:
    """The API error for an engine error.

    ``missing`` decides what a missing object means where it is raised: a 404 when the caller
    asked for the object, ``Invalid`` when the caller's input named it (a changeset's blob).
    """
    details = [dict(detail) for detail in error.details] or [{"code": error.code, "message": error.message}]
    if isinstance(error, ObjectMissing):
        return missing(error.message, details=details)
    if isinstance(error, PathNotFound):
        return NotFound(error.message, details=details)
    if isinstance(error, (InvalidInput, WrongObjectType)):
        return Invalid(error.message, details=details)
    return ApiError(error.message, details=details)  # CorruptObject: internal, never expected
