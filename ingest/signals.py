from django.dispatch import Signal

# Sent after the commit of an ingest batch with `project_id` and `snapshot_refs` (new rows only).
# Follow-up work (alert evaluation) subscribes here instead of ingest importing other apps.
snapshots_committed = Signal()
