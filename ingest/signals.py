from django.dispatch import Signal

# Sent inside the ingest transaction, before the commit, with `project_id`, `snapshot_refs` (new
# rows only) and `validation_failed_refs` (those of them with a validation outcome that did not
# pass). Receivers record the follow-up work they owe in their own tables, so that it is stored or
# lost together with the snapshots; an exception rolls the batch back. It is sent before the turn
# rows are written (and before the batch locks its sessions, so that the receivers' writes do not
# lengthen that wait): a receiver reads the new turns only after the commit (`on_commit`).
snapshots_stored = Signal()
