"""Snapshots and block contents keep `project_id` without a database foreign key, like the other
hot tables: the deferred per-row check (and share lock on the project row) at every ingest commit
cost more than writing the row. Deleting a project still cascades through Django."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0004_overview_rollup"),
    ]

    operations = [
        migrations.AlterField(
            model_name="blockcontent",
            name="project",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE, to="ingest.project"),
        ),
        migrations.AlterField(
            model_name="snapshot",
            name="project",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE, to="ingest.project"),
        ),
    ]
