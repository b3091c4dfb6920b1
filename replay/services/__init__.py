"""Writes of the replay app, one module per job: `model_endpoints` (endpoints: create,
register the local model, default, connection test), `jobs` (plan, preview, create, cancel) and
`runs` (execution of one run under a lease, job counts, reclaiming runs whose lease ran out)."""
