"""Signals of the contamination lint."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside the transaction that stores lint findings, with project_id and snapshot_refs (the
# turns that have findings). A receiver that writes in the same transaction (the alerts app's
# evaluation debt) is stored with the findings or not at all.
findings_stored = Signal()
