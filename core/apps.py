from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    label = "core"
    verbose_name = "Projects and access"
    default_auto_field = "django.db.models.BigAutoField"
