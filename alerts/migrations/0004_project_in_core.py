# Project moved from ingest to core with its table (core 0001): only Django's state changes.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0003_delivery_lease_pending_evaluation"),
        ("core", "0001_initial"),
    ]
    run_before = [("ingest", "0007_tenancy_moves_to_core")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model, name="project",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                            related_name=related_name, to="core.project"),
                )
                for model, related_name in (
                    ("alertrule", "alert_rules"), ("alert", "alerts"), ("channel", "alert_channels"),
                    ("delivery", "+"), ("pendingevaluation", "+"),
                )
            ],
        ),
    ]
