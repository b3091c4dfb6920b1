"""The overview's session counts per period, kept with the daily rollup's state: counted when the
rollup is refreshed, so a view reads them instead of counting the period's sessions."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0009_session_seen_cover"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE ingest_overview_state ADD COLUMN session_counts jsonb NOT NULL DEFAULT '{}'::jsonb",
            "ALTER TABLE ingest_overview_state DROP COLUMN session_counts",
        )
    ]
