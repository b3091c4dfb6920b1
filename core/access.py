"""Project access for pages: members only, by role (viewer < editor < admin)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest

from core.models import Membership, Project


def user_projects(user: object) -> list[Membership]:
    """The memberships of USER, with their projects, ordered by project name."""
    if not getattr(user, "is_authenticated", False):
        return []
    user_id: int = getattr(user, "pk", 0)
    memberships = Membership.objects.select_related("project").filter(user_id=user_id)
    return list(memberships.order_by("project__name"))


def is_htmx(request: HttpRequest) -> bool:
    """Whether django-htmx's middleware marked REQUEST as an htmx request (a partial is wanted)."""
    return bool(getattr(request, "htmx", False))


def project_access(request: HttpRequest, project_id: int, role: str = "viewer") -> tuple[Project, Membership]:
    """The project and the caller's membership; 404 for non-members (no existence leak),
    403 when the member's role is below ROLE."""
    m = (
        Membership.objects.select_related("project")
        .filter(user_id=request.user.pk or 0, project_id=project_id)  # anonymous: no member 0
        .first()
    )
    if m is None:
        raise Http404("no such project")
    if not m.at_least(role):
        raise PermissionDenied(f"this needs the {role} role")
    return m.project, m


def page_context(
    request: HttpRequest, project: Project, membership: Membership, **extra: Any
) -> dict[str, Any]:
    """The context the shared layout expects on every project page: the project, the caller's
    role, the project switcher and which optional apps are installed."""
    return {
        "project": project,
        "membership": membership,
        "memberships": user_projects(request.user),
        "is_admin": membership.at_least("admin"),
        "is_editor": membership.at_least("editor"),
        "replay_enabled": "replay" in settings.INSTALLED_APPS,
        "alerts_enabled": "alerts" in settings.INSTALLED_APPS,
        "experiments_enabled": "experiments" in settings.INSTALLED_APPS,
        **extra,
    }
