"""Who made a compression event (the agent, the SDK or the model provider) and whether the content
it removed is opaque (encrypted, measured by size only).

Raw SQL for the database: the table is partitioned, and a constant default adds both columns to
every partition without rewriting a row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0013_expired_turns"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql="ALTER TABLE ingest_compressionevent "
                    "ADD COLUMN source varchar(16) NOT NULL DEFAULT 'client', "
                    "ADD COLUMN opaque boolean NOT NULL DEFAULT false",
                    reverse_sql="ALTER TABLE ingest_compressionevent DROP COLUMN source, DROP COLUMN opaque",
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="compressionevent",
                    name="source",
                    field=models.CharField(default="client", max_length=16),
                ),
                migrations.AddField(
                    model_name="compressionevent",
                    name="opaque",
                    field=models.BooleanField(default=False),
                ),
            ],
        ),
    ]
