"""`manage.py ctxobs_project create NAME [--replay] | keys NAME | newkey NAME [--replay] |
revoke PREFIX | adduser PROJECT USERNAME --role ROLE [--password-stdin]`."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from core import members
from core.errors import ApplicationError
from core.models import SCOPE_INGEST, SCOPE_REPLAY, IngestKey, Membership, Project
from core.services import ingest_key_create, ingest_key_revoke, project_create

REPLAY_HELP = (
    "the key may also start and cancel replays, which spend the model provider's budget "
    "(default: ingest-only, all an agent needs)"
)


def _scopes(opts: dict[str, Any]) -> tuple[str, ...]:
    return (SCOPE_INGEST, SCOPE_REPLAY) if opts.get("replay") else (SCOPE_INGEST,)


class Command(BaseCommand):
    help = "Manage projects, their keys (shown once, stored hashed) and their UI users."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        c = sub.add_parser("create", help="create a project and print its first key once")
        c.add_argument("name")
        c.add_argument("--replay", action="store_true", help=REPLAY_HELP)
        k = sub.add_parser("keys", help="list a project's keys by prefix, with their scopes")
        k.add_argument("name")
        n = sub.add_parser("newkey", help="add a key to a project and print it once")
        n.add_argument("name")
        n.add_argument("--label", default="")
        n.add_argument("--replay", action="store_true", help=REPLAY_HELP)
        r = sub.add_parser("revoke", help="revoke the key with this prefix")
        r.add_argument("prefix")
        u = sub.add_parser(
            "adduser",
            help="give a UI user access to a project, creating the user (password from a prompt or "
            "--password-stdin) when there is none by that name",
        )
        u.add_argument("project")
        u.add_argument("username")
        u.add_argument("--role", choices=list(Membership.ROLE_RANK), default=Membership.Role.VIEWER)
        u.add_argument(
            "--password-stdin", action="store_true", help="read a new user's password from standard input"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        action = opts["action"]
        if action == "create":
            if Project.objects.filter(name=opts["name"]).exists():
                raise CommandError(f"project {opts['name']!r} exists")
            project, raw = project_create(name=opts["name"], scopes=_scopes(opts))
            self.stdout.write(f"project {project.name} (id {project.pk}) created")
            self.stdout.write(f"{self._kind(opts)} key (shown once, store it now): {raw}")
        elif action == "newkey":
            project = self._project(opts["name"])
            key, raw = ingest_key_create(project=project, name=opts["label"], scopes=_scopes(opts))
            self.stdout.write(f"{self._kind(opts)} key {key.prefix}… (shown once, store it now): {raw}")
        elif action == "keys":
            project = self._project(opts["name"])
            for key in IngestKey.objects.filter(project=project).order_by("created_at"):
                state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
                used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
                scopes = ",".join(key.scopes)
                self.stdout.write(f"{key.prefix}…  {scopes:<14} {state:<24} {used:<28} {key.name}")
        elif action == "revoke":
            try:
                key = ingest_key_revoke(prefix=opts["prefix"])
            except IngestKey.DoesNotExist as exc:
                raise CommandError(str(exc)) from None
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"key {key.prefix}… of project {key.project.name} revoked")
        elif action == "adduser":
            self._adduser(opts)

    def _kind(self, opts: dict[str, Any]) -> str:
        return "ingest+replay" if opts.get("replay") else "ingest-only"

    def _adduser(self, opts: dict[str, Any]) -> None:
        project = self._project(opts["project"])
        username = opts["username"].strip()
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        created = user is None
        with transaction.atomic():
            if user is None:
                password = self._new_password(opts, username)
                user = user_model.objects.create_user(username, password=password)
            try:
                m = members.membership_add(project=project, username=username, role=opts["role"])
            except ApplicationError as exc:
                raise CommandError(exc.detail) from None
        what = "created and added" if created else "added (existing user, password unchanged)"
        self.stdout.write(f"user {user.get_username()} {what} to {project.name} as {m.role}")

    def _new_password(self, opts: dict[str, Any], username: str) -> str:
        if opts["password_stdin"]:
            password = sys.stdin.readline().rstrip("\r\n")
        elif sys.stdin.isatty():
            password = getpass.getpass(f"password for {username}: ")
            if getpass.getpass("again: ") != password:
                raise CommandError("the passwords differ")
        else:
            raise CommandError(
                f"there is no user {username!r}: give the new user's password with --password-stdin "
                "or run the command in a terminal to be asked for it"
            )
        if not password:
            raise CommandError("the password is empty")
        try:
            validate_password(password, user=get_user_model()(username=username))
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        return password

    def _project(self, name: str) -> Project:
        try:
            return Project.objects.get(name=name)
        except Project.DoesNotExist:
            raise CommandError(f"no project {name!r}") from None
