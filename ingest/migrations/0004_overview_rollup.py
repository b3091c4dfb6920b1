"""Daily rollup behind the project overview.

A cache derived from the snapshots and rebuilt from them at any time (ingest.dashboard.
overview_refresh), so it is plain SQL owned by the dashboard rather than a model: no foreign key,
so that flushing the model tables never has to know about it.
"""

from django.db import migrations

CREATE = """
CREATE TABLE ingest_overview_day (
    project_id bigint NOT NULL,
    day date NOT NULL,
    sessions integer NOT NULL,
    turns integer NOT NULL,
    recalled bigint NOT NULL,
    injected bigint NOT NULL,
    validated integer NOT NULL,
    failed integer NOT NULL,
    compressions bigint NOT NULL,
    max_watermark double precision NOT NULL,
    -- {bucket: [turns, validated, failed]}, {tier: [turns, seconds]}, {strategy: events}
    buckets jsonb NOT NULL,
    tiers jsonb NOT NULL,
    strategies jsonb NOT NULL,
    PRIMARY KEY (project_id, day)
);
CREATE TABLE ingest_overview_state (
    project_id bigint PRIMARY KEY,
    covered_snapshot bigint NOT NULL,
    refreshed_at timestamptz NOT NULL
);
"""

DROP = "DROP TABLE IF EXISTS ingest_overview_day; DROP TABLE IF EXISTS ingest_overview_state;"


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0003_snapshot_block_arrays"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
