"""Template helpers of the web UI: times as people read them, short ids, sizes."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html
from django.utils.timesince import timesince

register = template.Library()


def _moment(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return None


@register.simple_tag
def when(value) -> str:
    """``<time>`` with the relative time ("3 hours ago") and the exact one on hover."""
    moment = _moment(value)
    if moment is None:
        return ""
    exact = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ago = timesince(moment, depth=1)
    text = "just now" if ago.startswith("0\xa0minutes") else f"{ago} ago"
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), exact, text)


@register.filter
def short(oid) -> str:
    """A changeset or blob id's first 12 characters."""
    return str(oid or "")[:12]


@register.filter
def first_line(text) -> str:
    stripped = str(text or "").strip()
    return stripped.splitlines()[0] if stripped else ""
