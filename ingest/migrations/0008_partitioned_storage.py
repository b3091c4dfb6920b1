"""Snapshots and their per-turn child rows move to tables range-partitioned by `received_at`, one
partition per UTC day (see ingest.partitions); existing rows are copied over.

- Primary keys gain the partition column and keep `project_id` first: ingest_snapshot
  (project_id, id, received_at); compression, recall and validation rows (project_id,
  snapshot_ref, position, received_at), which now carry their turn's `received_at`.
- `snapshot_id` stays unique per project in each partition (a unique index of a partitioned table
  must contain the partition key), so the model no longer declares the table-wide constraint.
- Block and message contents record `last_seen`, the last UTC day a stored turn referenced them,
  so that retention removes a text only when no kept turn refers to it (ingest.retention).

Django's model state keeps its two- and three-column keys: the ORM reads and writes these tables
by them, which the wider real keys leave correct.
"""

from datetime import UTC, date, datetime, timedelta

from django.db import migrations, models

CHILDREN = ("ingest_compressionevent", "ingest_recallitem", "ingest_validationoutcome")
ALL = ("ingest_snapshot", *CHILDREN)

INDEXES = {
    "ingest_snapshot": [
        "CREATE INDEX snapshot_session_turn_idx ON ingest_snapshot (project_id, session_ref, turn)",
        "CREATE INDEX snapshot_ts_idx ON ingest_snapshot (project_id, ts)",
    ],
    "ingest_compressionevent": ["CREATE INDEX compression_ts_idx ON ingest_compressionevent (project_id, ts)"],
    "ingest_recallitem": [],
    "ingest_validationoutcome": [],
}
PK_PLAIN = {
    "ingest_snapshot": "project_id, id",
    **dict.fromkeys(CHILDREN, "project_id, snapshot_ref, position"),
}


def _forward_prepare(apps, schema_editor):  # type: ignore[no-untyped-def]
    with schema_editor.connection.cursor() as cur:
        for table in ALL:
            cur.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
            cur.execute(f"CREATE TABLE {table} (LIKE {table}_old INCLUDING DEFAULTS) PARTITION BY RANGE (received_at)"
                        if table == "ingest_snapshot" else
                        f"CREATE TABLE {table} (LIKE {table}_old INCLUDING DEFAULTS, received_at timestamptz NOT NULL) "
                        "PARTITION BY RANGE (received_at)")
        cur.execute("SELECT min(received_at) FROM ingest_snapshot_old")
        oldest = cur.fetchone()[0]
    # The day partitions that the existing rows need, and a week ahead.
    from ingest import partitions

    today = datetime.now(tz=UTC).date()
    start: date = min(oldest.astimezone(UTC).date(), today - timedelta(days=1)) if oldest else today - timedelta(days=1)
    partitions.partitions_ensure(start=start, today=today, using=schema_editor.connection.alias)


FORWARD_COPY = [
    "INSERT INTO ingest_snapshot SELECT * FROM ingest_snapshot_old",
    *[
        f"""INSERT INTO {t} SELECT c.*, COALESCE(s.received_at, now()) FROM {t}_old c
            LEFT JOIN ingest_snapshot_old s ON s.project_id = c.project_id AND s.id = c.snapshot_ref"""
        for t in CHILDREN
    ],
    *[f"DROP TABLE {t}_old" for t in ALL],
    "ALTER TABLE ingest_snapshot ADD CONSTRAINT ingest_snapshot_pkey PRIMARY KEY (project_id, id, received_at)",
    *[f"ALTER TABLE {t} ADD CONSTRAINT {t}_pkey PRIMARY KEY (project_id, snapshot_ref, position, received_at)"
      for t in CHILDREN],
    *[sql for t in ALL for sql in INDEXES[t]],
    # Contents: the last day a turn referred to them; existing ones (and any written without it)
    # count as seen on the day they are written.
    "ALTER TABLE ingest_blockcontent ADD COLUMN last_seen date NOT NULL DEFAULT CURRENT_DATE",
    "ALTER TABLE ingest_messagecontent ADD COLUMN last_seen date NOT NULL DEFAULT CURRENT_DATE",
    "CREATE INDEX blockcontent_last_seen_idx ON ingest_blockcontent (project_id, last_seen)",
    "CREATE INDEX messagecontent_last_seen_idx ON ingest_messagecontent (project_id, last_seen)",
]

BACKWARD = [
    "DROP INDEX IF EXISTS blockcontent_last_seen_idx",
    "DROP INDEX IF EXISTS messagecontent_last_seen_idx",
    "ALTER TABLE ingest_blockcontent DROP COLUMN last_seen",
    "ALTER TABLE ingest_messagecontent DROP COLUMN last_seen",
    *[f"ALTER TABLE {t} RENAME TO {t}_parted" for t in ALL],
    *[f"CREATE TABLE {t} (LIKE {t}_parted INCLUDING DEFAULTS)" for t in ALL],
    "INSERT INTO ingest_snapshot SELECT * FROM ingest_snapshot_parted",
    *[f"INSERT INTO {t} SELECT * FROM {t}_parted" for t in CHILDREN],
    *[f"ALTER TABLE {t} DROP COLUMN received_at" for t in CHILDREN],
    *[f"DROP TABLE {t}_parted CASCADE" for t in ALL],
    *[f"ALTER TABLE {t} ADD CONSTRAINT {t}_pkey PRIMARY KEY ({PK_PLAIN[t]})" for t in ALL],
    "ALTER TABLE ingest_snapshot ADD CONSTRAINT uniq_snapshot_id UNIQUE (project_id, snapshot_id)",
    *[sql for t in ALL for sql in INDEXES[t]],
]


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0007_tenancy_moves_to_core"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(_forward_prepare, migrations.RunPython.noop),
                migrations.RunSQL(";\n".join(FORWARD_COPY), ";\n".join(BACKWARD)),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="snapshot", name="uniq_snapshot_id"),
                *[
                    migrations.AddField(model_name=model, name="received_at", field=models.DateTimeField())
                    for model in ("compressionevent", "recallitem", "validationoutcome")
                ],
                *[
                    migrations.AddField(model_name=model, name="last_seen", field=models.DateField())
                    for model in ("blockcontent", "messagecontent")
                ],
            ],
        ),
    ]
