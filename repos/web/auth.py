"""Logging people in and out with a Django session; login attempts are rate limited.

Only the session counts: an ``Authorization`` header (an agent's token) logs nobody into the web
UI. Attempts are counted per client address and per user name (django-ratelimit, rates
``AGENTGIT["LOGIN_RATE_ADDRESS"]`` and ``["LOGIN_RATE_USER"]``); over either, the form answers
429 without checking the password, so guessing one account's password from many addresses and
many accounts' from one address are both slowed down.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login as start_session
from django.contrib.auth import logout as end_session
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods, require_POST
from django_ratelimit.core import is_ratelimited

TOO_MANY = "Too many login attempts. Wait a minute and try again."


def _user_name_key(group: str, request: HttpRequest) -> str:
    return request.POST.get("username", "").strip().lower()


def _limited(request: HttpRequest) -> bool:
    """Count this attempt against the address and the user name; whether either is over its rate."""
    rates = settings.AGENTGIT
    by_address = is_ratelimited(
        request, group="web-login-address", key="ip", rate=rates["LOGIN_RATE_ADDRESS"], method="POST", increment=True
    )
    by_user = is_ratelimited(
        request,
        group="web-login-user",
        key=_user_name_key,
        rate=rates["LOGIN_RATE_USER"],
        method="POST",
        increment=True,
    )
    return by_address or by_user


def _next_page(request: HttpRequest) -> str:
    """Where to go after logging in: ``next`` if it is a page of this site, else ''."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return ""


@never_cache
@csrf_protect
@require_http_methods(["GET", "HEAD", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    """The login form; a valid user name and password start a session."""
    if request.method == "POST":
        if _limited(request):
            form = AuthenticationForm(request)
            return render(
                request, "web/login.html", {"form": form, "error": TOO_MANY, "next": _next_page(request)}, status=429
            )
        form = AuthenticationForm(request, data=request.POST)
        if form.is_valid():
            start_session(request, form.get_user())
            return redirect(_next_page(request) or settings.LOGIN_REDIRECT_URL)
    else:
        form = AuthenticationForm(request)
    return render(request, "web/login.html", {"form": form, "next": _next_page(request)})


@require_POST
@csrf_protect
def logout(request: HttpRequest) -> HttpResponse:
    end_session(request)
    return redirect(settings.LOGIN_URL)
