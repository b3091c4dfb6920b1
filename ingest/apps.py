from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"
    default_auto_field = "django.db.models.BigAutoField"
