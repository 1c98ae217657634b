"""OpenAPI: how the schema describes the token authentication (drf-spectacular extensions).

Imported by :mod:`.urls`, so the extensions are registered before any schema is generated.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
