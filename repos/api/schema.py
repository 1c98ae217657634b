"""OpenAPI: what drf-spectacular cannot infer from the views and serializers.

The token schemes (extensions, registered on import: :mod:`.urls` imports this module before
any schema is generated), the patterns of the strings the server checks, and
:func:`postprocess`, the hook that finishes the generated document.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter

from ..services import checks, repositories, webhooks
from ..services.credentials import MAX_PATTERN_LENGTH


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "repos.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An AgentGit API token (agt_…)."}


class TokenBasicScheme(OpenApiAuthenticationExtension):
    target_class = "repos.api.authentication.TokenBasicAuthentication"
    name = "basicAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic", "description": "Any user name, the token as password (git clients)."}


# --- the schema's words for strings the server checks ---------------------------------------
# Each is exactly what the server accepts (the schemathesis run in tests/api/test_schema_fuzz.py
# holds the two together): a ``pattern``, and under ``not`` what no part of the string may match.
# Patterns are ECMA-262, as JSON Schema's are: ``$`` is the end of the text.

#: Text stored in the database: PostgreSQL refuses NUL in text.
TEXT: dict[str, Any] = {"type": "string", "pattern": r"^[^\x00]*$", "description": "Text without NUL."}

OBJECT_ID: dict[str, Any] = {
    "type": "string",
    "pattern": "^[0-9a-f]{40}$",
    "description": "A 40-hex git object id (lowercase).",
}

#: A repository path as the engine checks it (engine.objects.split_path): segments separated by
#: '/', none empty, '.', '..' or '.git' (any case), no NUL, no backslash.
REPOSITORY_PATH: dict[str, Any] = {
    "type": "string",
    "pattern": r"^[^/\\\x00]+(?:/[^/\\\x00]+)*$",
    "not": {"pattern": r"(?:^|/)(?:\.\.?|\.[gG][iI][tT])(?:/|$)"},
    "description": "Segments separated by '/': none empty, '.', '..' or '.git'; no NUL, no backslash.",
}

#: A path as reads name it: a path git stores may hold bytes that are not UTF-8 or a backslash,
#: and reads name it in its escaped form (engine.objects.path_from_bytes): ``\\xNN`` for each
#: byte that is not part of valid UTF-8, ``\\\\`` for a backslash.
READ_PATH: dict[str, Any] = {
    "type": "string",
    "pattern": r"^(?:[^/\\\x00]|\\\\|\\x[89a-f][0-9a-f])+(?:/(?:[^/\\\x00]|\\\\|\\x[89a-f][0-9a-f])+)*$",
    "not": {"pattern": r"(?:^|/)(?:\.\.?|\.[gG][iI][tT])(?:/|$)"},
    "description": "Segments separated by '/': none empty, '.', '..' or '.git'; no NUL. A name git stores "
    "with bytes that are not UTF-8 is in its escaped form: each such byte as \\xNN (two lowercase hex "
    "digits) and a backslash as \\\\, as tree, diff, log and blame answers name it. An escape of bytes that "
    "are valid UTF-8 (\\xc3\\xa9 for é) is refused, naming the form to use.",
}

REPOSITORY_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": repositories.REPOSITORY_NAME_PATTERN,
    "not": {"pattern": repositories.REPOSITORY_NAME_FORBIDDEN},
    "description": "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit; no '..', "
    "not ending in '.git'.",
}

STREAM_NAME: dict[str, Any] = {
    "type": "string",
    "maxLength": repositories.STREAM_NAME_MAX_LENGTH,
    "pattern": repositories.STREAM_NAME_PATTERN,
    "not": {"pattern": repositories.STREAM_NAME_FORBIDDEN},
    "description": "Segments of letters, digits, '.', '_' or '-' separated by '/', each starting with a "
    "letter, digit or '_'; no '..', no segment ending in '.lock'; at most 200 characters.",
}

REVISION: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "description": "A changeset id (40 hex) or a stream name (its head).",
}

CHECK_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": checks.NAME_PATTERN,
    "description": "1-100 letters, digits, '.', '_', '/' or '-', starting with a letter or digit (ci/test).",
}

#: Where a check's details are, or a webhook's destination: http or https only.
HTTP_URL: dict[str, Any] = {
    "type": "string",
    "maxLength": webhooks.URL_MAX_LENGTH,
    "pattern": webhooks.URL_PATTERN,
    "description": f"An http:// or https:// URL, at most {webhooks.URL_MAX_LENGTH} characters.",
}

#: A user name as Django's validator takes it, in ASCII.
USER_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9_.@+-]{1,150}$",
    "description": "1-150 letters, digits, '_', '.', '@', '+' or '-'.",
}

#: A stream or path pattern of a credential as engine.policy takes it (a path pattern must also
#: be gitignore's: a comment, say, is refused with 400).
REACH_PATTERN: dict[str, Any] = {
    "type": "string",
    "pattern": rf"^[^\x00\n]{{1,{MAX_PATTERN_LENGTH}}}$",
    "description": f"A pattern of 1-{MAX_PATTERN_LENGTH} characters, without NUL or a line break.",
}

#: Standard base64 (RFC 4648, with padding), as Python's ``b64decode(validate=True)`` takes it.
BASE64: dict[str, Any] = {
    "type": "string",
    "pattern": r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
    "description": "Bytes as standard base64, padded.",
}


# --- parameters several operations share ---------------------------------------------------

REV = OpenApiParameter("rev", REVISION, location=OpenApiParameter.PATH, description=REVISION["description"])
FILE_PATH = OpenApiParameter(
    "path", READ_PATH, location=OpenApiParameter.PATH, description="The file's path in the repository."
)


def id_parameter(name: str) -> OpenApiParameter:
    """A numeric id in the URL (a proposal's, an operation's); anything else is not found (404)."""
    return OpenApiParameter(name, {"type": "integer", "minimum": 1}, location=OpenApiParameter.PATH)


BLOB_ID = OpenApiParameter("blob_id", OBJECT_ID, location=OpenApiParameter.PATH, description="The blob's id.")


# --- the finished document ------------------------------------------------------------------

#: OpenAPI links: what an answer's ids let a client (or the schemathesis run's stateful phase)
#: call next. Each target's 404 can only mean that the linked resource is gone, so a 404 there
#: is a real fault (schemathesis checks that a resource just created is found). Source
#: operation, its statuses, target operation, target parameters as runtime expressions (``repo``
#: is the source's own unless given).
LINKS = [
    ("repos_create", ("201",), "repos_retrieve", {"repo": "$response.body#/name"}),
    ("repos_create", ("201",), "repos_streams_list", {"repo": "$response.body#/name"}),
    ("repos_create", ("201",), "repos_blobs_create", {"repo": "$response.body#/name"}),
    ("repos_streams_create", ("201",), "repos_streams_retrieve", {"stream": "$response.body#/name"}),
    ("repos_blobs_create", ("201",), "repos_blobs_retrieve", {"blob_id": "$response.body#/id"}),
    ("repos_changesets_create", ("201",), "repos_changesets_retrieve", {"changeset_id": "$response.body#/id"}),
    ("repos_proposals_create", ("201",), "repos_proposals_retrieve", {"proposal_id": "$response.body#/id"}),
    ("repos_proposals_create", ("201",), "repos_proposals_integrate_create", {"proposal_id": "$response.body#/id"}),
    (
        "repos_proposals_integrate_create",
        ("200", "202"),
        "repos_operations_retrieve",
        {"operation_id": "$response.body#/operation"},
    ),
]


_BLANK = {"type": "string", "maxLength": 0}


def _blank_any_of(node: object) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("oneOf"), list) and _BLANK in node["oneOf"]:
            node["anyOf"] = node.pop("oneOf")
        for value in node.values():
            _blank_any_of(value)
    elif isinstance(node, list):
        for value in node:
            _blank_any_of(value)


def postprocess(result: dict, generator, request, public) -> dict:
    """drf-spectacular's last step (``POSTPROCESSING_HOOKS``): what the views cannot declare.

    Every optional query parameter says ``allowEmptyValue``: the server takes ``?name=`` as if
    the parameter was not sent (repos/api/base.py). Responses get their :data:`LINKS`. And a
    blank-or-patterned string is ``anyOf`` rather than drf-spectacular's ``oneOf``: an empty
    string that the pattern admits too matches both, which ``oneOf`` would refuse.
    """
    _blank_any_of(result)
    operations = {}
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            operations[operation["operationId"]] = operation
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and not parameter.get("required"):
                    parameter["allowEmptyValue"] = True
    for source, statuses, target, parameters in LINKS:
        if source not in operations or target not in operations:
            continue  # an operation left out of this document (public=False views)
        for status in statuses:
            link = {"operationId": target, "parameters": {"repo": "$request.path.repo", **parameters}}
            operations[source]["responses"][status].setdefault("links", {})[target] = link
    return result
