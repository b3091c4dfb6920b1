"""OTLP ingest: OpenTelemetry traces and GenAI log events become context snapshots.

`decode` turns an OTLP/HTTP body (protobuf or JSON) into plain spans and log records,
`mapping` turns model-call spans into wire snapshots (pure), `services` stores them through
the same validation and batch path as the snapshot API, `api` is the HTTP surface.
"""
