"""Trigram index for the sessions list's substring search on session ids.

`session_id__icontains` compiles to `UPPER(session_id::text) LIKE UPPER('%…%')`; a GIN trigram
index on that same expression turns the full scan of a project's sessions into an index lookup.
pg_trgm ships with PostgreSQL's contrib and is a trusted extension (PostgreSQL 13+), so a
database owner without superuser rights may create it.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            # Other objects may depend on the extension by now; leave it installed.
            migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS session_id_trgm_idx ON ingest_session "
            "USING gin (upper(session_id::text) gin_trgm_ops)",
            "DROP INDEX IF EXISTS session_id_trgm_idx",
        ),
    ]
