from __future__ import annotations

from django.apps import AppConfig


class InsightsConfig(AppConfig):
    """What ctxobs derives from stored turns after they commit: the prompt-cache lens, the
    contamination lint and the token-count calibration. Reads ingest through its facade."""

    name = "insights"
    verbose_name = "Insights"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from ingest.signals import snapshots_stored
        from insights import counts, lint_analyzer, lint_pages, pipeline

        snapshots_stored.connect(pipeline.on_snapshots_stored, dispatch_uid="insights.analyze")
        if settings.CTXOBS_LINT:
            pipeline.analyzer_add("lint", lint_analyzer.lint_analyze)
        lint_pages.register()
        counts.register()
