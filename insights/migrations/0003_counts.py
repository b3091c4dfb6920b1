import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("insights", "0002_lint"),
        ("core", "0002_project_settings"),
    ]

    operations = [
        migrations.CreateModel(
            name="TurnCount",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("project", models.ForeignKey(
                    db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE,
                    related_name="+", to="core.project")),
                ("snapshot_ref", models.BigIntegerField()),
                ("received_at", models.DateTimeField()),
                ("model_name", models.CharField(max_length=256)),
                ("counted", models.IntegerField()),
                ("native", models.IntegerField(blank=True, null=True)),
                ("tokenizer", models.CharField(blank=True, default="", max_length=300)),
                ("reported", models.IntegerField()),
                ("ratio", models.FloatField()),
                ("usual_ratio", models.FloatField(blank=True, null=True)),
                ("usual_n", models.IntegerField(default=0)),
                ("drift", models.FloatField()),
                ("flagged", models.BooleanField(default=False)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("project", "snapshot_ref"), name="insights_turncount_uniq"),
                ],
                "indexes": [
                    models.Index(fields=["project", "model_name", "received_at"], name="insights_turncount_model_idx"),
                    models.Index(fields=["project", "received_at"], name="insights_turncount_time_idx"),
                ],
            },
        ),
        migrations.CreateModel(
            name="ModelCountRatio",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("project", models.ForeignKey(
                    db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE,
                    related_name="+", to="core.project")),
                ("model_name", models.CharField(max_length=256)),
                ("ratio", models.FloatField()),
                ("n", models.IntegerField()),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("project", "model_name"), name="insights_modelratio_uniq"),
                ],
            },
        ),
    ]
