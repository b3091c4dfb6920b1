"""OTLP fixtures: the real ingest API in its own process (gunicorn, on the test database) and the
embedded local model server, for agents that export their traces with the standard exporter."""

from __future__ import annotations

import os
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
from replay import localmodel
from tests.ctxobs.conftest import ApiServer

ARTIFACTS = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS", "artifacts"))


@pytest.fixture(scope="session")
def local_model() -> Iterator[localmodel.LocalModelServer]:
    """The embedded Gemma 3 270M behind llama-cpp-python's OpenAI server, on a free port."""
    server = localmodel.start(
        port=localmodel.free_port(), n_ctx=2048, log_path=ARTIFACTS / "localmodel-otlp.log"
    )
    try:
        localmodel.wait_ready(server.base_url, timeout=120, process=server.process)
        yield server
    finally:
        localmodel.stop(server)


@pytest.fixture
def otlp_server(transactional_db: Any) -> Iterator[tuple[ApiServer, Project, str]]:
    """The real API (started) serving the OTLP endpoint, a project and its ingest key."""
    from django.conf import settings

    from core.services import project_create

    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    host = str(db["HOST"])
    if host.startswith("/"):
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    else:
        port = f":{db['PORT']}" if db["PORT"] else ""
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"
    env["REDIS_URL"] = settings.REDIS_URL
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    project, key = project_create(name="otlp")
    server = ApiServer(env, ARTIFACTS / "otlp-api-server.log").start()
    try:
        yield server, project, key
    finally:
        server.stop()


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
