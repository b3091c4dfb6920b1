from django.apps import AppConfig


class ReplayConfig(AppConfig):
    name = "replay"
    verbose_name = "Replay and ablation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core import registry
        from replay import extensions

        registry.turn_page_extension_add(extensions.TURN_ACTIONS)
        registry.local_model_starter_set(extensions.local_model_start)
