from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built concurrently: ingest keeps updating sessions while the index is made.
    atomic = False

    dependencies = [
        ('core', '0002_project_settings'),
        ('ingest', '0008_partitioned_storage'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='agentsession',
            index=models.Index(fields=['project', 'last_seen'], include=('max_tier', 'alert_count'),
                               name='session_seen_cover_idx'),
        ),
    ]
