from __future__ import annotations

from typing import Any

from django.apps import AppConfig


def _has_sessions(project: Any) -> bool:
    from ingest.models import AgentSession

    return AgentSession.objects.filter(project=project).exists()


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core import registry

        registry.project_data_check_add("ingest.sessions", _has_sessions)
