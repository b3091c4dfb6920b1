"""Writes of project membership: add by username, change role, remove. A project always keeps
at least one admin, so nobody can lock a project out of its own settings."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction

from core.errors import ApplicationError
from core.models import Membership, Project

logger = logging.getLogger(__name__)


class MembershipError(ApplicationError):
    pass


def _admins_left(project: Project, *, excluding: Membership) -> int:
    # Row locks (FOR UPDATE cannot take an aggregate): two admins demoting each other at once
    # cannot both succeed.
    return len(
        Membership.objects.select_for_update()
        .filter(project=project, role=Membership.Role.ADMIN)
        .exclude(pk=excluding.pk)
        .values_list("pk", flat=True)
    )


def membership_add(*, project: Project, username: str, role: str) -> Membership:
    """Give USERNAME access to PROJECT with ROLE."""
    user = get_user_model().objects.filter(username=username.strip()).first()
    if user is None:
        raise MembershipError(f"no user named {username.strip()!r}")
    if role not in Membership.ROLE_RANK:
        raise MembershipError(f"unknown role {role!r}")
    m, created = Membership.objects.get_or_create(project=project, user=user, defaults={"role": role})
    if not created:
        raise MembershipError(f"{user.get_username()} is already a member ({m.role})")
    logger.info("ingest.member_added project_id=%s user_id=%s role=%s", project.pk, user.pk, role)
    return m


def membership_set_role(*, project: Project, membership_id: int, role: str) -> Membership:
    if role not in Membership.ROLE_RANK:
        raise MembershipError(f"unknown role {role!r}")
    with transaction.atomic():
        m = Membership.objects.select_for_update().filter(project=project, pk=membership_id).first()
        if m is None:
            raise MembershipError("no such member")
        if (
            m.role == Membership.Role.ADMIN
            and role != Membership.Role.ADMIN
            and not _admins_left(project, excluding=m)
        ):
            raise MembershipError("a project needs at least one admin")
        m.role = role
        m.save(update_fields=["role"])
    logger.info("ingest.member_role project_id=%s user_id=%s role=%s", project.pk, m.user_id, role)
    return m


def membership_remove(*, project: Project, membership_id: int) -> None:
    with transaction.atomic():
        m = Membership.objects.select_for_update().filter(project=project, pk=membership_id).first()
        if m is None:
            raise MembershipError("no such member")
        if m.role == Membership.Role.ADMIN and not _admins_left(project, excluding=m):
            raise MembershipError("a project needs at least one admin")
        m.delete()
    logger.info("ingest.member_removed project_id=%s user_id=%s", project.pk, m.user_id)
