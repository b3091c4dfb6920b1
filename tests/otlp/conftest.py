"""OTLP fixtures: the real ingest API in its own process (gunicorn, on the test database) and the
embedded local model server, for agents that export their traces with the standard exporter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from core.models import Project
from tests.ctxobs.conftest import ApiServer
from tests.processes import Processes, keep_logs_on_failure, process_env


@pytest.fixture
def otlp_server(
    request: pytest.FixtureRequest, transactional_db: Any, tmp_path: Path
) -> Iterator[tuple[ApiServer, Project, str]]:
    """The real API (started) serving the OTLP endpoint, a project and its ingest key."""
    from core.services import project_create

    project, key = project_create(name="otlp")
    processes = Processes(process_env(), tmp_path / "logs")
    server = ApiServer(processes).start()
    try:
        yield server, project, key
    finally:
        server.stop()
        processes.close()
        keep_logs_on_failure(request, tmp_path / "logs")


@pytest.fixture
def traced(
    otlp_server: tuple[ApiServer, Project, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TracerProvider]:
    """OpenInference's OpenAI instrumentation exporting with the standard exporter, configured
    the documented way (OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS)."""
    server, _, key = otlp_server
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{server.url}/api/v1/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{key}")
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
