from django.apps import AppConfig


class ReplayConfig(AppConfig):
    name = "replay"
    verbose_name = "Replay and ablation"
    default_auto_field = "django.db.models.BigAutoField"
