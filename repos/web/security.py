"""Security headers on every response: a Content-Security-Policy that allows no inline script
or style and nothing from another origin, and no-sniff and referrer rules (set by Django's
SecurityMiddleware: SECURE_CONTENT_TYPE_NOSNIFF and SECURE_REFERRER_POLICY).

Django 5.2 has no CSP of its own (6.0 adds one); this middleware is the one place it is set.
"""

from __future__ import annotations

#: Scripts, styles, images and fonts come from this origin only (static files); no inline code,
#: no plugins, no framing, forms post back here only. ``data:`` images: none of ours use them,
#: but browsers render an SVG's embedded images that way.
POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)


class SecurityHeadersMiddleware:
    """Adds ``Content-Security-Policy`` (unless a view set its own) to every response."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # A view may set a stricter one (raw files: a sandbox).
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
