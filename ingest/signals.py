from django.dispatch import Signal

# Sent inside the ingest transaction, before the commit, with `project_id` and `snapshot_refs`
# (new rows only). Receivers record the follow-up work they owe in their own tables, so that it is
# stored or lost together with the snapshots; an exception rolls the batch back.
snapshots_stored = Signal()

# Sent after the commit of an ingest batch with `project_id` and `snapshot_refs` (new rows only).
# Follow-up work (alert evaluation) subscribes here instead of ingest importing other apps.
snapshots_committed = Signal()
