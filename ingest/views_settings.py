"""Project settings pages (admin): ingest keys, members and their roles, the project's
network policy for model endpoints and webhooks, its context-window overrides and how long its
turns are kept; other apps add sections of their own (core.registry.settings_sections).

Each view resolves its project with core.access.project_access and requires the admin role.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import members, registry
from core.access import project_access
from core.errors import ApplicationError
from core.models import RETENTION_DAYS_MAX, SCOPE_INGEST, SCOPE_REPLAY, IngestKey, Membership, Project
from core.services import (
    ingest_key_create,
    ingest_key_revoke,
    project_allow_private_set,
    project_model_windows_set,
)
from ingest.forms import (
    KeyCreateForm,
    MemberAddForm,
    MemberRoleForm,
    ModelWindowsForm,
    NetworkForm,
    RetentionForm,
)
from ingest.services import project_retention_set
from ingest.views import _page


def _settings_ctx(
    request: HttpRequest, project: Project, membership: Membership, **extra: Any
) -> dict[str, Any]:
    keys = list(IngestKey.objects.filter(project=project).order_by("revoked_at", "-created_at"))
    mships = list(
        Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )
    extra.setdefault("windows_form", ModelWindowsForm.for_project(project))
    # Sections other apps add to this page (prices), each with its own context.
    sections = registry.settings_sections()
    section_context: dict[str, Any] = {}
    for section in sections:
        if section.context is not None:
            section_context.update(section.context(request=request, project=project, membership=membership))
    return _page(
        request,
        project,
        membership,
        settings_sections=[s.template for s in sections],
        keys=keys,
        members=mships,
        key_form=KeyCreateForm(),
        network_form=NetworkForm(initial={"allow_private": project.allow_private_endpoints}),
        member_form=MemberAddForm(),
        roles=Membership.Role.choices,
        **{
            "retention_form": RetentionForm(initial={"retention_days": project.retention_days}),
            "retention_max": RETENTION_DAYS_MAX,
            **section_context,
            **extra,
        },
    )


@login_required
def project_settings(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    return render(request, "ingest/settings.html", _settings_ctx(request, project, membership))


@login_required
@require_POST
def key_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    form = KeyCreateForm(request.POST)
    if not form.is_valid():
        return render(
            request, "ingest/settings.html", _settings_ctx(request, project, membership), status=400
        )
    scopes = (SCOPE_INGEST, SCOPE_REPLAY) if form.cleaned_data["replay"] else (SCOPE_INGEST,)
    key, raw = ingest_key_create(project=project, name=form.cleaned_data["name"], scopes=scopes)
    # The raw key is shown in this one response and never again; keep it out of every cache.
    resp = render(
        request,
        "ingest/settings.html",
        _settings_ctx(request, project, membership, new_key=key, new_raw_key=raw),
    )
    resp["Cache-Control"] = "no-store"
    return resp


@login_required
@require_POST
def project_network(request: HttpRequest, project_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    form = NetworkForm(request.POST)
    allow = form.is_valid() and form.cleaned_data["allow_private"]
    project_allow_private_set(project=project, allow=allow)
    messages.success(
        request,
        "Loopback and private addresses are now allowed for model endpoints and webhooks."
        if allow
        else "Model endpoints and webhooks are limited to public addresses.",
    )
    return redirect("ingest:settings", project_id=project.pk)


@login_required
@require_POST
def project_model_windows(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    form = ModelWindowsForm(request.POST)
    if not form.is_valid():
        ctx = _settings_ctx(request, project, membership, windows_form=form)
        return render(request, "ingest/settings.html", ctx, status=400)
    windows = form.cleaned_data["windows"]
    project_model_windows_set(project=project, windows=windows)
    messages.success(
        request,
        f"Context windows set for {len(windows)} model{'' if len(windows) == 1 else 's'}."
        if windows
        else "No context-window overrides: the model registry decides.",
    )
    return redirect(reverse("ingest:settings", args=[project.pk]) + "#model-windows")


@login_required
@require_POST
def key_revoke(request: HttpRequest, project_id: int, key_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    key = IngestKey.objects.filter(project=project, pk=key_id, revoked_at__isnull=True).first()
    if key is None:
        raise Http404("no such active key")
    ingest_key_revoke(prefix=key.prefix, project=project)
    messages.success(request, f"Key {key.prefix}… revoked.")
    return redirect("ingest:settings", project_id=project.pk)


@login_required
@require_POST
def member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            m = members.membership_add(
                project=project, username=form.cleaned_data["username"], role=form.cleaned_data["role"]
            )
            messages.success(request, f"{m.user.get_username()} added as {m.role}.")
        except ApplicationError as e:
            messages.error(request, e.detail)
    else:
        messages.error(request, "Give a username and a role.")
    return redirect("ingest:settings", project_id=project.pk)


@login_required
@require_POST
def member_role(request: HttpRequest, project_id: int, membership_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    form = MemberRoleForm(request.POST)
    if form.is_valid():
        try:
            m = members.membership_set_role(
                project=project, membership_id=membership_id, role=form.cleaned_data["role"]
            )
            messages.success(request, f"{m.user.get_username()} is now {m.role}.")
        except ApplicationError as e:
            messages.error(request, e.detail)
    else:
        messages.error(request, "Unknown role.")
    return redirect("ingest:settings", project_id=project.pk)


@login_required
@require_POST
def member_remove(request: HttpRequest, project_id: int, membership_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    try:
        members.membership_remove(project=project, membership_id=membership_id)
        messages.success(request, "Member removed.")
    except ApplicationError as e:
        messages.error(request, e.detail)
    return redirect("ingest:settings", project_id=project.pk)


# --- retention ----------------------------------------------------------------
@login_required
@require_POST
def project_retention(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    form = RetentionForm(request.POST)
    if not form.is_valid():
        return render(request, "ingest/settings.html",
                      _settings_ctx(request, project, membership, retention_form=form), status=400)
    days = form.cleaned_data["retention_days"]
    project_retention_set(project=project, days=days)
    messages.success(request, f"Turns are now kept for {days} days after they arrive.")
    return redirect("ingest:settings", project_id=project.pk)
