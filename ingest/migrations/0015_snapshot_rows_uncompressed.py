"""Turn rows up to half a page are stored without compressing their values
(`ingest.partitions.PARTITION_OPTIONS`): the partitions made before now take the same storage
parameter. It applies to rows written from now on; the stored rows are left as they are."""

from typing import Any

from django.db import migrations

from ingest import partitions

OPTION = "toast_tuple_target"
VALUE = 4080


def _partitions(schema_editor: Any) -> list[str]:
    return [p.name for p in partitions.partitions_list("ingest_snapshot", using=schema_editor.connection.alias)]


def forwards(apps: Any, schema_editor: Any) -> None:
    for name in _partitions(schema_editor):
        schema_editor.execute(f'ALTER TABLE "{name}" SET ({OPTION} = {VALUE})')


def backwards(apps: Any, schema_editor: Any) -> None:
    for name in _partitions(schema_editor):
        schema_editor.execute(f'ALTER TABLE "{name}" RESET ({OPTION})')


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0014_compression_source"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
