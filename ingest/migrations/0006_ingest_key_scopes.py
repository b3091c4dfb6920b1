# Keys get scopes. Every existing key becomes ingest-only: starting or cancelling replays now
# needs a key created with the replay scope (README, "Projects and keys").

import django.contrib.postgres.fields
from django.db import migrations, models

import core.models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0005_ingest_rows_without_project_constraint"),
    ]

    operations = [
        migrations.AddField(
            model_name="ingestkey",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=16), default=core.models.ingest_only, size=None
            ),
        ),
    ]
