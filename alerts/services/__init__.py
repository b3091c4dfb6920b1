"""Writes of the alerts app, one module per job: `rules` (rule editing and preview),
`evaluation` (evaluation after ingest, pending evaluations and the sweeper), `episodes` (alerts
from episodes, session alert counts, alert states), `channels` (channel editing) and `delivery`
(claim, send, record)."""
