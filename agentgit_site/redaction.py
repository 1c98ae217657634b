"""Secrets out of logs: :func:`redact` and the logging filter :class:`RedactSecrets`.

Every handler of settings ``LOGGING`` carries the filter, so no record leaves the process with
a secret in it, whoever logged it: an AgentGit token (``agt_…``) anywhere, a ``token=`` (or
``password=``…) value in a query string, the credentials of an Authorization header (Bearer
and Basic), the password in a URL's user info. uvicorn, for one, prints a WebSocket's path with
its query string, where browsers put the token. Imports nothing of Django: logging is configured
before the apps are loaded.
"""

from __future__ import annotations

import logging
import re

_REDACTED = "[redacted]"
_SECRETS = (
    # An AgentGit token anywhere (plain or with its underscore percent-encoded).
    (re.compile(r"agt(?:_|%5[Ff])[A-Za-z0-9_%-]*"), _REDACTED),
    # A secret in a query string or a form: token=…, password=…
    # (No \b before the names: it makes every pattern several times slower, and redacting
    # "mytoken=" as well costs nothing.)
    (re.compile(r"(?i)(token|passw(?:or)?d|secret|api_key)=[^&\s\"']*"), rf"\1={_REDACTED}"),
    # The credentials of an Authorization header value (Bearer token, Basic user:password).
    # (16 characters at least: "basic settings" in a sentence is not a credential.)
    (re.compile(r"(?i)(bearer|basic)\s+[A-Za-z0-9._~+/=-]{16,}"), rf"\1 {_REDACTED}"),
    # The password of a URL's user info: scheme://user:password@host
    (re.compile(r"(://[^/\s:@]*):[^/\s@]+@"), rf"\1:{_REDACTED}@"),
)


#: A text containing none of these has nothing to redact (most log lines: checked at C speed
#: before any pattern runs).
_TRIGGERS = ("agt", "=", "earer", "EARER", "asic", "ASIC", "://")


def redact(text: str) -> str:
    """``text`` with every secret it contains replaced by ``[redacted]``."""
    if not any(trigger in text for trigger in _TRIGGERS):
        return text
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactSecrets(logging.Filter):
    """Logging filter: redacts the record's message and its traceback (see :func:`redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
