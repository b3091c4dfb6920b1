"""When ingest stored each session's first turn, so that ingest's per-session lookups visit only
the day partitions from there on. A nullable column without a default: adding it rewrites nothing
and takes its lock for an instant; sessions stored before it keep NULL (every partition)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0010_overview_session_counts"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="first_received",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
