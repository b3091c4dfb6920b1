from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "experiments"
    verbose_name = "Context experiments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from experiments import receivers
        from replay.signals import job_finished

        job_finished.connect(receivers.on_job_finished, dispatch_uid="experiments.job_finished")
