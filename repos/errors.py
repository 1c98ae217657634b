"""The server's error table: every code an API caller can be told, declared once.

    class                code             status  retryable  close  typical cause
    ApiError             internal         500     no         4500   anything unexpected (a bug, a corrupt object)
    ├── Invalid          invalid          400     no         4400   malformed JSON, wrong types, unsafe paths, missing blobs
    ├── Unauthenticated  unauthenticated  401     no         4401   no, unknown or revoked token
    ├── Forbidden        forbidden        403     no         4403   the credential lacks the scope
    ├── PolicyDenied     policy_denied    403     no         4403   the repository's policy refuses the update
    ├── NotFound         not_found        404     no         4404   unknown repository, stream, proposal, object, path
    ├── AlreadyExists    already_exists   409     no         4409   a repository or stream of that name exists
    ├── Aborted          aborted          409     yes        4409   the stream kept moving while integrating; retry
    ├── WrongState       wrong_state      409     no         4409   a closed proposal integrated, an integrated one revised
    ├── TooLarge         too_large        413     no         4413   a body over the configured limit
    ├── RateLimited      rate_limited     429     yes        4429   the credential's token bucket is empty
    └── Unavailable      unavailable      503     yes        4503   a dependency (database, broker) is not reachable

Each class declares its code, HTTP status and retryable flag (``class NotFound(ApiError,
code="not_found", status=404)``); everything else is derived from that: :data:`ERRORS` (code →
class), the HTTP status of every answer (repos/api/errors.py), the schema's enum of codes
(repos/api/serializers.py), the WebSocket close code ("close": 4000 + the HTTP status, so a
client reads one table for both) and the git answer (:meth:`ApiError.git_answer`). ``conflict`` is not an
error: it is an integration outcome.

Engine errors cross into the server at one boundary, :func:`from_engine`: services let them
propagate, and whoever answers a caller (the DRF exception handler and the WebSocket consumer,
through :func:`api_error`; the landing queue recording a failed operation) translates them there. A service calls :func:`from_engine` itself only to change what an engine
error means where it is raised (a missing blob that the caller's changeset names is their
invalid input, not a missing resource).
"""

from __future__ import annotations

from typing import Any, ClassVar

from engine.errors import CorruptObject, EngineError, InvalidInput, ObjectMissing, PathNotFound, WrongObjectType

#: WebSocket close codes are this plus the HTTP status of the same refusal.
CLOSE_CODE_BASE = 4000
#: The one WebSocket close code that is not a refusal: the event feed's subscriber read too
#: slowly and was dropped; the reason says ``too far behind; resume after N``.
CLOSE_TOO_FAR_BEHIND = CLOSE_CODE_BASE + 8


class ApiError(Exception):
    """An error the API reports in its one JSON shape; ``internal`` (500) itself."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False
    #: The WebSocket close code of this refusal.
    close_code: ClassVar[int] = CLOSE_CODE_BASE + 500

    def __init_subclass__(cls, *, code: str, status: int, retryable: bool = False, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if code in ERRORS:
            raise TypeError(f"the error code {code!r} is declared twice")
        cls.code, cls.status, cls.retryable = code, status, retryable
        cls.close_code = CLOSE_CODE_BASE + status
        ERRORS[code] = cls

    def __init__(
        self,
        message: str,
        *,
        details: list[dict] | None = None,
        retry_after_ms: int | None = None,
        extra: dict | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.retry_after_ms = retry_after_ms
        #: Fields of the error object beyond the common ones, documented per code (a policy
        #: refusal names the ``proposal`` that waits and the ``policy_version``).
        self.extra = extra or {}

    def as_dict(self) -> dict:
        body: dict = {"code": self.code, "message": _carried(self.message), "retryable": self.retryable}
        if self.details:
            body["details"] = _carried(self.details)
        if self.retry_after_ms is not None:
            body["retry_after_ms"] = self.retry_after_ms
        body.update(self.extra)
        return {"error": body}

    def git_lines(self) -> list[str]:
        """The ``remote:`` lines a git client is shown for this refusal beside its ref's status."""
        return [f"{self.code}: {self.message}"] + [
            f"  {d['requirement']}: {d['message']}" for d in self.details if "requirement" in d
        ]

    def git_answer(self) -> tuple[int, bytes]:
        """What a git client is answered over smart HTTP: the status, and a ``text/plain`` body
        (git prints such a body to its user as ``remote: …`` lines)."""
        return self.status, f"{self.code}: {_carried(self.message)}\n".encode()


def _carried(value: Any) -> Any:
    """``value`` with every text UTF-8 can carry: a message that quotes the caller's input may
    hold a lone surrogate (JSON can spell one), which no answer could encode."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode()
    if isinstance(value, list):
        return [_carried(item) for item in value]
    if isinstance(value, dict):
        return {key: _carried(item) for key, item in value.items()}
    return value


#: Every error code, in the table's order, and its class.
ERRORS: dict[str, type[ApiError]] = {"internal": ApiError}


class Invalid(ApiError, code="invalid", status=400):
    """The request is malformed, contradicts itself or names something it may not."""


class Unauthenticated(ApiError, code="unauthenticated", status=401):
    """No credential, or one that is unknown or revoked."""


class Forbidden(ApiError, code="forbidden", status=403):
    """The credential lacks the scope the request needs."""


class PolicyDenied(ApiError, code="policy_denied", status=403):
    """The repository's policy refuses the update: one ``details`` entry per unmet requirement
    (``{"requirement", "message"}``), each saying who or what can meet it."""


class NotFound(ApiError, code="not_found", status=404):
    """The repository, stream, proposal, object or path does not exist."""


class AlreadyExists(ApiError, code="already_exists", status=409):
    """Something of that name exists already (a repository, a stream)."""


class Aborted(ApiError, code="aborted", status=409, retryable=True):
    """The work was abandoned without effect (the stream kept moving); retrying may succeed."""


class WrongState(ApiError, code="wrong_state", status=409):
    """The resource's state does not allow the action (a closed proposal is not integrated, an
    integrated one is neither revised, closed nor resolved); the message says what would."""


class TooLarge(ApiError, code="too_large", status=413):
    """A body over the configured limit."""


class RateLimited(ApiError, code="rate_limited", status=429, retryable=True):
    """The credential's token bucket is empty; ``retry_after_ms`` says when a token is back."""


class Unavailable(ApiError, code="unavailable", status=503, retryable=True):
    """A dependency (the database, the broker) is not reachable, or the server is saturated."""


#: The API error each engine error becomes (the nearest class in the engine error's MRO wins).
_FROM_ENGINE: dict[type[EngineError], type[ApiError]] = {
    ObjectMissing: NotFound,
    PathNotFound: NotFound,
    InvalidInput: Invalid,
    WrongObjectType: Invalid,
    CorruptObject: ApiError,  # internal: stored bytes that do not parse are never expected
}


def from_engine(error: EngineError, *, missing: type[ApiError] | None = None) -> ApiError:
    """The API error for an engine error: the one boundary between the two trees.

    ``missing`` overrides what a missing object means where it is raised: by default a 404 (the
    caller asked for the object); ``Invalid`` when the caller's input named it (a changeset's blob).
    """
    details = [dict(detail) for detail in error.details] or [{"code": error.code, "message": error.message}]
    if missing is not None and isinstance(error, ObjectMissing):
        return missing(error.message, details=details)
    for kind in type(error).__mro__:
        if kind in _FROM_ENGINE:
            return _FROM_ENGINE[kind](error.message, details=details)
    return ApiError(error.message, details=details)


def api_error(exc: BaseException) -> ApiError | None:
    """The API error an exception stands for (an ``ApiError`` itself, or an engine error
    translated); None for anything else, which the surface answers as ``internal``."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, EngineError):
        return from_engine(exc)
    return None
