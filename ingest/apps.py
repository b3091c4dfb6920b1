from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _has_sessions(project: Any) -> bool:
    from ingest.models import AgentSession

    return AgentSession.objects.filter(project=project).exists()


def _partitions_after_migrate(sender: AppConfig, using: str = "default", plan: Any = None, **_: Any) -> None:
    """A fresh or upgraded install has its coming days' partitions before any worker runs."""
    from django.db import connections

    from ingest import partitions

    if sender.name == "ingest" and "ingest_snapshot" in connections[using].introspection.table_names():
        with connections[using].cursor() as cur:
            cur.execute("SELECT relkind FROM pg_class WHERE oid = 'ingest_snapshot'::regclass")
            row = cur.fetchone()
        if row and row[0] == "p":  # partitioned (not when migrated back before 0008)
            partitions.partitions_ensure(using=using)


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core import registry

        registry.project_data_check_add("ingest.sessions", _has_sessions)
        post_migrate.connect(_partitions_after_migrate, sender=self)
