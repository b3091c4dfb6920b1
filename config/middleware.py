"""Pages are private by default."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import LoginRequiredMiddleware as _LoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect

# The API answers 401 itself (ingest keys or a session) and the admin has its own login page.
SELF_AUTHENTICATING_NAMESPACES = frozenset({"api", "admin"})


class LoginRequiredMiddleware(_LoginRequiredMiddleware):
    """An anonymous request for any page is sent to the login page with `?next=`, so that a page
    added later cannot be public by omission; views open to everyone say so with
    `django.contrib.auth.decorators.login_not_required` (login, health check, static assets)."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        match = request.resolver_match
        if match is not None and SELF_AUTHENTICATING_NAMESPACES.intersection(match.namespaces[:1]):
            return None
        htmx = getattr(request, "htmx", None)
        if htmx and not request.user.is_authenticated and getattr(view_func, "login_required", True):
            # A partial update whose session expired: htmx would swap the login form into the
            # fragment; send the whole tab to log in, and back to the page it was showing.
            back = htmx.current_url_abs_path or request.get_full_path()
            login = redirect_to_login(back, resolve_url(self.get_login_url(view_func)))
            return HttpResponseClientRedirect(login["Location"])
        response: HttpResponseBase | None = super().process_view(request, view_func, view_args, view_kwargs)
        return response
