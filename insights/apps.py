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

        from core import registry
        from ingest.signals import snapshots_stored
        from insights import cache_analysis, cache_extensions, counts, lint_analyzer, lint_pages, pipeline

        snapshots_stored.connect(pipeline.on_snapshots_stored, dispatch_uid="insights.analyze")
        if settings.CTXOBS_LINT:
            pipeline.analyzer_add("lint", lint_analyzer.lint_analyze)
        lint_pages.register()
        counts.register()
        # The prompt-cache lens.
        pipeline.analyzer_add("cache", cache_analysis.cache_analyze_batch)
        registry.expiring_table_add(
            registry.ExpiringTable(table="insights_turncache", time_column="received_at")
        )
        for table in ("insights_cacheday", "insights_cachebreakday"):
            registry.expiring_table_add(registry.ExpiringTable(table=table, time_column="day", days=True))
        registry.turn_page_extension_add(cache_extensions.TURN_CACHE)
        registry.timeline_overlays_add("insights.cache", cache_extensions.timeline_overlays)
        registry.overview_panel_add(cache_extensions.OVERVIEW_PANEL)
        registry.settings_section_add(cache_extensions.SETTINGS_SECTION)
