"""Template helpers of the web UI: times as people read them, short ids, sizes."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html

register = template.Library()


def _moment(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return None


#: Relative times in the largest unit that fits (a blame page writes hundreds: no gettext here).
_UNITS = (
    (365 * 86400, "year"),
    (30 * 86400, "month"),
    (7 * 86400, "week"),
    (86400, "day"),
    (3600, "hour"),
    (60, "minute"),
)


def relative(seconds: float) -> str:
    """``3 hours ago`` for 3 hours and some minutes; ``just now`` under a minute (or in the future)."""
    for size, unit in _UNITS:
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count > 1 else ''} ago"
    return "just now"


@register.simple_tag
def when(value) -> str:
    """``<time>`` with the relative time ("3 hours ago") and the exact one on hover."""
    moment = _moment(value)
    if moment is None:
        return ""
    moment = moment.astimezone(UTC)
    exact = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = relative((datetime.now(UTC) - moment).total_seconds())
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), exact, text)


@register.filter
def short(oid) -> str:
    """A changeset or blob id's first 12 characters."""
    return str(oid or "")[:12]


@register.filter
def first_line(text) -> str:
    stripped = str(text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


@register.filter
def http_url(url) -> str:
    """The URL if it is http or https, else empty: a page links to nothing else (a check's
    link is checked when it is reported; this holds even for rows written some other way)."""
    text = str(url or "")
    return text if text.lower().startswith(("http://", "https://")) else ""
