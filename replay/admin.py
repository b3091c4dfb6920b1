from django.contrib import admin

from replay.models import ModelEndpoint, ReplayJob, ReplayRun


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin[ModelEndpoint]):
    list_display = ("name", "project", "base_url", "model", "mode", "is_default", "last_test_ok")
    list_filter = ("mode", "is_default")
    # The encrypted key is never shown or edited here; use the endpoints page.
    exclude = ("api_key_encrypted",)
    readonly_fields = ("api_key_hint", "last_test_at", "last_test_ok", "last_test_detail")


@admin.register(ReplayJob)
class ReplayJobAdmin(admin.ModelAdmin[ReplayJob]):
    list_display = ("id", "project", "kind", "status", "n_runs", "n_done", "n_failed", "created_at")
    list_filter = ("kind", "status")


@admin.register(ReplayRun)
class ReplayRunAdmin(admin.ModelAdmin[ReplayRun]):
    list_display = ("id", "job", "variant", "sample", "status", "attempts", "latency_ms")
    list_filter = ("status",)
    exclude = ("embedding",)
