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
        # The embedded PostgreSQL (pgserver) ships without contrib: there the search stays a scan
        # of the project's sessions rather than failing the migration.
        migrations.RunSQL(
            """
            DO $$
            BEGIN
              IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
                CREATE EXTENSION IF NOT EXISTS pg_trgm;
                CREATE INDEX IF NOT EXISTS session_id_trgm_idx ON ingest_session
                  USING gin (upper(session_id::text) gin_trgm_ops);
              END IF;
            END
            $$;
            """,
            # Other objects may depend on the extension by now; leave it installed.
            "DROP INDEX IF EXISTS session_id_trgm_idx",
        ),
    ]
