import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("replay", "0005_attribution"),
        ("core", "0002_project_settings"),
    ]

    operations = [
        migrations.CreateModel(
            name="Triage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("snapshot_ref", models.BigIntegerField()),
                ("snapshot_uuid", models.UUIDField()),
                ("session_id", models.CharField(max_length=256)),
                ("turn", models.IntegerField()),
                ("received_at", models.DateTimeField()),
                (
                    "trigger",
                    models.CharField(
                        choices=[("alert", "an alert fired"), ("validation", "validation failed")], max_length=16
                    ),
                ),
                (
                    "alert_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), blank=True, default=list, size=None
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "queued"),
                            ("running", "running"),
                            ("done", "done"),
                            ("failed", "failed"),
                            ("skipped", "skipped"),
                            ("cancelled", "cancelled"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),
                ("reason", models.CharField(blank=True, default="", max_length=500)),
                ("job_kind", models.CharField(blank=True, default="", max_length=16)),
                ("calls_reserved", models.IntegerField(default=0)),
                ("result", models.JSONField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="replay.replayjob",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="triages", to="core.project"
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["project", "-created_at"], name="replay_triage_recent_idx")],
                "constraints": [models.UniqueConstraint(fields=("project", "snapshot_ref"), name="uniq_triage_turn")],
            },
        ),
        migrations.CreateModel(
            name="TriageBudget",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("calls", models.IntegerField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.project"
                    ),
                ),
            ],
            options={
                "ordering": ["project", "-day"],
                "constraints": [models.UniqueConstraint(fields=("project", "day"), name="uniq_triage_budget_day")],
            },
        ),
    ]
