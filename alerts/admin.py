from django.contrib import admin

from alerts.models import Alert, AlertRule, Channel, Delivery, Incident, IncidentPolicy


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin[AlertRule]):
    list_display = ("id", "project", "name", "kind", "severity", "enabled", "agent", "model")
    list_filter = ("kind", "severity", "enabled")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin[Alert]):
    list_display = ("id", "project", "rule", "severity", "title", "session_id", "turn", "state", "created_at")
    list_filter = ("state", "severity", "rule_kind")
    raw_id_fields = ("rule", "incident", "acknowledged_by", "resolved_by")


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin[Incident]):
    list_display = ("id", "project", "agent", "cause", "severity", "status", "alert_count", "session_count",
                    "last_seen")
    list_filter = ("status", "severity")
    raw_id_fields = ("acknowledged_by", "resolved_by")


@admin.register(IncidentPolicy)
class IncidentPolicyAdmin(admin.ModelAdmin[IncidentPolicy]):
    list_display = ("project", "session_window_turns", "session_window_seconds", "group_window_seconds",
                    "quiet_seconds", "reopen_window_seconds")


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin[Channel]):
    list_display = ("id", "project", "name", "kind", "enabled", "min_severity")
    exclude = ("secret_encrypted",)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin[Delivery]):
    list_display = (
        "id",
        "channel",
        "alert",
        "incident",
        "event",
        "is_test",
        "status",
        "attempts",
        "last_status_code",
        "created_at",
    )
    list_filter = ("status", "is_test")
    raw_id_fields = ("alert", "incident", "folded_into")
