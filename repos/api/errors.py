"""Errors as HTTP answers: every exception a request meets becomes the one JSON shape.

Every error the API answers has one JSON shape, ``{"error": {"code", "message", "retryable", ...}}``
(DESIGN.md, "API conventions"). The code decides the status, from the error table in
repos/errors.py (each class's ``status``). What else arrives here is mapped onto a code:

    code             raised as (besides the repos.errors class)
    invalid          DRF ParseError / ValidationError; Django SuspiciousOperation; engine InvalidInput, WrongObjectType
    unauthenticated  DRF NotAuthenticated / AuthenticationFailed
    forbidden        DRF / Django PermissionDenied
    not_found        DRF NotFound; Django Http404; an unknown /api/ URL; engine ObjectMissing, PathNotFound
    too_large        Django RequestDataTooBig
    unavailable      database or broker unreachable (retryable)
    internal         anything else (never expected; logged with its traceback)

An engine error that reaches a view unwrapped is answered with its documented code
(repos.errors.api_error), never as a 500. Two HTTP statuses keep a code from the table because
the vocabulary of codes is closed: a method the endpoint does not serve is 405 ``invalid`` (with
``Allow``), an unsupported media type 415 ``invalid``. :func:`exception_handler` is DRF's
``EXCEPTION_HANDLER``; :func:`not_found`, :func:`bad_request` and :func:`server_error` answer the
same shape for /api/ URLs that never reach a DRF view (Django's ``handler404`` / ``handler400`` /
``handler500``).
"""

from __future__ import annotations

import logging
import math

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from agentgit_site.middleware import API_PREFIX

from ..errors import ERRORS, ApiError, Forbidden, Invalid, NotFound, TooLarge, Unauthenticated, Unavailable, api_error

logger = logging.getLogger("repos.api")


def error_from_dict(doc: dict) -> ApiError:
    """The ApiError an error body (``{"code", "message", ...}``) describes; ``internal`` if unknown."""
    cls = ERRORS.get(str(doc.get("code")), ApiError)
    return cls(
        str(doc.get("message") or "the operation failed"),
        details=doc.get("details"),
        retry_after_ms=doc.get("retry_after_ms"),
        extra={key: value for key, value in doc.items() if key not in _COMMON_FIELDS},
    )


#: The fields every error object has (or may have); the rest are a code's own (``extra``).
_COMMON_FIELDS = {"code", "message", "retryable", "details", "retry_after_ms"}


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception a view raises becomes the one JSON error shape."""
    error, status = answer_for(exc)
    if error.code == "internal":
        view = context.get("view")
        logger.error("internal error in %s", type(view).__name__ if view else "API view", exc_info=exc)
    set_rollback()
    response = Response(error.as_dict(), status=status)
    for name, value in _headers(error, exc, context).items():
        response[name] = value
    return response


def answer_for(exc: BaseException) -> tuple[ApiError, int]:
    """The API error for any exception, and its HTTP status (every surface's translation: the
    REST handler's and the WebSocket consumer's)."""
    known = api_error(exc)  # ours, or the engine's (translated at the one boundary)
    if known is not None:
        return known, known.status
    if isinstance(exc, drf.APIException):
        return _from_drf(exc)
    if isinstance(exc, Http404):
        return NotFound(str(exc) or "not found"), 404
    if isinstance(exc, DjangoPermissionDenied):
        return Forbidden(str(exc) or "permission denied"), 403
    if isinstance(exc, RequestDataTooBig):
        return TooLarge("the request body is over the size limit"), 413
    if isinstance(exc, SuspiciousOperation):
        return Invalid(str(exc) or "malformed request"), 400
    if isinstance(exc, (OperationalError, InterfaceError)):
        # Locked or unreachable database: a retry may well succeed.
        return Unavailable(f"the database is not available: {exc}"), 503
    if _is_broker_error(exc):
        return Unavailable(f"the task broker is not available: {exc}"), 503
    if isinstance(exc, DatabaseError):
        return ApiError("a database error occurred"), 500
    return ApiError("an internal error occurred"), 500


def _from_drf(exc: drf.APIException) -> tuple[ApiError, int]:
    message = _drf_message(exc.detail)
    if isinstance(exc, drf.ValidationError):
        return Invalid("the request is invalid", details=_validation_details(exc.detail)), 400
    if isinstance(exc, drf.ParseError):
        return Invalid(message), 400
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        return Unauthenticated(message), 401
    if isinstance(exc, drf.PermissionDenied):
        return Forbidden(message), 403
    if isinstance(exc, drf.NotFound):
        return NotFound(message), 404
    if isinstance(exc, (drf.MethodNotAllowed, drf.UnsupportedMediaType, drf.NotAcceptable)):
        return Invalid(message), exc.status_code
    if exc.status_code == 413:
        return TooLarge(message), 413
    if 400 <= exc.status_code < 500:
        return Invalid(message), 400
    return ApiError(message), 500


def _drf_message(detail: object) -> str:
    if isinstance(detail, (list, tuple)) and detail:
        return _drf_message(detail[0])
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        return f"{key}: {_drf_message(value)}"
    return str(detail)


def _validation_details(detail: object, path: str = "") -> list[dict]:
    """A serializer's nested errors as a flat ``details`` list: ``{"field", "code", "message"}``."""
    if isinstance(detail, dict):
        found: list[dict] = []
        for key, value in detail.items():
            found += _validation_details(value, f"{path}.{key}" if path else str(key))
        return found
    if isinstance(detail, list):
        if all(isinstance(item, (drf.ErrorDetail, str)) for item in detail):
            return [{"field": path or None, "code": "invalid", "message": str(item)} for item in detail]
        found = []
        for index, item in enumerate(detail):
            found += _validation_details(item, f"{path}[{index}]")
        return found
    return [{"field": path or None, "code": "invalid", "message": str(detail)}]


def _is_broker_error(exc: Exception) -> bool:
    try:
        from kombu.exceptions import OperationalError as BrokerError
    except ImportError:  # pragma: no cover - celery (and so kombu) is a base requirement
        return False
    return isinstance(exc, BrokerError)


def _headers(error: ApiError, exc: Exception, context: dict) -> dict[str, str]:
    headers: dict[str, str] = {}
    if error.retry_after_ms is not None:
        headers["Retry-After"] = str(max(0, math.ceil(error.retry_after_ms / 1000)))
    if error.code == "unauthenticated":
        view, request = context.get("view"), context.get("request")
        challenge = view.get_authenticate_header(request) if view is not None and request is not None else None
        if challenge:
            headers["WWW-Authenticate"] = challenge
    return headers


# Django-level handlers: for URLs no DRF view answered (unknown /api/ paths, errors raised
# before or outside a view). Outside /api/ they defer to Django's own pages.


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _json(error: ApiError) -> JsonResponse:
    return JsonResponse(error.as_dict(), status=error.status)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return _json(NotFound(f"no API endpoint at {request.path}"))


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: malformed requests Django refuses itself (a body over the limit among them)."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return _json(TooLarge("the request body is over the size limit"))
    return _json(Invalid(str(exception) or "malformed request"))


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500."""
    if not _is_api(request):
        return defaults.server_error(request)
    return _json(ApiError("an internal error occurred"))
