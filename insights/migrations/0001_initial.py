import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("core", "0002_project_settings"),
    ]

    operations = [
        migrations.CreateModel(
            name="PendingAnalysis",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("snapshot_refs", django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), size=None)),
                ("created_at", models.DateTimeField()),
                ("due_at", models.DateTimeField()),
                ("sweeps", models.IntegerField(default=0)),
                ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.project")),
            ],
            options={
                "ordering": ["due_at", "id"],
                "indexes": [models.Index(fields=["due_at"], name="insights_pending_due_idx")],
            },
        ),
    ]
