"""A snapshot's blocks move from one `ingest_snapshotblock` row per block to parallel arrays on
the snapshot row. Existing rows are carried over; the reverse rebuilds the block rows."""

import django.contrib.postgres.fields
from django.db import migrations, models

FORWARD = """
UPDATE ingest_snapshot s SET
    block_keys = b.keys, block_kinds = b.kinds, block_hashes = b.hashes, block_tokens = b.tokens,
    block_flags = b.flags, block_refs = b.refs
FROM (
    SELECT project_id, snapshot_ref,
        array_agg(key ORDER BY position) AS keys,
        array_agg(kind ORDER BY position) AS kinds,
        array_agg(content_hash ORDER BY position) AS hashes,
        array_agg(tokens ORDER BY position) AS tokens,
        array_agg((estimated::int | (pinned::int << 1) | (compressed::int << 2))::smallint
                  ORDER BY position) AS flags,
        CASE WHEN bool_or(refs <> '[]'::jsonb) THEN jsonb_agg(refs ORDER BY position) END AS refs
    FROM ingest_snapshotblock GROUP BY project_id, snapshot_ref
) b
WHERE s.project_id = b.project_id AND s.id = b.snapshot_ref
"""

BACKWARD = """
INSERT INTO ingest_snapshotblock (project_id, snapshot_ref, position, key, kind, content_hash, tokens,
    estimated, pinned, compressed, refs)
SELECT s.project_id, s.id, (b.n - 1)::smallint, b.key, b.kind, b.hash, b.tokens,
    (b.flags & 1) <> 0, (b.flags & 2) <> 0, (b.flags & 4) <> 0,
    COALESCE(s.block_refs -> (b.n::int - 1), '[]'::jsonb)
FROM ingest_snapshot s
CROSS JOIN LATERAL unnest(s.block_keys, s.block_kinds, s.block_hashes, s.block_tokens, s.block_flags)
    WITH ORDINALITY AS b(key, kind, hash, tokens, flags, n)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0002_session_search_trgm"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="block_keys",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=128), default=list, size=None),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="block_kinds",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=20), default=list, size=None),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="block_hashes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=32), default=list, size=None),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="block_tokens",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.IntegerField(), default=list, size=None),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="block_flags",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.SmallIntegerField(), default=list, size=None),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="block_refs",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.DeleteModel(name="SnapshotBlock"),
    ]
