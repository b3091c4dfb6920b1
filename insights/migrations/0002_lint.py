import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("insights", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Finding",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("snapshot_ref", models.BigIntegerField()),
                ("session_ref", models.BigIntegerField()),
                ("turn", models.IntegerField()),
                ("received_at", models.DateTimeField()),
                ("check_name", models.CharField(db_column="check", max_length=40)),
                ("severity", models.CharField(max_length=10)),
                ("block_keys", django.contrib.postgres.fields.ArrayField(
                    base_field=models.CharField(max_length=128), default=list, size=None)),
                ("evidence", models.TextField(blank=True, default="")),
                ("details", models.JSONField(default=dict)),
                ("project", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                              related_name="+", to="core.project")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("project", "snapshot_ref", "check_name"),
                                                        name="insights_finding_uniq")],
                "indexes": [
                    models.Index(fields=["project", "session_ref", "turn"], name="insights_finding_session_idx"),
                    models.Index(fields=["project", "check_name", "session_ref"], name="insights_finding_check_idx"),
                    models.Index(fields=["project", "received_at"], name="insights_finding_time_idx"),
                ],
            },
        ),
    ]
