"""`manage.py ctxobs_project create NAME | keys NAME | revoke PREFIX | newkey NAME`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.models import IngestKey, Project
from ingest.services import ingest_key_create, ingest_key_revoke, project_create


class Command(BaseCommand):
    help = "Manage projects and their ingest keys (keys are shown once, stored hashed)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        c = sub.add_parser("create", help="create a project and print its first ingest key once")
        c.add_argument("name")
        k = sub.add_parser("keys", help="list a project's keys by prefix")
        k.add_argument("name")
        n = sub.add_parser("newkey", help="add an ingest key to a project and print it once")
        n.add_argument("name")
        n.add_argument("--label", default="")
        r = sub.add_parser("revoke", help="revoke the key with this prefix")
        r.add_argument("prefix")

    def handle(self, *args: Any, **opts: Any) -> None:
        action = opts["action"]
        if action == "create":
            if Project.objects.filter(name=opts["name"]).exists():
                raise CommandError(f"project {opts['name']!r} exists")
            project, raw = project_create(name=opts["name"])
            self.stdout.write(f"project {project.name} (id {project.pk}) created")
            self.stdout.write(f"ingest key (shown once, store it now): {raw}")
        elif action == "newkey":
            project = self._project(opts["name"])
            key, raw = ingest_key_create(project=project, name=opts["label"])
            self.stdout.write(f"ingest key {key.prefix}… (shown once, store it now): {raw}")
        elif action == "keys":
            project = self._project(opts["name"])
            for key in IngestKey.objects.filter(project=project).order_by("created_at"):
                state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
                used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
                self.stdout.write(f"{key.prefix}…  {state:<24} {used:<28} {key.name}")
        elif action == "revoke":
            try:
                key = ingest_key_revoke(prefix=opts["prefix"])
            except IngestKey.DoesNotExist as exc:
                raise CommandError(str(exc)) from None
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"key {key.prefix}… of project {key.project.name} revoked")

    def _project(self, name: str) -> Project:
        try:
            return Project.objects.get(name=name)
        except Project.DoesNotExist:
            raise CommandError(f"no project {name!r}") from None
