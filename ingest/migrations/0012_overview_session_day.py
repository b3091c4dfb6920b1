"""The overview's rollup per (day, session), so that a refresh recomputes only the sessions new
turns touched (ingest.dashboard.overview_refresh) and moves each day's row by the difference.

Plain SQL owned by the dashboard, like the day rollup (0004). The day rows are now the sums of
the session rows, so both are emptied here and recounted from the stored turns by the next
refresh (the beat task's, or a view's while that is cheap).
"""

from django.db import migrations

CREATE = """
CREATE TABLE ingest_overview_session_day (
    project_id bigint NOT NULL,
    day date NOT NULL,
    session_ref bigint NOT NULL,
    turns integer NOT NULL,
    recalled bigint NOT NULL,
    injected bigint NOT NULL,
    validated integer NOT NULL,
    failed integer NOT NULL,
    compressions bigint NOT NULL,
    max_watermark double precision NOT NULL,
    -- as in ingest_overview_day, for this session's turns of the day
    buckets jsonb NOT NULL,
    tiers jsonb NOT NULL,
    strategies jsonb NOT NULL,
    PRIMARY KEY (project_id, day, session_ref)
);
-- A session's previous day with turns, looked up for each session a refresh touches.
CREATE INDEX ingest_overview_session_day_session ON ingest_overview_session_day (project_id, session_ref, day);
DELETE FROM ingest_overview_day;
DELETE FROM ingest_overview_state;
-- The snapshot the last refresh read with (its xmin and xmax): the turns below its mark that it
-- may not have seen are looked at again by the next one.
ALTER TABLE ingest_overview_state ADD COLUMN seen_xmin bigint NOT NULL DEFAULT 0,
                                  ADD COLUMN seen_xmax bigint NOT NULL DEFAULT 0;
"""

DROP = """
ALTER TABLE ingest_overview_state DROP COLUMN seen_xmin, DROP COLUMN seen_xmax;
DROP TABLE IF EXISTS ingest_overview_session_day;
DELETE FROM ingest_overview_day;
DELETE FROM ingest_overview_state;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0011_session_first_received"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
