"""What retention removed, so that a page or the API can tell an expired turn or session from one
that was never sent: each session's expired turn numbers (a multirange: a session's turns are
mostly consecutive, so it stays a range or a few), and for a session expired whole, a row of its
own, kept a year (ingest.retention.EXPIRED_SESSION_DAYS).

Raw SQL: Django has no multirange field, and only retention writes these and the 404 answers read
them. The column's default is a constant, so adding it rewrites nothing."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0012_overview_session_day"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[
                "ALTER TABLE ingest_session ADD COLUMN expired_turns int8multirange NOT NULL DEFAULT '{}'",
                """
                CREATE TABLE ingest_session_expired (
                    project_id bigint NOT NULL,
                    session_id varchar(256) NOT NULL,
                    expired_turns int8multirange NOT NULL,
                    expired_at timestamptz NOT NULL,
                    PRIMARY KEY (project_id, session_id)
                )
                """,
                "CREATE INDEX ingest_session_expired_at_idx ON ingest_session_expired (expired_at)",
            ],
            reverse_sql=[
                "DROP TABLE ingest_session_expired",
                "ALTER TABLE ingest_session DROP COLUMN expired_turns",
            ],
        ),
    ]
