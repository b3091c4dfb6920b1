from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from alerts import receivers, selectors
        from alerts.services import cache_rules, delivery
        from core import registry
        from core.models import Project
        from ingest.signals import snapshots_stored
        from insights.cache_analysis import cache_analyzed
        from insights.counts import counts_analyzed
        from insights.lint_signals import findings_stored

        snapshots_stored.connect(receivers.on_snapshots_stored, dispatch_uid="alerts.evaluate")
        findings_stored.connect(receivers.on_lint_findings_stored, dispatch_uid="alerts.lint_findings")
        counts_analyzed.connect(receivers.on_counts_analyzed, dispatch_uid="alerts.counts_analyzed")
        registry.session_markers_add("alerts", selectors.session_alert_markers)
        registry.alert_follow_up_set(delivery.follow_ups_queue)
        cache_analyzed.connect(cache_rules.on_cache_analyzed, dispatch_uid="alerts.cache_rules")
        post_save.connect(receivers.on_project_saved, sender=Project, dispatch_uid="alerts.default_rules")
