"""Turn rows up to half a page are stored without compressing their values
(`ingest.partitions.PARTITION_OPTIONS`): the partitions made before now take the same storage
parameter. It applies to rows written from now on; the stored rows are left as they are."""

from typing import Any

from django.db import migrations

from ingest import partitions


def _partitions(schema_editor: Any) -> list[str]:
    with schema_editor.connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ingest_snapshot'::regclass ORDER BY c.relname"
        )
        return [name for (name,) in cur.fetchall()]


def forwards(apps: Any, schema_editor: Any) -> None:
    options = partitions.PARTITION_OPTIONS["ingest_snapshot"]
    for name in _partitions(schema_editor):
        schema_editor.execute(f'ALTER TABLE "{name}" SET ({options})')


def backwards(apps: Any, schema_editor: Any) -> None:
    for name in _partitions(schema_editor):
        schema_editor.execute(f'ALTER TABLE "{name}" RESET (toast_tuple_target)')


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0014_compression_source"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
