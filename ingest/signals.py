from django.dispatch import Signal

# Sent inside the ingest transaction, before the commit, with `project_id` and `snapshot_refs`
# (new rows only). Receivers record the follow-up work they owe in their own tables, so that it is
# stored or lost together with the snapshots; an exception rolls the batch back.
snapshots_stored = Signal()
