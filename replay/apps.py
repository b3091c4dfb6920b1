from django.apps import AppConfig


class ReplayConfig(AppConfig):
    name = "replay"
    verbose_name = "Replay and ablation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core import registry
        from ingest.signals import snapshots_stored
        from replay import extensions, receivers
        from replay.services import triage

        registry.turn_page_extension_add(extensions.TURN_ACTIONS)
        registry.turn_page_extension_add(extensions.TURN_TRIAGE)
        registry.local_model_starter_set(extensions.local_model_start)
        # Auto-triage: alerts flag the turns they fire on; ingest says which turns failed validation.
        registry.turn_flagged_listener_add("replay.triage", receivers.on_turns_flagged)
        snapshots_stored.connect(receivers.on_snapshots_stored, dispatch_uid="replay.triage_validation")
        registry.alert_page_extension_add(extensions.ALERT_TRIAGE)
        registry.incident_page_extension_add(extensions.INCIDENT_TRIAGE)
        registry.settings_section_add(extensions.SETTINGS_TRIAGE)
        registry.settings_section_add(extensions.SETTINGS_ENDPOINTS)
        registry.alert_payload_extras_add("replay.triage", triage.alert_payload_triage)
        registry.incident_culprit_provider_set(extensions.incident_culprit)
        registry.expiring_table_add(registry.ExpiringTable(table="replay_triage", time_column="received_at"))
