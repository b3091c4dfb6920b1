from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "experiments"
    verbose_name = "Context experiments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.urls import reverse

        from core import registry
        from experiments import demo, receivers
        from replay.signals import job_finished

        # An experiment is evaluated once its replay job has ended.
        job_finished.connect(receivers.on_job_finished, dispatch_uid="experiments.job_finished")
        # Where sets get their items from: turns selected on a timeline, one turn's page, an alert.
        registry.turn_selection_action_add(
            registry.TurnSelectionAction(
                name="experiments.add_to_set",
                label="Add the selected turns to the evaluation set",
                url=lambda project_id: reverse("experiments:set_create", kwargs={"project_id": project_id}),
                input_label="set (new or existing)",
            )
        )
        registry.turn_page_extension_add(
            registry.TurnPageExtension(name="experiments.add_turn", template="experiments/_turn_add.html")
        )
        registry.demo_step_add("experiments.demo", demo.demo_experiments)
        registry.alert_page_extension_add(
            registry.AlertPageExtension(name="experiments.add_alert", template="experiments/_alert_add.html")
        )
